// Replay: recomputing a tape record's output from its inputs with the evaluator's own kernels
// (the same bits), checking a guard's outcomes, and the extra work a record is charged.
#include "linalg.h"

namespace ndvm {

using namespace kern;

// The evaluator charges these costs (linalg.cc) before an operation runs; a replay charges them
// again, once per replay (save_replay sums them over the EXTRA records).
uint64_t record_extra_work(const VM& vm, const TapeRec& t) {
  const uint64_t lanes = vm.lanes_of(t.out);
  switch (tape_kind(t.op)) {
    case TapeKind::GEMM: return cost_of(t.out.ne, lanes, t.d1);  // as VM::gemm: k per output value
    case TapeKind::INV:
    case TapeKind::DET:
    case TapeKind::CHOL: return cost_of(t.d0, t.d0, t.d0, lanes);
    case TapeKind::SOLVE: return cost_of(t.d0, t.d0, static_cast<uint64_t>(t.d0) + t.d1, lanes);
    case TapeKind::REDUCE: return t.op == O_TRACE ? cost_of(t.d0, lanes) : cost_of(t.in[0].ne, lanes);
    default: return 0;
  }
}

void forward_record(VM& vm, const TapeRec& t) {
  const NumRef* in = vm.record_inputs(t);
  const NumRef& out = t.out;
  double* o = vm.data(out);
  const uint32_t Lo = vm.lanes_of(out);
  const size_t total = static_cast<size_t>(out.numel()) * Lo;
  if (Lo == 1 &&
      tape_op_has<tapeflag::ARITH>(t.op)) {  // one lane, + - * /: the loop inline (the evaluator's arithmetic)
    const double* pa = vm.data(in[0]);
    const double* pb = vm.data(in[1]);
    const uint32_t sa = in[0].ne == 1 ? 0 : 1, sb = in[1].ne == 1 ? 0 : 1;
    const uint32_t n = out.numel();
    switch (t.op) {
      case O_ADD:
        for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] + pb[i * sb];
        break;
      case O_SUB:
        for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] - pb[i * sb];
        break;
      case O_MUL:
        for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] * pb[i * sb];
        break;
      default:
        for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] / pb[i * sb];
        break;
    }
    if (vm.prog->f32) round_f32(o, n);
    return;
  }
  switch (tape_kind(t.op)) {
    case TapeKind::BINARY:
      fwd2(static_cast<Op>(t.op), o, out.numel(), Lo, view(vm, in[0], true), view(vm, in[1], true));
      break;
    case TapeKind::UNARY: unary_loop(static_cast<Op>(t.op), vm.data(in[0]), o, total); break;
    case TapeKind::SLICE: {
      const double* src = vm.data(in[0]) + static_cast<size_t>(t.d0) * Lo;
      for (size_t i = 0; i < total; ++i) o[i] = src[i];
      break;
    }
    case TapeKind::CONCAT: concat_compute(vm, in, t.nin == 255 ? static_cast<int>(t.d2) : t.nin, o, Lo); break;
    case TapeKind::TRANSPOSE: transpose_compute(vm, in[0], o, t.d0, t.d1, Lo); break;
    case TapeKind::GEMM: gemm_compute(vm, in[0], in[1], o, t.d0, t.d1, t.d2, Lo); break;
    case TapeKind::REDUCE:
    case TapeKind::DET: reduce_compute(vm, static_cast<Op>(t.op), in[0], o, Lo, static_cast<int>(t.d0)); break;
    case TapeKind::INV: inv_compute(vm, in[0], o, static_cast<int>(t.d0), Lo); break;
    case TapeKind::SOLVE: solve_compute(vm, in[0], in[1], o, static_cast<int>(t.d0), static_cast<int>(t.d1), Lo); break;
    case TapeKind::CHOL: chol_compute(vm, in[0], o, static_cast<int>(t.d0), Lo); break;
    case TapeKind::ROUNDING: rounding_loop(static_cast<Op>(t.op), vm.data(in[0]), o, total); break;
    case TapeKind::INTDIV:
      int_div_loop(static_cast<Op>(t.op), view(vm, in[0], true), view(vm, in[1], true), o, Lo, nullptr);
      break;
    case TapeKind::GUARD: return;
  }
  // float32 programs round what the evaluator rounds
  if (vm.prog->f32 && tape_op_has<tapeflag::F32>(t.op)) round_f32(o, total);
}

bool guard_holds(VM& vm, const TapeRec& t) {
  const NumRef* in = vm.record_inputs(t);
  int n = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
  uint8_t* m = vm.lane_mask_buf(vm.L);
  int prim = static_cast<int>(t.d0);
  if (prim == P_EQVP) eqv_mask(vm, in[0], in[1], m);
  else if (prim == P_NUM_EQ || prim == P_LT || prim == P_GT || prim == P_LE || prim == P_GE)
    compare_mask(vm, prim, in, n, m);
  else pred_mask(vm, prim, in[0], m, nullptr);
  return std::memcmp(m, vm.guard_outcomes(t), vm.L) == 0;
}

}  // namespace ndvm
