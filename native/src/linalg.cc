// The evaluator's linear algebra: matrix products, inverse, solve, Cholesky and the reductions,
// each charged to the work budget before it runs and recorded on the tape. The kernels are in
// linalg.h.
#include "linalg.h"
#include "simd.h"

namespace ndvm {

using namespace kern;

namespace kern {

// The small-product kernels of the instruction set the elementwise kernels use (simd.cc chooses
// it once per process).
const GemmTable& small_gemm_table() {
  static const GemmTable& chosen = &simd::active() == &simd::kernels_avx512 ? avx512::kSmallGemm
                                   : &simd::active() == &simd::kernels_avx2 ? avx2::kSmallGemm
                                                                            : baseline::kSmallGemm;
  return chosen;
}

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
