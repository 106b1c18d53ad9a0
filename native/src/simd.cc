// The choice of elementwise kernels (simd.h): once per process, the widest instruction set the CPU
// supports, or the one NDVM_ISA names.
#include "simd.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ndvm::simd {

namespace {

const char* const kNames[] = {"baseline", "avx2", "avx512"};
const Kernels* const kTables[] = {&kernels_baseline, &kernels_avx2, &kernels_avx512};

bool cpu_runs(Isa isa) {
  switch (isa) {
    case Isa::Baseline: return true;
    case Isa::Avx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
    case Isa::Avx512:
      __builtin_cpu_init();
      return cpu_runs(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

std::string supported_list() {
  std::string s;
  for (int i = 0; i < 3; ++i)
    if (cpu_runs(static_cast<Isa>(i))) s += std::string(s.empty() ? "" : ", ") + kNames[i];
  return s;
}

const Kernels& choose() {
  const char* forced = std::getenv("NDVM_ISA");
  if (forced && *forced) {
    const std::string name(forced);
    for (int i = 0; i < 3; ++i)
      if (name == kNames[i]) {
        if (!cpu_runs(static_cast<Isa>(i)))
          throw std::invalid_argument("NDVM_ISA=" + name + ": this CPU does not support it (it supports " +
                                      supported_list() + ")");
        return *kTables[i];
      }
    throw std::invalid_argument("NDVM_ISA='" + name +
                                "' is not an instruction set: expected baseline, avx2 or avx512 (this CPU supports " +
                                supported_list() + ")");
  }
  for (int i = 2; i > 0; --i)
    if (cpu_runs(static_cast<Isa>(i))) return *kTables[i];
  return kernels_baseline;
}

}  // namespace

const Kernels& active() {
  static const Kernels& chosen = choose();
  return chosen;
}

const char* isa_name() { return active().isa; }

const char* const* supported_isas(int* count) {
  static const char* list[3];
  static const int n = [] {
    int k = 0;
    for (int i = 0; i < 3; ++i)
      if (cpu_runs(static_cast<Isa>(i))) list[k++] = kNames[i];
    return k;
  }();
  *count = n;
  return list;
}

}  // namespace ndvm::simd
