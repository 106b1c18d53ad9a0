// Replay: recomputing a tape record's output from its inputs with the evaluator's own kernels
// (the same bits), checking a guard's outcomes, the extra work a record is charged, and the
// driver that keeps a recorded run and re-executes its tape (VM::save_replay, VM::try_replay).
#include <cstring>
#include <unordered_map>

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
    arith_one_lane(static_cast<Op>(t.op), o, pa, pb, n, sa, sb);
    if (vm.program().f32) round_f32(o, n);
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
  if (vm.program().f32 && tape_op_has<tapeflag::F32>(t.op)) round_f32(o, total);
}

bool guard_holds(VM& vm, const TapeRec& t) {
  const NumRef* in = vm.record_inputs(t);
  int n = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
  uint8_t* m = vm.lane_mask_buf(vm.lane_count());
  int prim = static_cast<int>(t.d0);
  if (prim == P_EQVP) eqv_mask(vm, in[0], in[1], m);
  else if (prim == P_NUM_EQ || prim == P_LT || prim == P_GT || prim == P_LE || prim == P_GE)
    compare_mask(vm, prim, in, n, m);
  else pred_mask(vm, prim, in[0], m, nullptr);
  return std::memcmp(m, vm.guard_outcomes(t), vm.lane_count()) == 0;
}

// ---- one-lane plans: the tape decoded once (PlanStep, vm.h) -----------------------------------

namespace {

// + - * of N elements, each operand a scalar broadcast (stride 0) or N elements (stride 1): the
// evaluator's one-lane arithmetic (arith_one_lane) with the shape fixed.
template <int OP, uint32_t N, uint32_t SA, uint32_t SB>
void arith_step(double* pay, const PlanStep& s) {
  double* o = pay + s.out;
  const double* x = pay + s.a;
  const double* y = pay + s.b;
  for (uint32_t i = 0; i < N; ++i) {
    const double u = x[i * SA], v = y[i * SB];
    o[i] = OP == O_ADD ? u + v : OP == O_SUB ? u - v : u * v;
  }
}

template <int OP, uint32_t N>
PlanStep::Fwd arith_step_for(uint32_t sa, uint32_t sb) {
  if (sa) return sb ? arith_step<OP, N, 1, 1> : arith_step<OP, N, 1, 0>;
  return sb ? arith_step<OP, N, 0, 1> : arith_step<OP, N, 0, 0>;
}

template <int OP>
PlanStep::Fwd arith_step_for(uint32_t n, uint32_t sa, uint32_t sb) {
  switch (n) {
    case 1: return arith_step_for<OP, 1>(0, 0);
    case 2: return arith_step_for<OP, 2>(sa, sb);
    case 3: return arith_step_for<OP, 3>(sa, sb);
    case 4: return arith_step_for<OP, 4>(sa, sb);
    default: return nullptr;
  }
}

void gemm_step(double* pay, const PlanStep& s) { s.gemm_fwd(pay + s.a, pay + s.b, pay + s.out, 1); }

void gemm_adjoint_step(const double* pay, double* adj, const PlanStep& s) {
  s.gemm_bwd(pay + s.a, pay + s.b, adj + s.out, s.a_active ? adj + s.a : nullptr, s.b_active ? adj + s.b : nullptr, 1);
}

// 2x2 inverse and (log) determinant of one lane: the closed forms the evaluator uses (linalg_2x2.h)
void inv2_step(double* pay, const PlanStep& s) { inv2_lanes(pay + s.a, pay + s.out, 1, 1); }
template <bool LOG>
void det2_step(double* pay, const PlanStep& s) {
  det2_lanes(pay + s.a, pay + s.out, 1, 1, LOG);
}
void inv2_adjoint_step(const double* pay, double* adj, const PlanStep& s) {
  inv2_adjoint_lanes(pay + s.out, adj + s.out, adj + s.a, 1, 1);
}
template <bool LOG>
void det2_adjoint_step(const double* pay, double* adj, const PlanStep& s) {
  det2_adjoint_lanes(pay + s.a, adj + s.out, pay + s.out, adj + s.a, 1, 1, LOG);
}

}  // namespace

