// The evaluator's numeric operations that are not linear algebra (linalg.cc): elementwise
// arithmetic with exact integers, comparisons and predicates, eqv?, slices, concatenation and
// transposition. Each computes through the kernels of kernels.h and records its tape op.
#include "kernels.h"

namespace ndvm {

using namespace kern;

namespace {

// Out of line and cold: building the message would otherwise give binary() a large frame and
// string clean-up paths on its hot path.
[[noreturn, gnu::cold, gnu::noinline]] void shape_mismatch(VM& vm, const Node* site, const Value& a, const Value& b) {
  err_at(site, opname(site) + ": shape mismatch between " + vm.describe(a) + " and " + vm.describe(b));
}
}  // namespace

// ---- elementwise ---------------------------------------------------------------------------

namespace {
// Exact integer arithmetic; std::nullopt-like `false` when the result leaves int64 or is not an
// integer (the caller then computes inexactly, as Scheme without bignums would have to).
bool int_op(Op op, int64_t x, int64_t y, int64_t* r) {
  switch (op) {
    case O_ADD: return !__builtin_add_overflow(x, y, r);
    case O_SUB: return !__builtin_sub_overflow(x, y, r);
    case O_MUL: return !__builtin_mul_overflow(x, y, r);
    case O_DIV:
      if (y == -1 && x == INT64_MIN) return false;
      if (x % y != 0) return false;
      *r = x / y;
      return true;
    case O_MIN: *r = y < x ? y : x; return true;
    case O_MAX: *r = y > x ? y : x; return true;
    case O_POW: {
      if (y < 0) return false;
      int64_t acc = 1, base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if (e & 1) {
          if (__builtin_mul_overflow(acc, base, &acc)) return false;
        }
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return false;
      }
      *r = acc;
      return true;
    }
    default: return false;
  }
}
}  // namespace

// + - * / of two numbers in a one-lane run (B = 1), the bulk of a walk's arithmetic: the shape check,
// the allocation, the loop and the record, and nothing else; every other case goes to binary_general.
Value VM::binary(Op op, Value a, Value b, const Node* site) {
  if (L != 1 || a.tag != T_NUM || b.tag != T_NUM || !tape_op_has<tapeflag::ARITH>(op))
    return binary_general(op, a, b, site);
  const uint32_t na = a.numel(), nb = b.numel();
  Value out;
  if (na == 1 && a.rank == 0) out = alloc_num(b.rank, b.rows, b.n.cols, a.uniform() && b.uniform(), site);
  else if ((nb == 1 && b.rank == 0) || (a.rank == b.rank && a.rows == b.rows && a.n.cols == b.n.cols))
    out = alloc_num(a.rank, a.rows, a.n.cols, a.uniform() && b.uniform(), site);
  else shape_mismatch(*this, site, a, b);
  const double* pa = data(a);
  const double* pb = data(b);
  double* po = data(out);
  const uint32_t n = out.numel(), sa = na == 1 ? 0 : 1, sb = nb == 1 ? 0 : 1;
  arith_one_lane(op, po, pa, pb, n, sa, sb);
  if (prog->f32) round_f32(po, n);
  if (recording && ((a.flags | b.flags) & NF_ACTIVE)) record2(op, out, a, b);
  return out;
}

