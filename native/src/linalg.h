// Dense linear algebra over lanes, forward and adjoint: small matrix products with the dimensions
// known at compile time, LU, inverse, solve, Cholesky, the reductions, and the per-lane adjoints of
// det, logdet, inv, cholesky and solve. Header-only: the evaluator (linalg.cc), replay (replay.cc)
// and backward (backward.cc) inline them into their loops.
#pragma once
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels.h"
#include "linalg_2x2.h"
#include "linalg_small.h"

namespace ndvm::kern {

// The specialized kernels for an m x k by k x n product over `lanes` lanes, or nullptr. One lane
// takes the baseline copy: its straight-line code gains nothing from wider vectors, and the
// constant table spares the check of which instruction set was chosen.
inline const GemmKernels* small_gemm(uint32_t m, uint32_t k, uint32_t n, uint32_t lanes) {
  if (m < 1 || m > 3 || k < 1 || k > 3 || n < 1 || n > 3) return nullptr;
  const GemmTable& table = lanes == 1 ? baseline::kSmallGemm : small_gemm_table();
  return &table.k[(m - 1) * 9 + (k - 1) * 3 + (n - 1)];
}

// Internal linkage in every unit that includes this header, as when these kernels lived in one
// file: the compiler inlines a kernel into its one caller per unit (the replay and evaluator loops)
// instead of calling a shared out-of-line copy.
namespace {

// A kernel longer than this many multiply-adds checks the wall clock (Limits.max_seconds) as it goes.
constexpr uint64_t kPollWork = 1u << 22;

// Row i of an n^3 loop over an n x n matrix: checks the wall clock every 16 rows once n >= 128
// (16 rows of n^2 multiply-adds: about kPollWork), so max_seconds stops a large factorization or
// adjoint mid-way rather than after it.
inline void poll_row(VM& vm, int n, int i) {
  if (n >= 128 && (i & 15) == 0) vm.poll_clock(nullptr);
}

// ---- 2x2 closed forms over lanes (linalg_2x2.h; det2_lanes here: it calls the C library's log) --
// det A, or log det A (NaN / -inf for a non-positive determinant)
inline void det2_lanes(const double* a, double* o, size_t n, size_t Lo, bool log) {
  const double *a0 = a, *a1 = a0 + Lo, *a2 = a1 + Lo, *a3 = a2 + Lo;
  if (log)
    for (size_t l = 0; l < n; ++l) o[l] = std::log(a0[l] * a3[l] - a1[l] * a2[l]);
  else
    for (size_t l = 0; l < n; ++l) o[l] = a0[l] * a3[l] - a1[l] * a2[l];
}

// The 2x2 closed forms of the chosen instruction set for 4 lanes or more, the baseline copy below
// (as small_gemm: no vector gain; the same bits either way).
inline const GemmTable& wide_table(size_t lanes) { return lanes < 4 ? baseline::kSmallGemm : small_gemm_table(); }

template <class V>
inline void gemm_compute(VM& vm, const V& a, const V& b, double* o, uint32_t m, uint32_t k, uint32_t n, uint32_t Lo) {
  View va = view(vm, a, false), vb = view(vm, b, false);
  const bool poll = cost_of(m, k, n, Lo) > kPollWork;
  const GemmKernels* small = small_gemm(m, k, n, Lo);
  if (small && (Lo == 1 || (va.ls && vb.ls))) {
    small->fwd(va.p, vb.p, o, Lo);
    return;
  }
  if (Lo == 1) {  // one lane (B = 1 or both uniform): a plain small matrix product
    const double* A = va.p;
    const double* Bm = vb.p;
    for (uint32_t i = 0; i < m; ++i) {
      if (poll) vm.poll_clock(nullptr);
      for (uint32_t j = 0; j < n; ++j) {
        double acc = 0;
        for (uint32_t q = 0; q < k; ++q) acc += A[i * k + q] * Bm[q * n + j];
        o[i * n + j] = acc;
      }
    }
    return;
  }
  std::memset(o, 0, sizeof(double) * m * n * Lo);
  for (uint32_t i = 0; i < m; ++i) {
    if (poll) vm.poll_clock(nullptr);
    for (uint32_t j = 0; j < n; ++j) {
      double* po = o + (static_cast<size_t>(i) * n + j) * Lo;
      for (uint32_t q = 0; q < k; ++q) {
        const double* pa = va.p + (static_cast<size_t>(i) * k + q) * va.es;
        const double* pb = vb.p + (static_cast<size_t>(q) * n + j) * vb.es;
        if (va.ls && vb.ls)
          for (uint32_t l = 0; l < Lo; ++l) po[l] += pa[l] * pb[l];
        else if (va.ls) {
          double y = *pb;
          for (uint32_t l = 0; l < Lo; ++l) po[l] += pa[l] * y;
        } else if (vb.ls) {
          double x = *pa;
          for (uint32_t l = 0; l < Lo; ++l) po[l] += x * pb[l];
        } else po[0] += *pa * *pb;
      }
    }
  }
}

// LU decomposition with partial pivoting of one n x n matrix (row-major, in place).
// Returns the sign of the permutation, or 0 when singular. `poll`: checks the wall clock every few
// columns of a large matrix. n * n fits in an int (linalg_guard).
[[gnu::noinline]] inline int lu(double* A, int n, int* piv, VM* poll = nullptr) {
  int sign = 1;
  if (n < 128) poll = nullptr;
  for (int i = 0; i < n; ++i) piv[i] = i;
  for (int c = 0; c < n; ++c) {
    if (poll && c % 16 == 0) poll->poll_clock(nullptr);
    int p = c;
    double best = std::fabs(A[c * n + c]);
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(A[r * n + c]) > best) {
        best = std::fabs(A[r * n + c]);
        p = r;
      }
    if (best == 0 || !std::isfinite(best)) return 0;
    if (p != c) {
      for (int j = 0; j < n; ++j) std::swap(A[c * n + j], A[p * n + j]);
      std::swap(piv[c], piv[p]);
      sign = -sign;
    }
    for (int r = c + 1; r < n; ++r) {
      double f = A[r * n + c] /= A[c * n + c];
      for (int j = c + 1; j < n; ++j) A[r * n + j] -= f * A[c * n + j];
    }
  }
  return sign;
}

// Solves LU X = P B for X (B: n x m, row-major), overwriting B.
[[gnu::noinline]] inline void lu_solve(const double* LU, const int* piv, int n, double* B, int m, double* tmp) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) tmp[i * m + j] = B[piv[i] * m + j];
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < i; ++k)
      for (int j = 0; j < m; ++j) tmp[i * m + j] -= LU[i * n + k] * tmp[k * m + j];
  for (int i = n - 1; i >= 0; --i) {
    for (int k = i + 1; k < n; ++k)
      for (int j = 0; j < m; ++j) tmp[i * m + j] -= LU[i * n + k] * tmp[k * m + j];
    for (int j = 0; j < m; ++j) tmp[i * m + j] /= LU[i * n + i];
  }
  std::memcpy(B, tmp, sizeof(double) * n * m);
}

