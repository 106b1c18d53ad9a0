// The elementwise kernels that run at SIMD width: one implementation (kernels_simd.inc) compiled
// once per instruction set (kernels_baseline.cc, kernels_avx2.cc, kernels_avx512.cc) and chosen
// once per process (simd.cc) from what the CPU supports, or from NDVM_ISA. Every variant computes
// the same IEEE operations in the same order (no contraction into FMA, no reassociation), so a
// lane gets the same bits whatever the batch width, the instruction set or the position of an
// element in a vector body or its scalar tail.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ndvm::simd {

// A read view of a value inside a run of L lanes: element stride and lane stride.
struct View {
  const double* p;
  uint32_t es;  // 0: a scalar broadcast over the elements
  uint32_t ls;  // 0: uniform (one lane shared)
};

struct Kernels {
  const char* isa;  // "baseline", "avx2", "avx512"
  // True for the tape ops these kernels compute (binary: + - * / expt atan2; unary: the vector-math ops).
  bool (*has_binary)(int op);
  bool (*has_unary)(int op);
  // o[i, l] = a[i, l] op b[i, l] over n elements and Lo lanes (the output is [n][Lo], contiguous).
  void (*binary)(int op, double* o, uint32_t n, uint32_t Lo, View a, View b);
  // o[i] = op(x[i]) over a contiguous run
  void (*unary)(int op, const double* x, double* o, size_t total);
  // ga += go * d out/d a, gb += go * d out/d b (either may be null: inactive). An operand broadcast
  // over the elements (es == 0) sums its contributions in the order of combine_chains.
  void (*binary_adjoint)(int op, View a, View b, double* ga, double* gb, const double* go, const double* z, uint32_t n,
                         uint32_t Lo);
  // ga[i] += go[i] * d op / dx at x[i] (output z[i])
  void (*unary_adjoint)(int op, const double* x, const double* z, const double* go, double* ga, size_t total);
  // One element's d out / d a (operand 0) or d out / d b (1) of expt or atan2, as binary_adjoint
  // computes it (for the adjoints of uniform operands, summed over lanes by the caller).
  double (*binary_derivative)(int op, int operand, double x, double y, double z);
};

// The order in which the adjoint of a value broadcast over n > 1 elements is summed, shared by
// the kernels and the inline one-lane paths: element i goes to chain i mod kSumChains, and the
// chains are added pairwise. One lane then sums in kSumChains independent chains (a vector
// register) instead of one dependent chain, and every lane count sums in the same order.
constexpr uint32_t kSumChains = 8;
// static: internal linkage, so that no AVX-512 copy of it can replace the others at link time.
static inline double combine_chains(const double* c, size_t stride) {
  return ((c[0] + c[stride]) + (c[2 * stride] + c[3 * stride])) +
         ((c[4 * stride] + c[5 * stride]) + (c[6 * stride] + c[7 * stride]));
}

// The instruction sets, lowest first; each variant exists in every build.
enum class Isa { Baseline = 0, Avx2 = 1, Avx512 = 2 };

extern const Kernels kernels_baseline;
extern const Kernels kernels_avx2;
extern const Kernels kernels_avx512;

// The kernels chosen for this process: the best the CPU supports, or the one NDVM_ISA names
// (baseline, avx2, avx512; an unknown or unsupported name is an error at first use).
const Kernels& active();
// The name of the chosen instruction set ("baseline", "avx2", "avx512").
const char* isa_name();
// The instruction sets this CPU can run, lowest first.
const char* const* supported_isas(int* count);

}  // namespace ndvm::simd