// The kernels chosen here are the ones forward_record and backward_one_lane reach for the same
// record (arith_one_lane's inline loop below 16 elements, the baseline small products), so a plan
// computes the same bits; the records it does not cover keep null and go the general way.
void VM::build_plan() {
  std::vector<PlanStep>& plan = replay.plan;
  plan.clear();
  if (L != 1 || prog->f32) return;  // float32 rounds after each record: the general path
  plan.resize(tape.size());
  for (size_t i = 0; i < tape.size(); ++i) {
    const TapeRec& t = tape[i];
    PlanStep& s = plan[i];
    if (t.nin == 1 && t.d0 == 2 && (t.op == O_INV || t.op == O_DET || t.op == O_LOGDET)) {
      s.out = t.out.n.off;
      s.a = t.in[0].n.off;
      s.n = t.out.numel();
      s.a_active = t.in[0].active();
      s.fwd = t.op == O_INV ? inv2_step : t.op == O_DET ? det2_step<false> : det2_step<true>;
      // inv_adjoint and det_adjoint take the closed forms for a lane-varying matrix only
      if (s.a_active && !t.in[0].uniform())
        s.bwd = t.op == O_INV ? inv2_adjoint_step : t.op == O_DET ? det2_adjoint_step<false> : det2_adjoint_step<true>;
      continue;
    }
    if (t.nin != 2) continue;
    s.out = t.out.n.off;
    s.a = t.in[0].n.off;
    s.b = t.in[1].n.off;
    s.n = t.out.numel();
    s.a_active = t.in[0].active();
    s.b_active = t.in[1].active();
    const uint32_t sa = t.in[0].ne == 1 ? 0 : 1, sb = t.in[1].ne == 1 ? 0 : 1;
    switch (t.op) {
      case O_ADD: s.fwd = arith_step_for<O_ADD>(s.n, sa, sb); break;
      case O_SUB: s.fwd = arith_step_for<O_SUB>(s.n, sa, sb); break;
      case O_MUL: s.fwd = arith_step_for<O_MUL>(s.n, sa, sb); break;
      case O_GEMM: {
        const GemmKernels* k = small_gemm(t.d0, t.d1, t.d2, 1);
        if (!k) break;
        s.gemm_fwd = k->fwd;
        s.fwd = gemm_step;
        // backward_one_lane's condition: some operand active, and not one matrix times itself
        if ((s.a_active || s.b_active) && !(s.a_active && s.b_active && s.a == s.b)) {
          s.gemm_bwd = s.a_active && s.b_active ? k->bwd_ab : s.a_active ? k->bwd_a : k->bwd_b;
          s.bwd = gemm_adjoint_step;
        }
        break;
      }
      default: break;
    }
    if (t.op == O_ADD || t.op == O_SUB || t.op == O_MUL) s.bwd = plan_backward(t.op, s.n, sa, sb);
  }
}

// Pairs (* s U) (+ X that), as `(+ P (* q I))` of a filter step: s a per-lane active scalar, U a
// uniform constant matrix of 2-4 elements, X of U's shape (lane-varying, or uniform and inactive),
// the product read by that sum alone. Replay and backward run each pair in one pass over the lanes
// (GemmTable::scaled_add): the product and its adjoint are never stored. Same bits: the pass rounds
// as the two records do, and their adjoints are summed in the same order.
void VM::find_scaled_adds() {
  std::vector<uint8_t>& fused = replay.fused;
  fused.clear();
  if (L == 1 || prog->f32 || tape.size() < 2) return;
  std::unordered_map<uint32_t, uint32_t> reads;  // payload offset -> records reading it
  for (const TapeRec& t : tape) {
    const NumRef* in = record_inputs(t);
    const int n = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
    for (int k = 0; k < n; ++k) ++reads[in[k].n.off];
  }
  if (replay.result.tag == T_NUM) ++reads[replay.result.n.off];  // the result is read by the driver
  fused.assign(tape.size(), 0);
  bool any = false;
  for (size_t i = 0; i + 1 < tape.size(); ++i) {
    const TapeRec& p = tape[i];
    const TapeRec& a = tape[i + 1];
    const uint32_t n = p.out.numel();
    const bool product = p.op == O_MUL && p.nin == 2 && p.in[0].ne == 1 && !p.in[0].uniform() && p.in[0].active() &&
                         p.in[1].uniform() && !p.in[1].active() && p.in[1].ne == n && n >= 2 && n <= 4;
    const bool sum = a.op == O_ADD && a.nin == 2 && a.in[1].n.off == p.out.n.off && a.in[0].n.off != p.out.n.off &&
                     a.in[0].ne == n && a.out.numel() == n && !(a.in[0].uniform() && a.in[0].active());
    if (product && sum && reads[p.out.n.off] == 1) {
      fused[i] = kFoldedProduct;
      fused[i + 1] = kScaledAdd;
      any = true;
      ++i;
    }
  }
  if (!any) fused.clear();
}