// Gathers lane l of a matrix value into dense row-major storage.
template <class V>
inline void gather(VM& vm, const V& v, uint32_t l, double* dst) {
  uint32_t lanes = vm.lanes_of(v), ls = v.uniform() ? 0 : 1;
  const double* p = vm.data(v);
  for (uint32_t e = 0; e < v.numel(); ++e) dst[e] = p[static_cast<size_t>(e) * lanes + l * ls];
}
template <class V>
inline void scatter_add(VM& vm, const V& v, uint32_t l, const double* src) {
  uint32_t lanes = vm.lanes_of(v), ls = v.uniform() ? 0 : 1;
  double* p = vm.adjoint(v);
  for (uint32_t e = 0; e < v.numel(); ++e) p[static_cast<size_t>(e) * lanes + l * ls] += src[e];
}

// Inverse of an n x n matrix; fills with NaN when singular (that lane's loss becomes non-finite).
[[gnu::noinline]] inline void invert(const double* A, int n, double* out, double* work, int* piv, double* tmp,
                                     VM* poll = nullptr) {
  std::memcpy(work, A, sizeof(double) * n * n);
  if (!lu(work, n, piv, poll)) {
    for (int i = 0; i < n * n; ++i) out[i] = NAN;
    return;
  }
  for (int i = 0; i < n * n; ++i) out[i] = 0;
  for (int i = 0; i < n; ++i) out[i * n + i] = 1;
  lu_solve(work, piv, n, out, n, tmp);
}