Value VM::binary_general(Op op, Value a, Value b, const Node* site) {
  if (a.tag == T_INT && b.tag == T_INT) {
    if (op == O_DIV && b.i == 0) err_at(site, "division by zero");
    int64_t r;
    if (int_op(op, a.i, b.i, &r)) return Value::make_int(r);
  }
  a = promote(a);  // exact with inexact: inexact, as in Scheme
  b = promote(b);
  // fast path: two scalars (the bulk of scalar model code)
  if (a.tag == T_NUM && b.tag == T_NUM && (a.rank | b.rank) == 0 && tape_op_has<tapeflag::ARITH>(op)) {
    bool uni = a.uniform() && b.uniform();
    Value out = alloc_num(0, 1, 1, uni, site);
    uint32_t Lo = uni ? 1 : L;
    if (Lo == 1) {
      const double x = *data(a), y = *data(b);
      data(out)[0] = op == O_ADD ? x + y : op == O_SUB ? x - y : op == O_MUL ? x * y : x / y;
    } else {
      fwd2(op, data(out), 1, Lo, View{data(a), 0, a.uniform() ? 0u : 1u}, View{data(b), 0, b.uniform() ? 0u : 1u});
    }
    if (prog->f32) round_f32(data(out), Lo);
    if (recording && ((a.flags | b.flags) & NF_ACTIVE)) record2(op, out, a, b);
    return out;
  }
  if (a.tag != T_NUM) type_error(site, "numbers", a);
  if (b.tag != T_NUM) type_error(site, "numbers", b);
  // shape: equal shapes, or a scalar broadcast against anything
  int rank;
  uint32_t rows, cols;
  if (a.rank == 0) {
    rank = b.rank;
    rows = b.rows;
    cols = b.cols();
  } else if (b.rank == 0 || (a.rank == b.rank && a.rows == b.rows && a.cols() == b.cols())) {
    rank = a.rank;
    rows = a.rows;
    cols = a.cols();
  } else shape_mismatch(*this, site, a, b);

  bool uni = a.uniform() && b.uniform();
  Value out = alloc_num(rank, rows, cols, uni, site);
  uint32_t n = out.numel();
  uint32_t Lo = uni ? 1 : L;
  if (Lo == 1 && tape_op_has<tapeflag::ARITH>(op)) {  // one lane (B = 1, or both uniform): the loop inline, no views
    const double* pa = data(a);
    const double* pb = data(b);
    double* po = data(out);
    const uint32_t sa = a.rank == 0 ? 0 : 1, sb = b.rank == 0 ? 0 : 1;
    arith_one_lane(op, po, pa, pb, n, sa, sb);
  } else {
    fwd2(op, data(out), n, Lo, view(*this, a, true), view(*this, b, true));
  }
  if (prog->f32) round_f32(data(out), static_cast<size_t>(n) * Lo);
  if (recording && (a.active() || b.active())) record2(op, out, a, b);
  return out;
}

Value VM::unary(Op op, Value a, const Node* site) {
  if (a.tag == T_INT) {
    int64_t x = a.i, r;
    if (op == O_NEG && !__builtin_sub_overflow(int64_t(0), x, &r)) return Value::make_int(r);
    if (op == O_ABS && !__builtin_sub_overflow(int64_t(0), x < 0 ? x : -x, &r)) return Value::make_int(r);
    if (op == O_SQUARE && !__builtin_mul_overflow(x, x, &r)) return Value::make_int(r);
    if (op == O_SQRT && x >= 0) {  // exact for perfect squares, as in Scheme
      int64_t s = static_cast<int64_t>(std::sqrt(static_cast<double>(x)));
      while (s > 0 && s * s > x) --s;
      while ((s + 1) * (s + 1) <= x) ++s;
      if (s * s == x) return Value::make_int(s);
    }
    a = promote(a);
  }
  if (a.tag != T_NUM) type_error(site, "a number", a);
  bool uni = a.uniform();
  Value out = alloc_num(a.rank, a.rows, a.cols(), uni, site);
  size_t total = static_cast<size_t>(out.numel()) * (uni ? 1 : L);
  double* o = data(out);
  unary_loop(op, data(a), o, total);
  if (prog->f32) round_f32(o, total);
  if (recording && a.active()) record1(op, out, a);
  return out;
}

Value VM::rounding(int prim, Value a, const Node* site) {
  if (a.tag == T_INT) return a;
  if (a.tag != T_NUM) type_error(site, "a number", a);
  Value out = alloc_num(a.rank, a.rows, a.cols(), a.uniform(), site);
  size_t total = static_cast<size_t>(out.numel()) * lanes_of(a);
  Op op = prim == P_FLOOR ? O_FLOOR : prim == P_CEILING ? O_CEILING : prim == P_ROUND ? O_ROUND : O_TRUNCATE;
  rounding_loop(op, data(a), data(out), total);
  // piecewise constant: gradient zero; recorded (when it depends on parameters) for replay only
  if (recording && a.active()) record1(op, out, a);
  return out;
}

