// The 2x2 closed forms over lanes (inverse, and the adjoints of inv, det and logdet), written once
// and compiled into every unit that includes this header with that unit's flags: linalg.h (the
// evaluator, replay and backward, inline) and linalg_simd.inc (one copy per instruction set, for
// wide lane counts). Internal linkage, and no standard-library header (as linalg_simd.inc needs).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ndvm::kern {
namespace {

using std::size_t;

// live ? p : 0.0 for live = (g != 0), in integer operations: GCC does not vectorize a select on a
// floating-point comparison under -ftrapping-math (the default). Not +-0 is exactly "!= 0" (NaN
// included); the result is p's bits or +0's.
inline double unless_zero(double g, double p) {
  uint64_t gb, pb;
  __builtin_memcpy(&gb, &g, sizeof gb);
  __builtin_memcpy(&pb, &p, sizeof pb);
  pb &= 0 - static_cast<uint64_t>((gb << 1) != 0);
  double out;
  __builtin_memcpy(&out, &pb, sizeof out);
  return out;
}

// Each runs `n` lanes of 2x2 matrices whose element e of a lane is at e * Lo (Lo == n for a whole
// batch; the separate stride lets a caller run a range of a batch's lanes). The evaluator, replay
// and backward all compute through these, so a lane's bits are the same on every path.

// Y = A^-1 (NaN in a lane where A is singular)
inline void inv2_lanes(const double* __restrict a, double* __restrict y, size_t n, size_t Lo) {
  const double *a0 = a, *a1 = a0 + Lo, *a2 = a1 + Lo, *a3 = a2 + Lo;
  double *y0 = y, *y1 = y0 + Lo, *y2 = y1 + Lo, *y3 = y2 + Lo;
  for (size_t l = 0; l < n; ++l) {
    double det = a0[l] * a3[l] - a1[l] * a2[l];
    y0[l] = a3[l] / det;
    y1[l] = -a1[l] / det;
    y2[l] = -a2[l] / det;
    y3[l] = a0[l] / det;
  }
}

// d det = det A^-T, d logdet = A^-T (z: the determinants or their logarithms; go: one cotangent
// per lane); a zero cotangent adds nothing
template <bool LOG>
inline void det2_adjoint_as(const double* __restrict a, const double* __restrict go, const double* __restrict z,
                            double* __restrict g, size_t n, size_t Lo) {
  const double *a0 = a, *a1 = a0 + Lo, *a2 = a1 + Lo, *a3 = a2 + Lo;
  double *g0 = g, *g1 = g0 + Lo, *g2 = g1 + Lo, *g3 = g2 + Lo;
  for (size_t l = 0; l < n; ++l) {
    const double det = a0[l] * a3[l] - a1[l] * a2[l];
    const double s = (LOG ? go[l] : go[l] * z[l]) / det;  // A^-T = [a3 -a2; -a1 a0] / det
    // Selected rather than skipped, so that the loop vectorizes: adding +0 leaves an adjoint as it
    // was (adjoints start at +0 and only accumulate, so none is -0).
    g0[l] += unless_zero(go[l], s * a3[l]);
    g1[l] -= unless_zero(go[l], s * a2[l]);
    g2[l] -= unless_zero(go[l], s * a1[l]);
    g3[l] += unless_zero(go[l], s * a0[l]);
  }
}

inline void det2_adjoint_lanes(const double* a, const double* go, const double* z, double* g, size_t n, size_t Lo,
                               bool log) {
  if (log) det2_adjoint_as<true>(a, go, z, g, n, Lo);
  else det2_adjoint_as<false>(a, go, z, g, n, Lo);
}

// Y = A^-1: gA += -Y^T G Y^T (y: Y, go: G)
inline void inv2_adjoint_lanes(const double* __restrict y, const double* __restrict go, double* __restrict g, size_t n,
                               size_t Lo) {
  double *g0 = g, *g1 = g0 + Lo, *g2 = g1 + Lo, *g3 = g2 + Lo;
  const double *y0 = y, *y1 = y0 + Lo, *y2 = y1 + Lo, *y3 = y2 + Lo;
  const double *h0 = go, *h1 = h0 + Lo, *h2 = h1 + Lo, *h3 = h2 + Lo;
  for (size_t l = 0; l < n; ++l) {
    // W = Y^T G, R = -W Y^T
    double w0 = y0[l] * h0[l] + y2[l] * h2[l], w1 = y0[l] * h1[l] + y2[l] * h3[l];
    double w2 = y1[l] * h0[l] + y3[l] * h2[l], w3 = y1[l] * h1[l] + y3[l] * h3[l];
    g0[l] -= w0 * y0[l] + w1 * y1[l];
    g1[l] -= w0 * y2[l] + w1 * y3[l];
    g2[l] -= w2 * y0[l] + w3 * y1[l];
    g3[l] -= w2 * y2[l] + w3 * y3[l];
  }
}

}  // namespace
}  // namespace ndvm::kern