// Inverses of an n x n matrix in each of `lanes` lanes; NaN in a lane where it is singular.
template <class V>
inline void inv_compute(VM& vm, const V& a, double* o, int n, uint32_t lanes) {
  if (n == 2) {  // closed form, vectorized over lanes: the common case of small state-space models
    wide_table(lanes).inv2(vm.data(a), o, lanes, lanes);
    return;
  }
  const size_t nn = static_cast<size_t>(n) * n;
  double* A = vm.scratch_for(4 * nn + 8, n);
  int* piv = vm.pivots();
  double *Y = A + nn, *W = Y + nn, *T = W + nn;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, l, A);
    invert(A, n, Y, W, piv, T, &vm);
    for (int e = 0; e < n * n; ++e) o[static_cast<size_t>(e) * lanes + l] = Y[e];
  }
}

template <class V>
inline void solve_compute(VM& vm, const V& a, const V& b, double* o, int n, int m, uint32_t lanes) {
  const size_t nn = static_cast<size_t>(n) * n, nm = static_cast<size_t>(n) * m;
  double* A = vm.scratch_for(nn + 2 * nm + 8, n);
  int* piv = vm.pivots();
  double *X = A + nn, *T = X + nm;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, a.uniform() ? 0 : l, A);
    gather(vm, b, b.uniform() ? 0 : l, X);
    if (!lu(A, n, piv, &vm))
      for (int i = 0; i < n * m; ++i) X[i] = NAN;
    else lu_solve(A, piv, n, X, m, T);
    for (int e = 0; e < n * m; ++e) o[static_cast<size_t>(e) * lanes + l] = X[e];
  }
}

// Cholesky factors; NaN in a lane where the matrix is not positive definite. Returns false when
// some lane is not.
template <class V>
inline bool chol_compute(VM& vm, const V& a, double* o, int n, uint32_t lanes) {
  double* A = vm.scratch_for(2 * static_cast<size_t>(n) * n + 8);
  double* C = A + static_cast<size_t>(n) * n;
  bool all_ok = true;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, l, A);
    for (int i = 0; i < n * n; ++i) C[i] = 0;
    bool ok = true;
    for (int j = 0; j < n && ok; ++j) {
      poll_row(vm, n, j);
      double s = A[j * n + j];
      for (int k = 0; k < j; ++k) s -= C[j * n + k] * C[j * n + k];
      if (!(s > 0)) {
        ok = false;
        break;
      }
      double d = std::sqrt(s);
      C[j * n + j] = d;
      for (int i = j + 1; i < n; ++i) {
        double t = A[i * n + j];  // reads the lower triangle only
        for (int k = 0; k < j; ++k) t -= C[i * n + k] * C[j * n + k];
        C[i * n + j] = t / d;
      }
    }
    if (!ok)
      for (int i = 0; i < n * n; ++i) C[i] = NAN;  // not positive definite in this lane
    all_ok &= ok;
    for (int e = 0; e < n * n; ++e) o[static_cast<size_t>(e) * lanes + l] = C[e];
  }
  return all_ok;
}