// ---- the replay driver ----------------------------------------------------------------------
// When a gradient run walks the program over all lanes without a divergence, the VM keeps its
// tape and arena. The next gradient run of the same program over as many lanes, with the same
// inputs and limits, then re-executes the tape with the new parameters instead of walking the
// program: structure (lists, closures, exact integers, shapes) cannot have changed, because every
// decision that read a parameter-dependent number is a guard on the tape (comparisons, numeric
// predicates, eqv? of numbers), checked lane by lane. A guard that fails, or any error, falls back
// to an ordinary run, which also records afresh. Values and gradients are the walked run's, bit
// for bit: replay computes with the evaluator's own kernels.

namespace {
bool same_limits(const Limits& a, const Limits& b) {
  return a.max_steps == b.max_steps && a.max_depth == b.max_depth && a.max_bytes == b.max_bytes &&
         a.max_work == b.max_work && a.max_seconds == b.max_seconds;
}
}  // namespace

void VM::save_replay(size_t params_end, size_t inputs_end, const Value& result) {
  Replay& r = replay;
  r.prog = prog;
  r.serial = prog->serial;
  r.lanes = L;
  r.params_end = params_end;
  r.inputs_end = inputs_end;
  r.top = pay_top;
  r.inputs.assign(pay + params_end, pay + inputs_end);
  r.result = result;
  r.limits = *lim;
  // charged once per replay, before it runs: the tape and its dimensions do not change
  r.extra_work = 0;
  uint64_t outputs = 0;  // elements of the records' outputs (their adjoints are zeroed before each replay)
  for (const TapeRec& t : tape) {
    if (tape_op_has<tapeflag::EXTRA>(t.op)) r.extra_work += record_extra_work(*this, t);
    if (t.op != O_GUARD) outputs += static_cast<uint64_t>(t.out.numel()) * lanes_of(t.out);
  }
  // Every record's output lies in [inputs_end, top). When that span is small (one lane's scalars and
  // small matrices), one memset there beats a small one per record, unless most of the span is
  // values no record wrote (inactive: no adjoint needed). A large span is zeroed record by record,
  // each adjoint just before its record's output is written, while both are in cache.
  constexpr uint64_t kSpanDoubles = 1u << 15;
  const uint64_t span = pay_top - inputs_end;
  r.zero_span = span <= kSpanDoubles && 2 * outputs >= span;
  build_plan();
  find_scaled_adds();
  plan_tiles(result);
  r.valid = true;
}

// A replay that gives up is not charged to the work budget: the walk it falls back to gets the
// whole budget, so an evaluation passes or fails its budgets alike with replay on or off.
bool VM::replay_matches(const Program& p, int lanes, const Limits& l) const {
  const Replay& r = replay;
  // valid: the last reset() was the recorded run's, so prog is r.prog (and p when they match)
  return l.replay && r.valid && r.prog == &p && r.serial == p.serial && r.lanes == lanes && same_limits(r.limits, l);
}

