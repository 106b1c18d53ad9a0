// The evaluator's linear algebra: matrix products, inverse, solve, Cholesky and the reductions,
// each charged to the work budget before it runs and recorded on the tape. The kernels are in
// linalg.h.
#include "linalg.h"

namespace ndvm {

using namespace kern;

namespace kern {
namespace {

// Small matrix products (every dimension at most 3, as in state-space models) over lanes, with
// the dimensions known at compile time: a lane's operands are read once and its outputs summed in
// registers instead of read-modify-write passes over lane arrays. The arithmetic of a lane is the
// same as the one-lane loops' (q ascending from 0; i, j, q order in backward; a zero cotangent
// adds nothing), so a lane's bits do not depend on the batch width. Operands are lane-varying.
template <int M, int K, int N>
void gemm_fwd_small(const double* __restrict A, const double* __restrict B, double* __restrict O, uint32_t lanes) {
  const size_t Lo = lanes;  // size_t index arithmetic: 32-bit indices could wrap, which defeats contiguous vector loads
  if (Lo == 1) {            // one lane: straight-line code, no vector loop set-up
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double acc = 0;
        for (int q = 0; q < K; ++q) acc += A[i * K + q] * B[q * N + j];
        O[i * N + j] = acc;
      }
    return;
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const double* a[K];
      const double* b[K];
      for (int q = 0; q < K; ++q) {
        a[q] = A + (i * K + q) * Lo;
        b[q] = B + (q * N + j) * Lo;
      }
      double* __restrict o = O + (i * N + j) * Lo;
      for (size_t l = 0; l < Lo; ++l) {
        double acc = 0;
        for (int q = 0; q < K; ++q) acc += a[q][l] * b[q][l];
        o[l] = acc;
      }
    }
}

// ga[i,q] += sum over j of g[i,j] b[q,j] and gb[q,j] += sum over i of g[i,j] a[i,q], each sum
// added term by term in ascending order (the order of the one-lane loops). A zero cotangent adds
// nothing even against an infinite operand: the operand, not the product, is selected, which
// keeps the loop free of branches so that it vectorizes.
template <int M, int K, int N, bool DA, bool DB>
void gemm_bwd_small(const double* __restrict A, const double* __restrict B, const double* __restrict G,
                    double* __restrict GA, double* __restrict GB, uint32_t lanes) {
  const size_t Lo = lanes;
  if (Lo == 1) {  // one lane: straight-line code with the same arithmetic
    if (DA)
      for (int i = 0; i < M; ++i)
        for (int q = 0; q < K; ++q) {
          double t = GA[i * K + q];
          for (int j = 0; j < N; ++j) {
            const double g = G[i * N + j], b = B[q * N + j];
            t += g * (g != 0 ? b : 0.0);
          }
          GA[i * K + q] = t;
        }
    if (DB)
      for (int q = 0; q < K; ++q)
        for (int j = 0; j < N; ++j) {
          double t = GB[q * N + j];
          for (int i = 0; i < M; ++i) {
            const double g = G[i * N + j], a = A[i * K + q];
            t += g * (g != 0 ? a : 0.0);
          }
          GB[q * N + j] = t;
        }
    return;
  }
  if (DA)
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < K; ++q) {
        double* __restrict d = GA + (i * K + q) * Lo;
        for (size_t l = 0; l < Lo; ++l) {
          double t = d[l];
#pragma GCC unroll 4
          for (int j = 0; j < N; ++j) {
            const double g = G[(i * N + j) * Lo + l], b = B[(q * N + j) * Lo + l];
            t += g * (g != 0 ? b : 0.0);
          }
          d[l] = t;
        }
      }
  if (DB)
    for (int q = 0; q < K; ++q)
      for (int j = 0; j < N; ++j) {
        double* __restrict d = GB + (q * N + j) * Lo;
        for (size_t l = 0; l < Lo; ++l) {
          double t = d[l];
#pragma GCC unroll 4
          for (int i = 0; i < M; ++i) {
            const double g = G[(i * N + j) * Lo + l], a = A[(i * K + q) * Lo + l];
            t += g * (g != 0 ? a : 0.0);
          }
          d[l] = t;
        }
      }
}

template <int M, int K, int N>
constexpr GemmKernels gemm_entry() {
  return {gemm_fwd_small<M, K, N>, gemm_bwd_small<M, K, N, true, false>, gemm_bwd_small<M, K, N, false, true>,
          gemm_bwd_small<M, K, N, true, true>};
}

template <int M, int K>
constexpr void fill_n(GemmKernels* t) {
  t[0] = gemm_entry<M, K, 1>();
  t[1] = gemm_entry<M, K, 2>();
  t[2] = gemm_entry<M, K, 3>();
}

}  // namespace