Value VM::int_div(int prim, Value a, Value b, const Node* site) {
  // INT64_MIN / -1: the quotient 2^63 overflows 64 bits (computed inexactly below), while the
  // remainder and modulo are exactly 0 (R7RS: exact arguments, exact result)
  if (a.tag == T_INT && b.tag == T_INT && a.i == INT64_MIN && b.i == -1 && prim != P_QUOTIENT)
    return Value::make_int(0);
  if (a.tag == T_INT && b.tag == T_INT && !(a.i == INT64_MIN && b.i == -1)) {
    int64_t x = a.i, y = b.i;
    if (y == 0) err_at(site, opname(site) + ": division by zero");
    int64_t r = prim == P_QUOTIENT ? x / y : x % y;  // C++ truncates: R7RS quotient/remainder
    if (prim == P_MODULO && r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value::make_int(r);
  }
  a = promote(a);
  b = promote(b);
  if (a.tag != T_NUM || a.rank != 0) type_error(site, "an integer", a);
  if (b.tag != T_NUM || b.rank != 0) type_error(site, "an integer", b);
  bool uni = a.uniform() && b.uniform();
  Value out = alloc_num(0, 1, 1, uni, site);
  uint32_t Lo = uni ? 1 : L;
  Op op = prim == P_QUOTIENT ? O_QUOTIENT : prim == P_REMAINDER ? O_REMAINDER : O_MODULO;
  int_div_loop(op, view(*this, a, true), view(*this, b, true), data(out), Lo, site);
  if (recording && (a.active() || b.active())) record2(op, out, a, b);  // for replay only: no gradient
  return out;
}

Value VM::lanes_to_bool(const uint8_t* m) {
  for (int l = 1; l < L; ++l)
    if (m[l] != m[0]) throw Divergence{std::vector<uint8_t>(m, m + L)};
  return Value::make_bool(m[0] != 0);
}

Value VM::compare(int prim, const Value* args_in, int n, const Node* site) {
  bool all_int = true;
  for (int i = 0; i < n; ++i) all_int &= args_in[i].tag == T_INT;
  if (all_int) {  // exact comparison of integers
    bool r = true;
    for (int i = 0; i + 1 < n && r; ++i) {
      int64_t x = args_in[i].i, y = args_in[i + 1].i;
      r = prim == P_NUM_EQ ? x == y : prim == P_LT ? x < y : prim == P_GT ? x > y : prim == P_LE ? x <= y : x >= y;
    }
    return Value::make_bool(r);
  }
  Value args[64];
  std::vector<Value> many;
  Value* av = args;
  if (n > 64) {
    many.resize(n);
    av = many.data();
  }
  for (int i = 0; i < n; ++i) av[i] = promote(args_in[i]);
  return compare_num(prim, av, n, site);
}

Value VM::compare_num(int prim, const Value* args, int n, const Node* site) {
  for (int i = 0; i < n; ++i) {
    if (args[i].tag != T_NUM) type_error(site, "numbers", args[i]);
    if (args[i].rank != 0)
      err_at(site, opname(site) + ": compares numbers, got " + describe(args[i]) +
                       " (comparisons of data vectors have no single truth value)");
  }
  uint8_t* m = lane_mask_buf(L);
  compare_mask(*this, prim, args, n, m);
  bool all_uniform = true, any_active = false;
  for (int i = 0; i < n; ++i) {
    all_uniform &= args[i].uniform();
    any_active |= args[i].active();
  }
  if (all_uniform) return Value::make_bool(m[0]);
  if (recording && any_active) record_guard(prim, args, n, m);
  return lanes_to_bool(m);
}

Value VM::num_pred(int prim, Value a, const Node* site) {
  if (a.tag == T_INT) {
    int64_t x = a.i;
    switch (prim) {
      case P_ZEROP: return Value::make_bool(x == 0);
      case P_POSITIVEP: return Value::make_bool(x > 0);
      case P_NEGATIVEP: return Value::make_bool(x < 0);
      case P_INTEGERP: return Value::make_bool(true);
      case P_EVENP: return Value::make_bool(x % 2 == 0);
      default: return Value::make_bool(x % 2 != 0);
    }
  }
  if (a.tag != T_NUM || a.rank != 0) type_error(site, "a number", a);
  uint8_t* m = lane_mask_buf(L);
  pred_mask(*this, prim, a, m, site);
  if (a.uniform()) return Value::make_bool(m[0]);
  if (recording && a.active()) record_guard(prim, &a, 1, m);
  return lanes_to_bool(m);
}

// A comparison costs kCompareWork of the work budget, plus the elements of numbers: a numeric eqv?
// in memv, assoc or equal? takes about as long as that many element operations.
constexpr uint64_t kCompareWork = 8;

void VM::eqv_into(Value a, Value b, uint8_t* m, bool deep, const Node* site) {
  charge(kCompareWork, site);
  char probe;
  if (static_cast<size_t>(stack_base - &probe) > stack_budget)
    limit_error("recursion too deep for the evaluation stack (comparing deeply nested structures)",
                site ? site->line : 0, site ? site->col : 0);
  if (a.tag != b.tag) {
    std::memset(m, 0, L);
    return;
  }
  switch (a.tag) {
    case T_NUM: {
      if (a.rank != b.rank || a.rows != b.rows || a.cols() != b.cols()) {
        std::memset(m, 0, L);
        return;
      }
      if (a.rank != 0 && !deep) {  // eqv? on arrays: identity
        bool same = a.n.off == b.n.off;
        if (!same) std::memset(m, 0, L);
        return;
      }
      uint8_t* leaf = leaf_mask_buf(L);     // no recursion below: one buffer serves every leaf
      charge(cost_of(a.numel(), L), site);  // beyond kCompareWork: arrays compare every element
      eqv_mask(*this, a, b, leaf);
      if (recording && (a.active() || b.active())) {  // the outcome depends on parameters: a guard
        Value ab[2] = {a, b};
        record_guard(P_EQVP, ab, 2, leaf);
      }
      for (int l = 0; l < L; ++l) m[l] &= leaf[l];
      return;
    }
    case T_PAIR:
      if (!deep) {
        if (a.ptr != b.ptr) std::memset(m, 0, L);
        return;
      }
      for (;;) {
        const Pair* p = static_cast<const Pair*>(a.ptr);
        const Pair* q = static_cast<const Pair*>(b.ptr);
        eqv_into(p->car, q->car, m, true, site);
        a = p->cdr;
        b = q->cdr;
        if (a.tag != T_PAIR || b.tag != T_PAIR) {
          eqv_into(a, b, m, true, site);
          return;
        }
      }
    case T_CLOSURE:
      if (a.ptr != b.ptr) std::memset(m, 0, L);
      return;
    case T_BOOL:
    case T_SYM:
    case T_PRIM:
    case T_INT:
      if (a.i != b.i) std::memset(m, 0, L);
      return;
    default: return;  // nil, unspecified: equal
  }
}

// ---- arrays --------------------------------------------------------------------------------

Value VM::slice(const Value& a, uint32_t start, int rank, uint32_t rows, uint32_t cols) {
  Value out = alloc_num(rank, rows, cols, a.uniform());
  uint32_t lanes = lanes_of(a);
  size_t count = static_cast<size_t>(out.numel()) * lanes;
  const double* src = data(a) + static_cast<size_t>(start) * lanes;
  double* dst = data(out);
  if (count <= 4)
    for (size_t i = 0; i < count; ++i) dst[i] = src[i];  // (ref ys t): no call for a few numbers
  else std::memcpy(dst, src, sizeof(double) * count);
  if (recording && a.active()) record1(O_SLICE, out, a, start);
  return out;
}

Value VM::concat(const Value* parts, int n, int rank, uint32_t rows, uint32_t cols) {
  bool uni = true, act = false;
  for (int i = 0; i < n; ++i) {
    uni &= parts[i].uniform();
    act |= parts[i].active();
  }
  Value out = alloc_num(rank, rows, cols, uni);
  concat_compute(*this, parts, n, data(out), uni ? 1 : L);
  if (recording && act) record_n(O_CONCAT, out, parts, n);
  return out;
}

Value VM::transpose(const Value& a) {
  uint32_t r = a.rows, c = a.n.cols, lanes = lanes_of(a);
  Value out = alloc_num(2, c, r, a.uniform());
  transpose_compute(*this, a, data(out), r, c, lanes);
  if (recording && a.active()) record1(O_TRANSPOSE, out, a, r, c);
  return out;
}

}  // namespace ndvm
