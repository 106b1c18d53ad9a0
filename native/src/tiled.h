// The SIMD loops of a tiled replay (tiled_simd.inc, one copy per instruction set), chosen with the
// elementwise kernels (simd::active()).
#pragma once
#include <cstddef>
#include <cstdint>

#include "simd.h"

namespace ndvm::tiled {

struct Kernels {
  // The contributions of a tile to the adjoint of operand i (0: the first) of op, broadcast over
  // the points, added into its chains acc[kSumChains][Lo]; false for an op or layout it does not
  // cover (the caller then sums through the elementwise kernels).
  bool (*bcast)(int op, int i, double* acc, simd::View a, simd::View b, const double* go, const double* z, uint32_t m,
                uint32_t Lo);
  // The loss of a tile of m points from e0: (y - t)^2 into chains[kSumChains][Lo], and the seed of
  // the result's adjoint (mse: 2 (y - t) / n; nll: (y - t) / scales[lane]).
  void (*loss)(const double* y, const double* const* targets, uint32_t e0, const double* scales, bool nll, double nd,
               double* chains, double* seed, uint32_t m, uint32_t Lo);
  // + - * / of a tile of m elements at 2, 4, 8 or 16 lanes (the elementwise kernels' simd::Kernels
  // binary and binary_adjoint, with the lane count fixed at compile time; the adjoint only into
  // operands laid out as the output); false for another op, lane count or layout.
  bool (*binary)(int op, double* o, uint32_t m, uint32_t Lo, simd::View a, simd::View b);
  bool (*binary_adjoint)(int op, simd::View a, simd::View b, double* ga, double* gb, const double* go, const double* z,
                         uint32_t m, uint32_t Lo);
};

extern const Kernels kernels_baseline;
extern const Kernels kernels_avx2;
extern const Kernels kernels_avx512;

// The variant of the instruction set simd::active() chose.
const Kernels& active();

}  // namespace ndvm::tiled