constexpr GemmTable::GemmTable() : k{} {
  fill_n<1, 1>(k + 0);
  fill_n<1, 2>(k + 3);
  fill_n<1, 3>(k + 6);
  fill_n<2, 1>(k + 9);
  fill_n<2, 2>(k + 12);
  fill_n<2, 3>(k + 15);
  fill_n<3, 1>(k + 18);
  fill_n<3, 2>(k + 21);
  fill_n<3, 3>(k + 24);
}
constexpr GemmTable kSmallGemm{};

}  // namespace kern

Value VM::gemm(const Value& a, const Value& b, uint32_t m, uint32_t k, uint32_t n, int out_rank, uint32_t out_rows,
               uint32_t out_cols) {
  bool uni = a.uniform() && b.uniform();
  Value out = alloc_num(out_rank, out_rows, out_cols, uni);
  uint32_t Lo = uni ? 1 : L;
  // k multiply-adds per output value, charged before they run: m*n*Lo < 2^32 (allocated) and
  // k < 2^32, so the product fits in 64 bits
  charge_op(static_cast<uint64_t>(m) * n * Lo * k);
  gemm_compute(*this, a, b, data(out), m, k, n, Lo);
  if (prog->f32) round_f32(data(out), static_cast<size_t>(m) * n * Lo);
  if (recording && (a.active() || b.active())) record2(O_GEMM, out, a, b, m, k, n);
  return out;
}

namespace {
// The dense linear algebra indexes an n x n (and n x m) matrix with ints: refuse larger ones (they
// are also far over the default memory and work budgets).
void linalg_guard(uint64_t n, uint64_t m, const Node* site) {
  if (n * n > INT32_MAX || n * m > INT32_MAX)
    limit_error("'" + (site ? site->name : std::string("linear algebra")) + "': a " + std::to_string(n) + "x" +
                    std::to_string(n) + " system is too large for the runtime's linear algebra (at most 2^31 elements)",
                site ? site->line : 0, site ? site->col : 0);
}
}  // namespace

// A singular (or not positive definite) matrix that is the same in every lane is an error of the
// program; one that depends on the parameters gives NaN in its lane, which calibration freezes.
// Each operation is charged to the work budget before it runs (the costs of record_extra_work).
Value VM::inv(const Value& a, const Node* site) {
  int n = static_cast<int>(a.rows);
  linalg_guard(a.rows, a.rows, site);
  charge_op(cost_of(n, n, n, lanes_of(a)), site);
  Value out = alloc_num(2, n, n, a.uniform(), site);
  uint32_t lanes = lanes_of(a);
  inv_compute(*this, a, data(out), n, lanes);
  if (a.uniform()) {
    const double* x = data(a);
    if (n == 2 ? !(x[0] * x[3] - x[1] * x[2] != 0) : std::isnan(data(out)[0]))
      err_at(site, "'inv': the matrix is singular");
  }
  if (prog->f32) round_f32(data(out), static_cast<size_t>(n) * n * lanes);
  if (recording && a.active()) record1(O_INV, out, a, n);
  return out;
}

Value VM::solve(const Value& a, const Value& b, const Node* site) {
  linalg_guard(a.rows, b.cols(), site);
  int n = static_cast<int>(a.rows);
  int m = static_cast<int>(b.cols());
  bool uni = a.uniform() && b.uniform();
  uint32_t lanes = uni ? 1 : L;
  charge_op(cost_of(n, n, static_cast<uint64_t>(n) + m, lanes), site);
  Value out = alloc_num(b.rank, b.rows, b.cols(), uni, site);
  solve_compute(*this, a, b, data(out), n, m, lanes);
  if (prog->f32) round_f32(data(out), static_cast<size_t>(n) * m * lanes);
  if (recording && (a.active() || b.active())) record2(O_SOLVE, out, a, b, n, m);
  return out;
}

Value VM::cholesky(const Value& a, const Node* site) {
  linalg_guard(a.rows, a.rows, site);
  int n = static_cast<int>(a.rows);
  charge_op(cost_of(n, n, n, lanes_of(a)), site);
  Value out = alloc_num(2, n, n, a.uniform(), site);
  bool ok = chol_compute(*this, a, data(out), n, lanes_of(a));
  if (!ok && a.uniform()) err_at(site, "'cholesky': the matrix is not positive definite");
  if (recording && a.active()) record1(O_CHOL, out, a, n);
  return out;
}

Value VM::reduce(Op op, const Value& a) {
  uint32_t lanes = lanes_of(a);
  if (op == O_DET || op == O_LOGDET) {
    linalg_guard(a.rows, a.rows, op_site);
    charge_op(cost_of(a.rows, a.rows, a.rows, lanes));
  } else {
    charge_op(cost_of(op == O_TRACE ? a.rows : a.numel(), lanes));
  }
  Value out = alloc_num(0, 1, 1, a.uniform());
  int n = static_cast<int>(a.rows);
  reduce_compute(*this, op, a, data(out), lanes, n);
  if (prog->f32) round_f32(data(out), lanes);
  if (recording && a.active()) record1(op, out, a, n);
  return out;
}

}  // namespace ndvm