// trace vsum norm det logdet of a (ne elements; n x n for the matrix reductions), per lane
template <class V>
inline void reduce_compute(VM& vm, Op op, const V& a, double* o, uint32_t lanes, int n) {
  const double* x = vm.data(a);
  uint32_t ne = a.numel();
  switch (op) {
    case O_VSUM:
    case O_NORM:
      if (lanes == 1) {  // the sum in a register (o may alias x for the compiler: a store per element
        double s = 0;    // makes a store-to-load chain); the same additions in the same order
        if (op == O_VSUM)
          for (uint32_t e = 0; e < ne; ++e) s += x[e];
        else
          for (uint32_t e = 0; e < ne; ++e) s += x[e] * x[e];
        o[0] = op == O_NORM ? std::sqrt(s) : s;
        break;
      }
      for (uint32_t l = 0; l < lanes; ++l) o[l] = 0;
      for (uint32_t e = 0; e < ne; ++e)
        for (uint32_t l = 0; l < lanes; ++l) {
          double v = x[static_cast<size_t>(e) * lanes + l];
          o[l] += op == O_VSUM ? v : v * v;
        }
      if (op == O_NORM)
        for (uint32_t l = 0; l < lanes; ++l) o[l] = std::sqrt(o[l]);
      break;
    case O_TRACE:
      for (uint32_t l = 0; l < lanes; ++l) o[l] = 0;
      for (int i = 0; i < n; ++i)
        for (uint32_t l = 0; l < lanes; ++l) o[l] += x[static_cast<size_t>(i * n + i) * lanes + l];
      break;
    case O_DET:
    case O_LOGDET: {
      if (n == 2) {  // closed form over lanes (lanes is 1 for a uniform matrix)
        det2_lanes(x, o, lanes, lanes, op == O_LOGDET);
        break;
      }
      double* A = vm.scratch_for(static_cast<size_t>(n) * n + 8, n);
      int* piv = vm.pivots();
      for (uint32_t l = 0; l < lanes; ++l) {
        gather(vm, a, l, A);
        vm.poll_clock(nullptr);
        int sign = lu(A, n, piv, &vm);
        double det = sign;
        for (int i = 0; i < n && sign; ++i) det *= A[i * n + i];
        if (!sign) det = 0;
        o[l] = op == O_DET ? det : std::log(det);  // logdet of a non-positive determinant: NaN / -inf
      }
      break;
    }
    default: break;
  }
}

// ---- adjoints ------------------------------------------------------------------------------
// Each adds d objective / d input into the inputs' adjoints, given the output's cotangent `go` ([elements, Lo]).

// out[m, n] = A[m, k] B[k, n]: gA += G B^T, gB += A^T G (only for the active operands)
inline void gemm_adjoint(VM& vm, const NumRef& a, const NumRef& b, const double* go, uint32_t m, uint32_t k,
                         uint32_t nn, uint32_t Lo) {
  View va = view(vm, a, false), vb = view(vm, b, false);
  const bool poll = cost_of(m, k, nn, Lo) > kPollWork;
  double* ga = a.active() ? vm.adjoint(a) : nullptr;
  double* gb = b.active() ? vm.adjoint(b) : nullptr;
  const GemmKernels* small = small_gemm(m, k, nn, Lo);
  if (small && (Lo == 1 || (va.ls && vb.ls)) && ga != gb) {  // (matmul X X): the generic loops
    (ga && gb ? small->bwd_ab : ga ? small->bwd_a : small->bwd_b)(va.p, vb.p, go, ga, gb, Lo);
    return;
  }
  if (Lo == 1) {
    for (uint32_t i = 0; i < m; ++i) {
      if (poll) vm.poll_clock(nullptr);
      for (uint32_t j = 0; j < nn; ++j) {
        double g = go[i * nn + j];
        if (g == 0) continue;
        for (uint32_t q = 0; q < k; ++q) {
          if (ga) ga[i * k + q] += g * vb.p[q * nn + j];
          if (gb) gb[q * nn + j] += g * va.p[i * k + q];
        }
      }
    }
    return;
  }
  if (va.ls && vb.ls) {  // both lane-varying: contiguous lane loops
    for (uint32_t i = 0; i < m; ++i) {
      if (poll) vm.poll_clock(nullptr);
      for (uint32_t j = 0; j < nn; ++j) {
        const double* g = go + (static_cast<size_t>(i) * nn + j) * Lo;
        for (uint32_t q = 0; q < k; ++q) {
          size_t ea = (static_cast<size_t>(i) * k + q) * Lo, eb = (static_cast<size_t>(q) * nn + j) * Lo;
          if (ga) {
            double* d = ga + ea;
            const double* y = vb.p + eb;
            for (uint32_t l = 0; l < Lo; ++l) d[l] += g[l] * y[l];
          }
          if (gb) {
            double* d = gb + eb;
            const double* x = va.p + ea;
            for (uint32_t l = 0; l < Lo; ++l) d[l] += g[l] * x[l];
          }
        }
      }
    }
    return;
  }
  for (uint32_t i = 0; i < m; ++i) {
    if (poll) vm.poll_clock(nullptr);
    for (uint32_t j = 0; j < nn; ++j) {
      const double* g = go + (static_cast<size_t>(i) * nn + j) * Lo;
      for (uint32_t q = 0; q < k; ++q) {
        size_t ea = (static_cast<size_t>(i) * k + q), eb = (static_cast<size_t>(q) * nn + j);
        for (uint32_t l = 0; l < Lo; ++l) {
          if (ga) ga[ea * va.es + l * va.ls] += g[l] * vb.p[eb * vb.es + l * vb.ls];
          if (gb) gb[eb * vb.es + l * vb.ls] += g[l] * va.p[ea * va.es + l * va.ls];
        }
      }
    }
  }
}