bool VM::try_replay(const Program& p, const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                    const std::vector<int>* lane_map, const Limits& l) {
  if (!replay_matches(p, static_cast<int>(lanes.size()), l)) return false;
  work += pay_top;  // the lane group before this one (a chunk of the same batch; 0 after begin_evaluation)
  pay_top = 0;
  const uint64_t work0 = work;
  if (replay_tape(theta, P, lanes, in, lane_map, l)) return true;
  work = work0;
  pay_top = 0;  // reset() folds nothing of the abandoned replay into the work
  return false;
}

// A record without a decoded step: a guard's check, or the adjoint zeroed and forward_record. Out
// of line, so that the loop over decoded steps stays a few instructions per record.
bool VM::replay_record(size_t i, bool zero_each) {
  const TapeRec& t = tape[i];
  if (t.op == O_GUARD) return guard_holds(*this, t);
  if (replay.fused.size() == tape.size() && replay.fused[i]) {
    // the product of a pair is computed with its sum, and nothing else reads it or its adjoint
    if (replay.fused[i] == kFoldedProduct) return true;
    const TapeRec& product = tape[i - 1];
    if (zero_each) std::memset(adjoint(t.out), 0, sizeof(double) * t.out.numel() * lanes_of(t.out));
    wide_table(L).scaled_add(data(t.in[0]), t.in[0].uniform() ? 0 : 1, data(product.in[0]), data(product.in[1]),
                             data(t.out), t.out.numel(), L);
    return true;
  }
  if (zero_each) {
    // the adjoint, zeroed as recording does; a plain loop here measured 5 us (of 18) faster on
    // the one-lane Kalman replay than VM::zero_adjoint's constant-size memsets
    double* g = adjoint(t.out);
    size_t n = static_cast<size_t>(t.out.numel()) * lanes_of(t.out);
    if (n <= 4)
      for (size_t i = 0; i < n; ++i) g[i] = 0.0;
    else std::memset(g, 0, sizeof(double) * n);
  }
  forward_record(*this, t);
  return true;
}

bool VM::replay_tape(const double* theta, int P, const std::vector<int>& lanes, const Inputs& in,
                     const std::vector<int>* lane_map, const Limits& l) {
  Replay& r = replay;
  r.valid = false;  // until the replay has succeeded: the arena is being rewritten
  ++r.fell_back;    // counted back below when it succeeds
  lim = &l;
  pay_top = prog->const_payload.size();
  size_t params_end = load(theta, P, lanes, in, true, nullptr, lane_map);  // the same offsets
  if (params_end != r.params_end || pay_top != r.inputs_end ||
      (!r.inputs.empty() && std::memcmp(pay + r.params_end, r.inputs.data(), sizeof(double) * r.inputs.size()) != 0))
    return false;  // other inputs (or lanes of other data): walk the program
  pay_top = r.top;
  try {
    // A replay is charged as its walk was, before it runs: its outputs' elements through the arena
    // (pay_top is the walk's), its products and linear algebra as r.extra_work. The wall clock, when
    // set, is checked every kCheck records. Past a budget, the replay gives up and the walk it
    // falls back to reports the error with its place.
    charge(r.extra_work);
    constexpr size_t kCheck = 1024;
    const bool clock = l.max_seconds > 0;
    const bool zero_each = !r.zero_span;
    if (r.zero_span) std::memset(adj + r.inputs_end, 0, sizeof(double) * (r.top - r.inputs_end));
    const PlanStep* plan = r.plan.size() == tape.size() ? r.plan.data() : nullptr;
    for (size_t i = 0; i < tape.size(); ++i) {
      if (clock && (i + 1) % kCheck == 0) poll_clock(nullptr);
      if (plan && plan[i].fwd) {
        if (zero_each) std::memset(adj + plan[i].out, 0, sizeof(double) * plan[i].n);
        plan[i].fwd(pay, plan[i]);
      } else if (!replay_record(i, zero_each)) {
        return false;  // a decision would go the other way
      }
    }
    check_budgets(nullptr);
  } catch (...) {
    return false;  // e.g. (quotient x 0.0) now: the walked run reports it with its location
  }
  r.valid = true;
  --r.fell_back;
  ++r.replayed;
  return true;
}

}  // namespace ndvm
