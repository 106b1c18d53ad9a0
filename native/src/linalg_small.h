// The table of small matrix-product kernels (linalg_simd.inc, one copy per instruction set) that
// linalg.h calls: no standard-library header beyond the fixed-width types, so that the per-ISA
// units (kernels_*.cc) can include it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ndvm::kern {

// (A, B, out, lanes) and (A, B, out's cotangent, A's adjoint or null, B's or null, lanes)
using std::size_t;
using GemmFwd = void (*)(const double*, const double*, double*, uint32_t);
using GemmBwd = void (*)(const double*, const double*, const double*, double*, double*, uint32_t);

// The kernels of small matrix products (every dimension at most 3, as in state-space models) with
// the dimensions known at compile time: the forward one and the backward ones for A's adjoint
// only, B's only, and both; indexed (m - 1) * 9 + (k - 1) * 3 + (n - 1).
struct GemmKernels {
  GemmFwd fwd;
  GemmBwd bwd_a, bwd_b, bwd_ab;
};
struct GemmTable {
  GemmKernels k[27];
  // the 2x2 closed forms of linalg_2x2.h: inverse (a, y, n lanes, lane stride), the inverse's
  // adjoint (y, go, ga, ...) and det's or logdet's (a, go, z, ga, ..., log)
  void (*inv2)(const double*, double*, size_t, size_t);
  void (*inv2_adjoint)(const double*, const double*, double*, size_t, size_t);
  void (*det2_adjoint)(const double*, const double*, const double*, double*, size_t, size_t, bool);
  // out = x + s * u for a per-lane scalar s, a uniform u and x lane-varying (x_ls 1) or uniform
  // (x_ls 0), n elements over Lo lanes: the records (* s u) and (+ x that) in one pass; and its
  // adjoint into gx (null: inactive) and gs, n from 2 to 4 (x, s, u, out, n, Lo; go, gx, u, gs, n, Lo)
  void (*scaled_add)(const double*, uint32_t, const double*, const double*, double*, uint32_t, size_t);
  void (*scaled_add_adjoint)(const double*, double*, const double*, double*, uint32_t, size_t);
};

namespace baseline {
extern const GemmTable kSmallGemm;
}
namespace avx2 {
extern const GemmTable kSmallGemm;
}
namespace avx512 {
extern const GemmTable kSmallGemm;
}

// The table for the instruction set chosen for this process (linalg.cc)
const GemmTable& small_gemm_table();

}  // namespace ndvm::kern