// The scratch of the per-lane adjoints of an n x n matrix: six n x n blocks and n pivots.
struct AdjointScratch {
  double *A, *Ainv, *G, *R, *W, *T;
  int* piv;
  AdjointScratch(VM& vm, int d) {
    size_t dd = static_cast<size_t>(d) * d;
    A = vm.scratch_for(6 * dd + 8, d);
    piv = vm.pivots();
    Ainv = A + dd;
    G = Ainv + dd;
    R = G + dd;
    W = R + dd;
    T = W + dd;
  }
};

// d det = det A^-T, d logdet = A^-T, lane by lane (z: the determinants or their logarithms)
inline void det_adjoint(VM& vm, const NumRef& a, const double* go, const double* z, int d, uint32_t Lo, bool log) {
  if (d == 2 && !a.uniform()) {  // closed form, vectorized over lanes
    wide_table(Lo).det2_adjoint(vm.data(a), go, z, vm.adjoint(a), Lo, Lo, log);
    return;
  }
  AdjointScratch s(vm, d);
  for (uint32_t l = 0; l < Lo; ++l) {
    double g = go[l];
    if (g == 0) continue;
    gather(vm, a, l, s.A);
    if (d == 2) {
      double det = s.A[0] * s.A[3] - s.A[1] * s.A[2];
      s.Ainv[0] = s.A[3] / det;
      s.Ainv[1] = -s.A[1] / det;
      s.Ainv[2] = -s.A[2] / det;
      s.Ainv[3] = s.A[0] / det;
    } else {
      invert(s.A, d, s.Ainv, s.W, s.piv, s.T, &vm);
    }
    double f = log ? g : g * z[l];
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) s.R[i * d + j] = f * s.Ainv[j * d + i];
    scatter_add(vm, a, l, s.R);
  }
}

// Y = A^-1: gA += -Y^T G Y^T, lane by lane
inline void inv_adjoint(VM& vm, const NumRef& a, const NumRef& out, const double* go, int d, uint32_t Lo) {
  if (d == 2 && !a.uniform()) {  // closed form, vectorized over lanes
    wide_table(Lo).inv2_adjoint(vm.data(out), go, vm.adjoint(a), Lo, Lo);
    return;
  }
  AdjointScratch s(vm, d);
  const size_t dd = static_cast<size_t>(d) * d;
  for (uint32_t l = 0; l < Lo; ++l) {
    gather(vm, out, l, s.Ainv);  // Y
    for (size_t e = 0; e < dd; ++e) s.G[e] = go[e * Lo + l];
    for (int i = 0; i < d; ++i) {
      poll_row(vm, d, i);
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int p = 0; p < d; ++p) acc += s.Ainv[p * d + i] * s.G[p * d + j];
        s.W[i * d + j] = acc;
      }
    }
    for (int i = 0; i < d; ++i) {
      poll_row(vm, d, i);
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int p = 0; p < d; ++p) acc += s.W[i * d + p] * s.Ainv[j * d + p];
        s.R[i * d + j] = -acc;
      }
    }
    scatter_add(vm, a, l, s.R);
  }
}

