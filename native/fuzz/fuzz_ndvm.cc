// libFuzzer harness for the NDVM runtime: bytes -> reader -> checker -> compiler -> VM (values,
// batched lanes with divergence, reverse mode) and the canonical form used for deduplication.
//
// With parameters, a 3-step fused calibration (Adam, L-BFGS or GD by input size) runs as well.
//
// Every failure a program can cause must surface as ndvm::Error (Parse, Check, Eval, Limit);
// anything else -- a crash, a sanitizer report, another exception type, a hang past libFuzzer's
// -timeout -- is a runtime bug. Limits are small so that runaway programs end quickly.
//
// Build and run: scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
//
// NDVM_FUZZ_TOLERATE_STD_EXCEPTIONS=1 (triage runs only) lets a std::exception that is not an
// ndvm::Error pass, so that one known bug of that kind does not hide the others.
//
// NDVM_FUZZ_STRUCTURED=1 (FUZZ_MODE=structured scripts/fuzz.sh) reads each input as a recipe for
// a hostile program (structured.h) instead of as program text; NDVM_FUZZ_PRINT=1 prints the first
// 400 characters of each program it runs (to see what a recipe in build/fuzz/artifacts/ builds).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "error.h"
#include "optim.h"
#include "program.h"
#include "structured.h"
#include "vm.h"

namespace {

ndvm::Limits small_limits() {
  ndvm::Limits lim;
  lim.max_steps = 200'000;
  lim.max_depth = 2'000;
  lim.max_bytes = 64ull << 20;
  lim.max_work = 50'000'000;  // element operations (linear algebra at its real cost)
  return lim;
}

// Inputs for every free variable: alternately a scalar, a 3-vector and a 2x2 matrix, so the
// broadcasting and linear-algebra paths meet all three ranks. One lane input exercises per_lane.
ndvm::Inputs make_inputs(const ndvm::Program& p, int lanes) {
  ndvm::Inputs in;
  in.shared.resize(p.inputs.size());
  in.per_lane.resize(p.inputs.size());
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    ndvm::Array a;
    switch (i % 3) {
      case 0:
        a.rank = 0;
        a.data = {0.75};
        break;
      case 1:
        a.rank = 1;
        a.rows = 3;
        a.data = {0.5, -1.25, 2.0};
        break;
      default:
        a.rank = 2;
        a.rows = 2;
        a.cols = 2;
        a.data = {2.0, 0.5, 0.5, 1.5};
        break;
    }
    if (i == 3 && lanes > 1) {
      for (int l = 0; l < lanes; ++l) {
        ndvm::Array lane = a;
        lane.data[0] += 0.5 * l;
        in.per_lane[i].push_back(lane);
      }
    } else {
      in.shared[i] = a;
    }
  }
  return in;
}

}  // namespace

static int fuzz_one(const std::string& source);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool tolerate = std::getenv("NDVM_FUZZ_TOLERATE_STD_EXCEPTIONS") != nullptr;
  static const bool structured = std::getenv("NDVM_FUZZ_STRUCTURED") != nullptr;
  static const bool print = std::getenv("NDVM_FUZZ_PRINT") != nullptr;
  const std::string source =
      structured ? ndvm_fuzz::generate(data, size) : std::string(reinterpret_cast<const char*>(data), size);
  if (print) std::fprintf(stderr, "program (%zu chars): %.400s\n", source.size(), source.c_str());
  if (!tolerate) return fuzz_one(source);  // a stray exception terminates: libFuzzer reports it
  try {
    return fuzz_one(source);
  } catch (const std::exception&) {  // not an ndvm::Error (those are caught in fuzz_one)
    return 0;
  }
}

static int fuzz_one(const std::string& source) {
  static std::unique_ptr<ndvm::VM> vm = ndvm::make_vm();  // reused like the Python module's per-thread VM
  const ndvm::Limits lim = small_limits();
  const size_t size = source.size();

  try {
    (void)ndvm::canonical_form(source);
  } catch (const ndvm::Error&) {}

  std::shared_ptr<ndvm::Program> prog;
  try {
    prog = ndvm::compile_program(source, /*f32=*/size % 7 == 0, lim.max_bytes);
  } catch (const ndvm::Error&) { return 0; }

  const size_t P = prog->params.size();
  // One lane at the declared initial values: any result type.
  try {
    std::vector<double> theta;
    for (const auto& d : prog->params) theta.push_back(d.init);
    ndvm::Inputs in = make_inputs(*prog, 1);
    (void)ndvm::run_one(*prog, *vm, theta.data(), in, lim);
  } catch (const ndvm::Error&) {}

  // Three lanes spread around the inits (they may diverge at comparisons), values and gradients.
  const int B = 3;
  std::vector<double> theta(B * P);
  for (int l = 0; l < B; ++l)
    for (size_t j = 0; j < P; ++j) theta[l * P + j] = prog->params[j].init + 0.6 * (l - 1);
  ndvm::Inputs in = make_inputs(*prog, B);
  try {
    (void)ndvm::run_batch(*prog, *vm, theta.data(), B, in, /*grad=*/false, nullptr, lim);
  } catch (const ndvm::Error&) {}
  try {
    ndvm::LossSpec value;  // LossKind::Value: needs a scalar result, else an Eval error
    (void)ndvm::run_batch(*prog, *vm, theta.data(), B, in, /*grad=*/true, &value, lim);
  } catch (const ndvm::Error&) {}
  try {
    ndvm::LossSpec mse;
    mse.kind = ndvm::LossKind::MSE;
    mse.target = {0.5, 1.0, -0.5};
    (void)ndvm::run_batch(*prog, *vm, theta.data(), B, in, /*grad=*/true, &mse, lim);
  } catch (const ndvm::Error&) {}
  // Tape replay oracle: the same program at nearby parameters on the same VM (replayed when the
  // previous run recorded and no guard fails) must give the bits of a walk on a fresh VM.
  {
    std::vector<double> near = theta;
    for (size_t i = 0; i < near.size(); ++i) near[i] += 1e-3 * static_cast<double>((i % 3) + 1);
    ndvm::LossSpec value;
    std::string got_error, want_error;
    ndvm::BatchResult got, want;
    try {
      got = ndvm::run_batch(*prog, *vm, near.data(), B, in, /*grad=*/true, &value, lim);
    } catch (const ndvm::Error& e) { got_error = e.what(); }
    auto fresh = ndvm::make_vm();
    try {
      want = ndvm::run_batch(*prog, *fresh, near.data(), B, in, /*grad=*/true, &value, lim);
    } catch (const ndvm::Error& e) { want_error = e.what(); }
    auto same_bits = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), sizeof(double) * a.size()) == 0);
    };
    if (got_error != want_error || !same_bits(got.values, want.values) || !same_bits(got.grads, want.grads)) {
      std::fprintf(stderr, "replay differs from a fresh walk: error '%s' vs '%s'\n", got_error.c_str(),
                   want_error.c_str());
      __builtin_trap();
    }
  }
  if (P > 0) {
    ndvm::CalibSpec spec;
    spec.optimizer = size % 3 == 0   ? ndvm::Optimizer::Adam
                     : size % 3 == 1 ? ndvm::Optimizer::LBFGS
                                     : ndvm::Optimizer::GD;
    spec.steps = 3;
    spec.loss.kind = size % 2 ? ndvm::LossKind::Value : ndvm::LossKind::GaussianNLL;
    spec.loss.target = {0.5, 1.0, -0.5};
    try {
      (void)ndvm::calibrate(*prog, *vm, theta.data(), B, in, spec, lim);
    } catch (const ndvm::Error&) {}
  }
  return 0;
}