// L = cholesky(A), lane by lane (Murray 2016): S = L^-T Phi(L^T Lbar) L^-1, folded onto the lower
// triangle that the factorization reads
inline void chol_adjoint(VM& vm, const NumRef& a, const NumRef& out, const double* go, int d, uint32_t Lo) {
  AdjointScratch s(vm, d);
  const size_t dd = static_cast<size_t>(d) * d;
  for (uint32_t l = 0; l < Lo; ++l) {
    gather(vm, out, l, s.A);  // L
    for (size_t e = 0; e < dd; ++e) s.G[e] = go[e * Lo + l];
    // P = Phi(L^T Lbar): lower triangle, diagonal halved
    for (int i = 0; i < d; ++i) {
      poll_row(vm, d, i);
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int p = 0; p < d; ++p) acc += s.A[p * d + i] * s.G[p * d + j];
        s.W[i * d + j] = j > i ? 0 : (j == i ? 0.5 * acc : acc);
      }
    }
    // S = L^-T P L^-1, via Linv
    invert(s.A, d, s.Ainv, s.T, s.piv, s.R, &vm);
    for (int i = 0; i < d; ++i) {
      poll_row(vm, d, i);
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int p = 0; p < d; ++p) acc += s.Ainv[p * d + i] * s.W[p * d + j];
        s.T[i * d + j] = acc;
      }
    }
    for (int i = 0; i < d; ++i) {
      poll_row(vm, d, i);
      for (int j = 0; j < d; ++j) {
        double acc = 0;
        for (int p = 0; p < d; ++p) acc += s.T[i * d + p] * s.Ainv[p * d + j];
        s.G[i * d + j] = acc;
      }
    }
    // the algorithm reads only the lower triangle: fold the symmetric gradient onto it
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) {
        double sym = 0.5 * (s.G[i * d + j] + s.G[j * d + i]);
        s.R[i * d + j] = j > i ? 0 : (j == i ? sym : 2 * sym);
      }
    scatter_add(vm, a, l, s.R);
  }
}

// x = A^-1 b, lane by lane: gb += A^-T g, gA += -(A^-T g) x^T
inline void solve_adjoint(VM& vm, const NumRef& a, const NumRef& b, const NumRef& out, const double* go, int d, int m,
                          uint32_t Lo) {
  size_t dd = static_cast<size_t>(d) * d, dm = static_cast<size_t>(d) * m;
  double* A = vm.scratch_for(3 * dd + 3 * dm + 8, d);
  int* piv = vm.pivots();
  double *AT = A + dd, *X = AT + dd, *GB = X + dm, *T = GB + dm, *RA = T + dm;
  for (uint32_t l = 0; l < Lo; ++l) {
    gather(vm, a, a.uniform() ? 0 : l, A);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) AT[i * d + j] = A[j * d + i];
    for (size_t e = 0; e < dm; ++e) GB[e] = go[e * Lo + l];
    if (!lu(AT, d, piv, &vm))
      for (size_t e = 0; e < dm; ++e) GB[e] = NAN;
    else lu_solve(AT, piv, d, GB, m, T);
    if (b.active()) scatter_add(vm, b, l, GB);
    if (a.active()) {
      gather(vm, out, l, X);
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
          double acc = 0;
          for (int p = 0; p < m; ++p) acc += GB[i * m + p] * X[j * m + p];
          RA[i * d + j] = -acc;
        }
      scatter_add(vm, a, l, RA);
    }
  }
}

}  // namespace
}  // namespace ndvm::kern
