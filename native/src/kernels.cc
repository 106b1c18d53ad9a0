// Numeric kernels, forward and backward. Every kernel is a loop over lanes (innermost, contiguous)
// so that one walk of the program serves B parameter vectors; operands that are uniform (shared
// by all lanes) or scalar (broadcast over elements) are read with a zero stride.
// Kernels are elementwise in the lanes and never reorder a lane's arithmetic, so a lane computes
// the same bits whatever the batch width.
#include <cmath>
#include <cstring>

#include "prims.h"
#include "vm.h"

namespace ndvm {

namespace {


[[noreturn]] void err_at(const Node* site, const std::string& msg) {
  eval_error(msg, site ? site->line : 0, site ? site->col : 0);
}

inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}
inline double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// A read view of a value inside a run of L lanes: element stride and lane stride.
struct View {
  const double* p;
  uint32_t es;  // 0: a scalar broadcast over the elements
  uint32_t ls;  // 0: uniform (one lane shared)
};

template <class V>  // Value or NumRef
inline View view(VM& vm, const V& v, bool broadcast_scalar) {
  uint32_t lanes = vm.lanes_of(v);
  return View{vm.data(v), (broadcast_scalar && v.numel() == 1) ? 0u : lanes, v.uniform() ? 0u : 1u};
}

double fwd1(Op op, double x) {
  switch (op) {
    case O_NEG: return -x;
    case O_EXP: return std::exp(x);
    case O_LOG: return std::log(x);
    case O_SQRT: return std::sqrt(x);
    case O_SIN: return std::sin(x);
    case O_COS: return std::cos(x);
    case O_TAN: return std::tan(x);
    case O_ASIN: return std::asin(x);
    case O_ACOS: return std::acos(x);
    case O_ATAN: return std::atan(x);
    case O_TANH: return std::tanh(x);
    case O_ABS: return std::fabs(x);
    case O_SQUARE: return x * x;
    case O_SIGMOID: return sigmoid(x);
    case O_SOFTPLUS: return softplus(x);
    default: return NAN;
  }
}

// d out / d in, given the input x and the output z
double der1(Op op, double x, double z) {
  switch (op) {
    case O_NEG: return -1.0;
    case O_EXP: return z;
    case O_LOG: return 1.0 / x;
    case O_SQRT: return 0.5 / z;
    case O_SIN: return std::cos(x);
    case O_COS: return -std::sin(x);
    case O_TAN: return 1.0 + z * z;
    case O_ASIN: return 1.0 / std::sqrt(1.0 - x * x);
    case O_ACOS: return -1.0 / std::sqrt(1.0 - x * x);
    case O_ATAN: return 1.0 / (1.0 + x * x);
    case O_TANH: return 1.0 - z * z;
    case O_ABS: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case O_SQUARE: return 2.0 * x;
    case O_SIGMOID: return z * (1.0 - z);
    case O_SOFTPLUS: return sigmoid(x);
    default: return NAN;
  }
}

template <class F>
inline void map2(double* o, uint32_t n, uint32_t Lo, View a, View b, F f) {
  if (Lo == 1) {  // one lane: only element broadcasting
    for (uint32_t i = 0; i < n; ++i) o[i] = f(a.p[i * a.es], b.p[i * b.es]);
    return;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const double* pa = a.p + i * a.es;
    const double* pb = b.p + i * b.es;
    double* po = o + static_cast<size_t>(i) * Lo;
    if (a.ls && b.ls) {
      for (uint32_t l = 0; l < Lo; ++l) po[l] = f(pa[l], pb[l]);
    } else if (a.ls) {
      const double y = *pb;
      for (uint32_t l = 0; l < Lo; ++l) po[l] = f(pa[l], y);
    } else if (b.ls) {
      const double x = *pa;
      for (uint32_t l = 0; l < Lo; ++l) po[l] = f(x, pb[l]);
    } else {
      po[0] = f(*pa, *pb);
    }
  }
}

void fwd2(Op op, double* o, uint32_t n, uint32_t Lo, View a, View b) {
  switch (op) {
    case O_ADD: map2(o, n, Lo, a, b, [](double x, double y) { return x + y; }); break;
    case O_SUB: map2(o, n, Lo, a, b, [](double x, double y) { return x - y; }); break;
    case O_MUL: map2(o, n, Lo, a, b, [](double x, double y) { return x * y; }); break;
    case O_DIV: map2(o, n, Lo, a, b, [](double x, double y) { return x / y; }); break;
    case O_POW: map2(o, n, Lo, a, b, [](double x, double y) { return std::pow(x, y); }); break;
    case O_ATAN2: map2(o, n, Lo, a, b, [](double x, double y) { return std::atan2(x, y); }); break;
    case O_MIN: map2(o, n, Lo, a, b, [](double x, double y) { return y < x ? y : x; }); break;
    case O_MAX: map2(o, n, Lo, a, b, [](double x, double y) { return y > x ? y : x; }); break;
    default: break;
  }
}

void round_f32(double* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<double>(static_cast<float>(p[i]));
}

std::string opname(const Node* site) { return site && !site->name.empty() ? "'" + site->name + "'" : "arithmetic"; }

// Out of line and cold: building the message would otherwise give binary() a large frame and
// string clean-up paths on its hot path.
[[noreturn, gnu::cold, gnu::noinline]] void shape_mismatch(VM& vm, const Node* site, const Value& a, const Value& b) {
  err_at(site, opname(site) + ": shape mismatch between " + vm.describe(a) + " and " + vm.describe(b));
}


// ---- kernels shared by the evaluator and replay -----------------------------------------------
// The evaluator and a replay (forward_record) compute through the same functions, so a replayed
// run gives the bits of a walked one.

void unary_loop(Op op, const double* x, double* o, size_t total) {
  switch (op) {  // specialized loops for the common cases so they vectorize
    case O_NEG: for (size_t i = 0; i < total; ++i) o[i] = -x[i]; break;
    case O_EXP: for (size_t i = 0; i < total; ++i) o[i] = std::exp(x[i]); break;
    case O_SQUARE: for (size_t i = 0; i < total; ++i) o[i] = x[i] * x[i]; break;
    default: for (size_t i = 0; i < total; ++i) o[i] = fwd1(op, x[i]);
  }
}

void rounding_loop(Op op, const double* x, double* o, size_t total) {
  for (size_t i = 0; i < total; ++i) {
    switch (op) {
      case O_FLOOR: o[i] = std::floor(x[i]); break;
      case O_CEILING: o[i] = std::ceil(x[i]); break;
      case O_ROUND: o[i] = std::nearbyint(x[i]); break;  // round half to even (default FP mode)
      default: o[i] = std::trunc(x[i]); break;
    }
  }
}

// quotient remainder modulo of inexact integers, lane by lane
void int_div_loop(Op op, View va, View vb, double* o, uint32_t Lo, const Node* site) {
  for (uint32_t l = 0; l < Lo; ++l) {
    double x = va.p[l * va.ls], y = vb.p[l * vb.ls];
    if (x != std::floor(x) || y != std::floor(y))
      err_at(site, opname(site) + ": expects integers");
    if (y == 0) err_at(site, opname(site) + ": division by zero");
    double r;
    if (op == O_QUOTIENT) r = std::trunc(x / y);
    else if (op == O_REMAINDER) r = std::fmod(x, y);
    else { r = std::fmod(x, y); if (r != 0 && ((r < 0) != (y < 0))) r += y; }
    o[l] = r == 0 ? 0.0 : r;  // no negative zero
  }
}

// The lanes' outcomes of a chained numeric comparison of n scalars.
template <class V>
void compare_mask(VM& vm, int prim, const V* args, int n, uint8_t* m) {
  std::memset(m, 1, vm.L);
  for (int i = 0; i + 1 < n; ++i) {
    View a = view(vm, args[i], true), b = view(vm, args[i + 1], true);
    for (int l = 0; l < vm.L; ++l) {
      double x = a.p[l * a.ls], y = b.p[l * b.ls];
      bool r;
      switch (prim) {
        case P_NUM_EQ: r = x == y; break;
        case P_LT: r = x < y; break;
        case P_GT: r = x > y; break;
        case P_LE: r = x <= y; break;
        default: r = x >= y; break;
      }
      m[l] &= r;
    }
  }
}

// The lanes' outcomes of a numeric predicate (zero? positive? ... of a scalar).
template <class V>
void pred_mask(VM& vm, int prim, const V& a, uint8_t* m, const Node* site) {
  View v = view(vm, a, true);
  int lanes = a.uniform() ? 1 : vm.L;
  for (int l = 0; l < lanes; ++l) {
    double x = v.p[l * v.ls];
    bool r;
    switch (prim) {
      case P_ZEROP: r = x == 0; break;
      case P_POSITIVEP: r = x > 0; break;
      case P_NEGATIVEP: r = x < 0; break;
      case P_INTEGERP: r = std::isfinite(x) && x == std::floor(x); break;
      case P_EVENP:
      case P_ODDP:
        if (x != std::floor(x)) err_at(site, opname(site) + ": expects an integer");
        r = (std::fmod(std::fabs(x), 2.0) == 0) == (prim == P_EVENP);
        break;
      default: r = false;
    }
    m[l] = r;
  }
}

// The lanes' outcomes of eqv? on the elements of two numbers of one shape.
template <class V>
void eqv_mask(VM& vm, const V& a, const V& b, uint8_t* m) {
  std::memset(m, 1, vm.L);
  View va = view(vm, a, false), vb = view(vm, b, false);
  for (uint32_t e = 0; e < a.numel(); ++e)
    for (int l = 0; l < vm.L; ++l) {
      double x = va.p[e * va.es + l * va.ls], y = vb.p[e * vb.es + l * vb.ls];
      m[l] &= x == y && std::signbit(x) == std::signbit(y);  // (eqv? 0.0 -0.0) is #f
    }
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
        if (e & 1) { if (__builtin_mul_overflow(acc, base, &acc)) return false; }
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
  if (L != 1 || a.tag != T_NUM || b.tag != T_NUM || op > O_DIV) return binary_general(op, a, b, site);
  const uint32_t na = a.numel(), nb = b.numel();
  Value out;
  if (na == 1 && a.rank == 0) out = alloc_num(b.rank, b.rows, b.n.cols, a.uniform() && b.uniform(), site);
  else if ((nb == 1 && b.rank == 0) || (a.rank == b.rank && a.rows == b.rows && a.n.cols == b.n.cols))
    out = alloc_num(a.rank, a.rows, a.n.cols, a.uniform() && b.uniform(), site);
  else
    shape_mismatch(*this, site, a, b);
  const double* pa = data(a);
  const double* pb = data(b);
  double* po = data(out);
  const uint32_t n = out.numel(), sa = na == 1 ? 0 : 1, sb = nb == 1 ? 0 : 1;
  switch (op) {
    case O_ADD: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] + pb[i * sb]; break;
    case O_SUB: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] - pb[i * sb]; break;
    case O_MUL: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] * pb[i * sb]; break;
    default: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] / pb[i * sb]; break;
  }
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
  if (a.tag == T_NUM && b.tag == T_NUM && (a.rank | b.rank) == 0 && op <= O_DIV) {
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
  if (a.rank == 0) { rank = b.rank; rows = b.rows; cols = b.cols(); }
  else if (b.rank == 0 || (a.rank == b.rank && a.rows == b.rows && a.cols() == b.cols())) { rank = a.rank; rows = a.rows; cols = a.cols(); }
  else shape_mismatch(*this, site, a, b);

  bool uni = a.uniform() && b.uniform();
  Value out = alloc_num(rank, rows, cols, uni, site);
  uint32_t n = out.numel();
  uint32_t Lo = uni ? 1 : L;
  if (Lo == 1 && op <= O_DIV) {  // one lane (B = 1, or both uniform): the loop inline, no views
    const double* pa = data(a);
    const double* pb = data(b);
    double* po = data(out);
    const uint32_t sa = a.rank == 0 ? 0 : 1, sb = b.rank == 0 ? 0 : 1;
    switch (op) {
      case O_ADD: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] + pb[i * sb]; break;
      case O_SUB: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] - pb[i * sb]; break;
      case O_MUL: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] * pb[i * sb]; break;
      default: for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] / pb[i * sb]; break;
    }
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
  if (a.tag == T_INT && b.tag == T_INT && !(a.i == INT64_MIN && b.i == -1)) {  // that one overflows
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
  if (n > 64) { many.resize(n); av = many.data(); }
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
  for (int i = 0; i < n; ++i) { all_uniform &= args[i].uniform(); any_active |= args[i].active(); }
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
  if (a.tag != b.tag) { std::memset(m, 0, L); return; }
  switch (a.tag) {
    case T_NUM: {
      if (a.rank != b.rank || a.rows != b.rows || a.cols() != b.cols()) { std::memset(m, 0, L); return; }
      if (a.rank != 0 && !deep) {  // eqv? on arrays: identity
        bool same = a.n.off == b.n.off;
        if (!same) std::memset(m, 0, L);
        return;
      }
      uint8_t* leaf = leaf_mask_buf(L);  // no recursion below: one buffer serves every leaf
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
      if (!deep) { if (a.ptr != b.ptr) std::memset(m, 0, L); return; }
      for (;;) {
        const Pair* p = static_cast<const Pair*>(a.ptr);
        const Pair* q = static_cast<const Pair*>(b.ptr);
        eqv_into(p->car, q->car, m, true, site);
        a = p->cdr;
        b = q->cdr;
        if (a.tag != T_PAIR || b.tag != T_PAIR) { eqv_into(a, b, m, true, site); return; }
      }
    case T_CLOSURE: if (a.ptr != b.ptr) std::memset(m, 0, L); return;
    case T_BOOL: case T_SYM: case T_PRIM: case T_INT: if (a.i != b.i) std::memset(m, 0, L); return;
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
  if (count <= 4) for (size_t i = 0; i < count; ++i) dst[i] = src[i];  // (ref ys t): no call for a few numbers
  else std::memcpy(dst, src, sizeof(double) * count);
  if (recording && a.active()) record1(O_SLICE, out, a, start);
  return out;
}

namespace {
template <class V>
void concat_compute(VM& vm, const V* parts, int n, double* o, uint32_t Lo) {
  size_t e = 0;
  for (int i = 0; i < n; ++i) {
    const V& p = parts[i];
    const double* src = vm.data(p);
    for (uint32_t k = 0; k < p.numel(); ++k, ++e) {
      double* dst = o + e * Lo;
      if (p.uniform()) for (uint32_t l = 0; l < Lo; ++l) dst[l] = src[k];
      else std::memcpy(dst, src + static_cast<size_t>(k) * Lo, sizeof(double) * Lo);
    }
  }
}

template <class V>
void transpose_compute(VM& vm, const V& a, double* o, uint32_t r, uint32_t c, uint32_t lanes) {
  const double* x = vm.data(a);
  for (uint32_t i = 0; i < r; ++i)
    for (uint32_t j = 0; j < c; ++j)
      std::memcpy(o + (static_cast<size_t>(j) * r + i) * lanes, x + (static_cast<size_t>(i) * c + j) * lanes, sizeof(double) * lanes);
}
}  // namespace

Value VM::concat(const Value* parts, int n, int rank, uint32_t rows, uint32_t cols) {
  bool uni = true, act = false;
  for (int i = 0; i < n; ++i) { uni &= parts[i].uniform(); act |= parts[i].active(); }
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

namespace {

// Small matrix products (every dimension at most 3, as in state-space models) over lanes, with
// the dimensions known at compile time: a lane's operands are read once and its outputs summed in
// registers instead of read-modify-write passes over lane arrays. The arithmetic of a lane is the
// same as the one-lane loops' (q ascending from 0; i, j, q order in backward; a zero cotangent
// adds nothing), so a lane's bits do not depend on the batch width. Operands are lane-varying.
template <int M, int K, int N>
void gemm_fwd_small(const double* __restrict A, const double* __restrict B, double* __restrict O, uint32_t lanes) {
  const size_t Lo = lanes;  // size_t index arithmetic: 32-bit indices could wrap, which defeats contiguous vector loads
  if (Lo == 1) {  // one lane: straight-line code, no vector loop set-up
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
      for (int q = 0; q < K; ++q) { a[q] = A + (i * K + q) * Lo; b[q] = B + (q * N + j) * Lo; }
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

using GemmFwd = void (*)(const double*, const double*, double*, uint32_t);
using GemmBwd = void (*)(const double*, const double*, const double*, double*, double*, uint32_t);

// the forward kernel and the backward ones for A's adjoint only, B's only, and both
struct GemmKernels { GemmFwd fwd; GemmBwd bwd_a, bwd_b, bwd_ab; };

template <int M, int K, int N>
constexpr GemmKernels gemm_entry() {
  return {gemm_fwd_small<M, K, N>, gemm_bwd_small<M, K, N, true, false>, gemm_bwd_small<M, K, N, false, true>,
          gemm_bwd_small<M, K, N, true, true>};
}

template <int M, int K>
constexpr void fill_n(GemmKernels* t) {
  t[0] = gemm_entry<M, K, 1>(); t[1] = gemm_entry<M, K, 2>(); t[2] = gemm_entry<M, K, 3>();
}

struct GemmTable {
  GemmKernels k[27];
  constexpr GemmTable() : k{} {
    fill_n<1, 1>(k + 0); fill_n<1, 2>(k + 3); fill_n<1, 3>(k + 6);
    fill_n<2, 1>(k + 9); fill_n<2, 2>(k + 12); fill_n<2, 3>(k + 15);
    fill_n<3, 1>(k + 18); fill_n<3, 2>(k + 21); fill_n<3, 3>(k + 24);
  }
};
constexpr GemmTable kGemm{};

// The specialized kernels for an m x k by k x n product, or nullptr.
const GemmKernels* small_gemm(uint32_t m, uint32_t k, uint32_t n) {
  if (m < 1 || m > 3 || k < 1 || k > 3 || n < 1 || n > 3) return nullptr;
  return &kGemm.k[(m - 1) * 9 + (k - 1) * 3 + (n - 1)];
}

}  // namespace

namespace {
// A kernel longer than this many multiply-adds checks the wall clock (Limits.max_seconds) as it goes.
constexpr uint64_t kPollWork = 1u << 22;

template <class V>
void gemm_compute(VM& vm, const V& a, const V& b, double* o, uint32_t m, uint32_t k, uint32_t n, uint32_t Lo) {
  View va = view(vm, a, false), vb = view(vm, b, false);
  const bool poll = cost_of(m, k, n, Lo) > kPollWork;
  const GemmKernels* small = small_gemm(m, k, n);
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
        if (va.ls && vb.ls) for (uint32_t l = 0; l < Lo; ++l) po[l] += pa[l] * pb[l];
        else if (va.ls) { double y = *pb; for (uint32_t l = 0; l < Lo; ++l) po[l] += pa[l] * y; }
        else if (vb.ls) { double x = *pa; for (uint32_t l = 0; l < Lo; ++l) po[l] += x * pb[l]; }
        else po[0] += *pa * *pb;
      }
    }
  }
}
}  // namespace

Value VM::gemm(const Value& a, const Value& b, uint32_t m, uint32_t k, uint32_t n, int out_rank, uint32_t out_rows, uint32_t out_cols) {
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

// LU decomposition with partial pivoting of one n x n matrix (row-major, in place).
// Returns the sign of the permutation, or 0 when singular. `poll`: checks the wall clock every few
// columns of a large matrix. n * n fits in an int (linalg_guard).
int lu(double* A, int n, int* piv, VM* poll = nullptr) {
  int sign = 1;
  if (n < 128) poll = nullptr;
  for (int i = 0; i < n; ++i) piv[i] = i;
  for (int c = 0; c < n; ++c) {
    if (poll && c % 16 == 0) poll->poll_clock(nullptr);
    int p = c;
    double best = std::fabs(A[c * n + c]);
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(A[r * n + c]) > best) { best = std::fabs(A[r * n + c]); p = r; }
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
void lu_solve(const double* LU, const int* piv, int n, double* B, int m, double* tmp) {
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
void gather(VM& vm, const V& v, uint32_t l, double* dst) {
  uint32_t lanes = vm.lanes_of(v), ls = v.uniform() ? 0 : 1;
  const double* p = vm.data(v);
  for (uint32_t e = 0; e < v.numel(); ++e) dst[e] = p[static_cast<size_t>(e) * lanes + l * ls];
}
template <class V>
void scatter(VM& vm, const V& v, uint32_t l, const double* src) {
  uint32_t lanes = vm.lanes_of(v), ls = v.uniform() ? 0 : 1;
  double* p = vm.data(v);
  for (uint32_t e = 0; e < v.numel(); ++e) p[static_cast<size_t>(e) * lanes + l * ls] = src[e];
}
template <class V>
void scatter_add(VM& vm, double* adj, const V& v, uint32_t l, const double* src) {
  uint32_t lanes = vm.lanes_of(v), ls = v.uniform() ? 0 : 1;
  double* p = adj + v.n.off;
  for (uint32_t e = 0; e < v.numel(); ++e) p[static_cast<size_t>(e) * lanes + l * ls] += src[e];
}

// Inverse of an n x n matrix; fills with NaN when singular (that lane's loss becomes non-finite).
void invert(const double* A, int n, double* out, double* work, int* piv, double* tmp, VM* poll = nullptr) {
  std::memcpy(work, A, sizeof(double) * n * n);
  if (!lu(work, n, piv, poll)) {
    for (int i = 0; i < n * n; ++i) out[i] = NAN;
    return;
  }
  for (int i = 0; i < n * n; ++i) out[i] = 0;
  for (int i = 0; i < n; ++i) out[i * n + i] = 1;
  lu_solve(work, piv, n, out, n, tmp);
}

}  // namespace

namespace {
// Inverses of an n x n matrix in each of `lanes` lanes; NaN in a lane where it is singular.
template <class V>
void inv_compute(VM& vm, const V& a, double* o, int n, uint32_t lanes) {
  if (n == 2) {  // closed form, vectorized over lanes: the common case of small state-space models
    const double *a0 = vm.data(a), *a1 = a0 + lanes, *a2 = a1 + lanes, *a3 = a2 + lanes;
    double *y0 = o, *y1 = y0 + lanes, *y2 = y1 + lanes, *y3 = y2 + lanes;
    for (uint32_t l = 0; l < lanes; ++l) {
      double det = a0[l] * a3[l] - a1[l] * a2[l];
      y0[l] = a3[l] / det; y1[l] = -a1[l] / det; y2[l] = -a2[l] / det; y3[l] = a0[l] / det;
    }
    return;
  }
  const size_t nn = static_cast<size_t>(n) * n;
  double* A = vm.scratch_for(4 * nn + 8, n);
  int* piv = vm.pivots.data();
  double *Y = A + nn, *W = Y + nn, *T = W + nn;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, l, A);
    invert(A, n, Y, W, piv, T, &vm);
    for (int e = 0; e < n * n; ++e) o[static_cast<size_t>(e) * lanes + l] = Y[e];
  }
}

template <class V>
void solve_compute(VM& vm, const V& a, const V& b, double* o, int n, int m, uint32_t lanes) {
  const size_t nn = static_cast<size_t>(n) * n, nm = static_cast<size_t>(n) * m;
  double* A = vm.scratch_for(nn + 2 * nm + 8, n);
  int* piv = vm.pivots.data();
  double *X = A + nn, *T = X + nm;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, a.uniform() ? 0 : l, A);
    gather(vm, b, b.uniform() ? 0 : l, X);
    if (!lu(A, n, piv, &vm)) for (int i = 0; i < n * m; ++i) X[i] = NAN;
    else lu_solve(A, piv, n, X, m, T);
    for (int e = 0; e < n * m; ++e) o[static_cast<size_t>(e) * lanes + l] = X[e];
  }
}

// Cholesky factors; NaN in a lane where the matrix is not positive definite. Returns false when
// some lane is not.
template <class V>
bool chol_compute(VM& vm, const V& a, double* o, int n, uint32_t lanes) {
  double* A = vm.scratch_for(2 * static_cast<size_t>(n) * n + 8);
  double* C = A + static_cast<size_t>(n) * n;
  bool all_ok = true;
  for (uint32_t l = 0; l < lanes; ++l) {
    vm.poll_clock(nullptr);
    gather(vm, a, l, A);
    for (int i = 0; i < n * n; ++i) C[i] = 0;
    bool ok = true;
    for (int j = 0; j < n && ok; ++j) {
      double s = A[j * n + j];
      for (int k = 0; k < j; ++k) s -= C[j * n + k] * C[j * n + k];
      if (!(s > 0)) { ok = false; break; }
      double d = std::sqrt(s);
      C[j * n + j] = d;
      for (int i = j + 1; i < n; ++i) {
        double t = A[i * n + j];  // reads the lower triangle only
        for (int k = 0; k < j; ++k) t -= C[i * n + k] * C[j * n + k];
        C[i * n + j] = t / d;
      }
    }
    if (!ok) for (int i = 0; i < n * n; ++i) C[i] = NAN;  // not positive definite in this lane
    all_ok &= ok;
    for (int e = 0; e < n * n; ++e) o[static_cast<size_t>(e) * lanes + l] = C[e];
  }
  return all_ok;
}

// trace vsum norm det logdet of a (ne elements; n x n for the matrix reductions), per lane
template <class V>
void reduce_compute(VM& vm, Op op, const V& a, double* o, uint32_t lanes, int n) {
  const double* x = vm.data(a);
  uint32_t ne = a.numel();
  switch (op) {
    case O_VSUM:
    case O_NORM:
      if (lanes == 1) {  // the sum in a register (o may alias x for the compiler: a store per element
        double s = 0;    // was a store-to-load chain, 5x slower); the same additions in the same order
        if (op == O_VSUM) for (uint32_t e = 0; e < ne; ++e) s += x[e];
        else for (uint32_t e = 0; e < ne; ++e) s += x[e] * x[e];
        o[0] = op == O_NORM ? std::sqrt(s) : s;
        break;
      }
      for (uint32_t l = 0; l < lanes; ++l) o[l] = 0;
      for (uint32_t e = 0; e < ne; ++e)
        for (uint32_t l = 0; l < lanes; ++l) {
          double v = x[static_cast<size_t>(e) * lanes + l];
          o[l] += op == O_VSUM ? v : v * v;
        }
      if (op == O_NORM) for (uint32_t l = 0; l < lanes; ++l) o[l] = std::sqrt(o[l]);
      break;
    case O_TRACE:
      for (uint32_t l = 0; l < lanes; ++l) o[l] = 0;
      for (int i = 0; i < n; ++i)
        for (uint32_t l = 0; l < lanes; ++l) o[l] += x[static_cast<size_t>(i * n + i) * lanes + l];
      break;
    case O_DET:
    case O_LOGDET: {
      double* A = vm.scratch_for(static_cast<size_t>(n) * n + 8, n);
      int* piv = vm.pivots.data();
      for (uint32_t l = 0; l < lanes; ++l) {
        gather(vm, a, l, A);
        double det;
        if (n == 2) det = A[0] * A[3] - A[1] * A[2];
        else {
          vm.poll_clock(nullptr);
          int sign = lu(A, n, piv, &vm);
          det = sign;
          for (int i = 0; i < n && sign; ++i) det *= A[i * n + i];
          if (!sign) det = 0;
        }
        o[l] = op == O_DET ? det : std::log(det);  // logdet of a non-positive determinant: NaN / -inf
      }
      break;
    }
    default: break;
  }
}
}  // namespace

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

uint64_t record_extra_work(const VM& vm, const TapeRec& t) {
  const uint64_t lanes = vm.lanes_of(t.out);
  switch (t.op) {
    case O_GEMM: return cost_of(t.out.ne, lanes, t.d1);  // as VM::gemm: k per output value
    case O_INV: case O_DET: case O_LOGDET: case O_CHOL: return cost_of(t.d0, t.d0, t.d0, lanes);
    case O_SOLVE: return cost_of(t.d0, t.d0, static_cast<uint64_t>(t.d0) + t.d1, lanes);
    case O_TRACE: return cost_of(t.d0, lanes);
    case O_VSUM: case O_NORM: return cost_of(t.in[0].ne, lanes);
    default: return 0;
  }
}

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
    if (n == 2 ? !(x[0] * x[3] - x[1] * x[2] != 0) : std::isnan(data(out)[0])) err_at(site, "'inv': the matrix is singular");
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

namespace {

// Local derivatives of the binary operations: da, db given x, y and the output z.
struct DAdd { static double da(double, double, double) { return 1; } static double db(double, double, double) { return 1; } };
struct DSub { static double da(double, double, double) { return 1; } static double db(double, double, double) { return -1; } };
struct DMul { static double da(double, double y, double) { return y; } static double db(double x, double, double) { return x; } };
struct DDiv { static double da(double, double y, double) { return 1 / y; } static double db(double, double y, double z) { return -z / y; } };
struct DPow {
  static double da(double x, double y, double) { return y == 0 ? 0 : y * std::pow(x, y - 1); }
  static double db(double x, double, double z) { return z == 0 ? 0 : z * std::log(x); }
};
struct DAtan2 {
  static double da(double x, double y, double) { return y / (x * x + y * y); }
  static double db(double x, double y, double) { return -x / (x * x + y * y); }
};
struct DMin { static double da(double x, double y, double) { return y < x ? 0 : 1; } static double db(double x, double y, double) { return y < x ? 1 : 0; } };
struct DMax { static double da(double x, double y, double) { return y > x ? 0 : 1; } static double db(double x, double y, double) { return y > x ? 1 : 0; } };

// Backward of a binary op over lanes with the lane strides known at compile time, so the lane
// loops vectorize. An operand with a zero lane stride is uniform and must not be active here.
template <class D, bool AL, bool BL>
void bwd2_lanes(View va, View vb, double* ga, double* gb, const double* go, const double* z, uint32_t n,
                uint32_t Lo) {
  for (uint32_t i = 0; i < n; ++i) {
    const double* pa = va.p + static_cast<size_t>(i) * va.es;
    const double* pb = vb.p + static_cast<size_t>(i) * vb.es;
    const double* g = go + static_cast<size_t>(i) * Lo;
    const double* zi = z + static_cast<size_t>(i) * Lo;
    if (ga) {
      double* d = ga + static_cast<size_t>(i) * va.es;
      for (uint32_t l = 0; l < Lo; ++l) {
        double c = g[l] * D::da(pa[AL ? l : 0], pb[BL ? l : 0], zi[l]);
        d[l] += g[l] != 0 ? c : 0.0;
      }
    }
    if (gb) {
      double* d = gb + static_cast<size_t>(i) * vb.es;
      for (uint32_t l = 0; l < Lo; ++l) {
        double c = g[l] * D::db(pa[AL ? l : 0], pb[BL ? l : 0], zi[l]);
        d[l] += g[l] != 0 ? c : 0.0;
      }
    }
  }
}

template <class D>
void bwd2(VM& vm, const NumRef* in, const double* go, const double* z, uint32_t n, uint32_t Lo) {
  const NumRef& a = in[0];
  const NumRef& b = in[1];
  View va = view(vm, a, true), vb = view(vm, b, true);
  double* ga = a.active() ? vm.adj + a.n.off : nullptr;
  double* gb = b.active() ? vm.adj + b.n.off : nullptr;
  if (va.es == Lo && vb.es == Lo && va.ls && vb.ls) {  // same layout as the output: flat loops
    size_t total = static_cast<size_t>(n) * Lo;
    // a zero cotangent contributes nothing, even where the local derivative is infinite
    if (ga)
      for (size_t i = 0; i < total; ++i) {
        double c = go[i] * D::da(va.p[i], vb.p[i], z[i]);
        ga[i] += go[i] != 0 ? c : 0.0;
      }
    if (gb)
      for (size_t i = 0; i < total; ++i) {
        double c = go[i] * D::db(va.p[i], vb.p[i], z[i]);
        gb[i] += go[i] != 0 ? c : 0.0;
      }
    return;
  }
  if (Lo == 1) {  // one lane: broadcasting is only over elements
    for (uint32_t i = 0; i < n; ++i) {
      double g = go[i];
      if (g == 0) continue;
      size_t ia = i * va.es, ib = i * vb.es;
      double x = va.p[ia], y = vb.p[ib];
      if (ga) ga[ia] += g * D::da(x, y, z[i]);
      if (gb) gb[ib] += g * D::db(x, y, z[i]);
    }
    return;
  }
  if (va.ls && vb.ls) {
    bwd2_lanes<D, true, true>(va, vb, ga, gb, go, z, n, Lo);
    return;
  }
  if (va.ls && !gb) {  // lane-varying a against a uniform constant b (e.g. q * I)
    bwd2_lanes<D, true, false>(va, vb, ga, gb, go, z, n, Lo);
    return;
  }
  if (vb.ls && !ga) {
    bwd2_lanes<D, false, true>(va, vb, ga, gb, go, z, n, Lo);
    return;
  }
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t l = 0; l < Lo; ++l) {
      size_t io = static_cast<size_t>(i) * Lo + l;
      double g = go[io];
      if (g == 0) continue;
      size_t ia = i * va.es + l * va.ls, ib = i * vb.es + l * vb.ls;
      double x = va.p[ia], y = vb.p[ib];
      if (ga) ga[ia] += g * D::da(x, y, z[io]);
      if (gb) gb[ib] += g * D::db(x, y, z[io]);
    }
}

}  // namespace

// The commonest records of one-lane runs (+ - * and small matrix products), in a function of their
// own: backward_record's prologue, sized for every op, costs as much as their arithmetic.
void backward_one_lane(VM& vm, const TapeRec& t) {
  const NumRef* in = t.in;
  double* adj = vm.adj;
  const double* go = adj + t.out.n.off;
  const NumRef& a = in[0];
  const NumRef& b = in[1];
  double* ga = a.active() ? adj + a.n.off : nullptr;
  double* gb = b.active() ? adj + b.n.off : nullptr;
  if (t.op == O_GEMM) {
    const GemmKernels* small = small_gemm(t.d0, t.d1, t.d2);
    if (small && ga != gb) {
      (ga && gb ? small->bwd_ab : ga ? small->bwd_a : small->bwd_b)(vm.data(a), vm.data(b), go, ga, gb, 1);
      return;
    }
    backward_record(vm, t);
    return;
  }
  const double* x = vm.data(a);
  const double* y = vm.data(b);
  const uint32_t n = t.out.numel();
  const uint32_t sa = a.ne == 1 ? 0 : 1, sb = b.ne == 1 ? 0 : 1;  // a scalar broadcast over elements
  for (uint32_t i = 0; i < n; ++i) {
    const double g = go[i];
    if (g == 0) continue;  // a zero cotangent contributes nothing
    switch (t.op) {  // the arithmetic of bwd2's one-lane loop
      case O_ADD: if (ga) ga[i * sa] += g; if (gb) gb[i * sb] += g; break;
      case O_SUB: if (ga) ga[i * sa] += g; if (gb) gb[i * sb] += g * -1.0; break;
      default: if (ga) ga[i * sa] += g * y[i * sb]; if (gb) gb[i * sb] += g * x[i * sa]; break;
    }
  }
}

// ---- backward ------------------------------------------------------------------------------

void backward_record(VM& vm, const TapeRec& t) {
  const NumRef* in = t.nin > 2 ? vm.targs.data() + t.args : t.in;
  double* adj = vm.adj;
  const NumRef& out = t.out;
  const uint32_t Lo = vm.lanes_of(out);
  const double* go = adj + out.n.off;
  const double* z = vm.data(out);
  const uint32_t n = out.numel();

  switch (t.op) {
    case O_FLOOR: case O_CEILING: case O_ROUND: case O_TRUNCATE: case O_QUOTIENT: case O_REMAINDER: case O_MODULO:
    case O_GUARD:
      break;  // piecewise constant, or a decision: nothing flows back
    case O_ADD: bwd2<DAdd>(vm, in, go, z, n, Lo); break;
    case O_SUB: bwd2<DSub>(vm, in, go, z, n, Lo); break;
    case O_MUL: bwd2<DMul>(vm, in, go, z, n, Lo); break;
    case O_DIV: bwd2<DDiv>(vm, in, go, z, n, Lo); break;
    case O_POW: bwd2<DPow>(vm, in, go, z, n, Lo); break;
    case O_ATAN2: bwd2<DAtan2>(vm, in, go, z, n, Lo); break;
    case O_MIN: bwd2<DMin>(vm, in, go, z, n, Lo); break;
    case O_MAX: bwd2<DMax>(vm, in, go, z, n, Lo); break;
    case O_NEG: case O_EXP: case O_LOG: case O_SQRT: case O_SIN: case O_COS: case O_TAN: case O_ASIN:
    case O_ACOS: case O_ATAN: case O_TANH: case O_ABS: case O_SQUARE: case O_SIGMOID: case O_SOFTPLUS: {
      const double* x = vm.data(in[0]);
      double* ga = adj + in[0].n.off;
      size_t total = static_cast<size_t>(n) * Lo;
      Op op = static_cast<Op>(t.op);
      for (size_t i = 0; i < total; ++i)
        if (go[i] != 0) ga[i] += go[i] * der1(op, x[i], z[i]);
      break;
    }
    case O_SLICE: {
      const NumRef& a = in[0];
      double* ga = adj + a.n.off + static_cast<size_t>(t.d0) * Lo;
      for (size_t i = 0; i < static_cast<size_t>(n) * Lo; ++i) ga[i] += go[i];
      break;
    }
    case O_CONCAT: {
      int parts = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
      size_t e = 0;
      for (int k = 0; k < parts; ++k) {
        const NumRef& p = in[k];
        uint32_t pe = p.numel();
        if (p.active()) {
          double* gp = adj + p.n.off;
          uint32_t pl = vm.lanes_of(p);
          for (uint32_t q = 0; q < pe; ++q)
            for (uint32_t l = 0; l < Lo; ++l) gp[static_cast<size_t>(q) * pl + (pl == 1 ? 0 : l)] += go[(e + q) * Lo + l];
        }
        e += pe;
      }
      break;
    }
    case O_TRANSPOSE: {
      uint32_t r = t.d0, c = t.d1;
      double* ga = adj + in[0].n.off;
      for (uint32_t i = 0; i < r; ++i)
        for (uint32_t j = 0; j < c; ++j)
          for (uint32_t l = 0; l < Lo; ++l)
            ga[(static_cast<size_t>(i) * c + j) * Lo + l] += go[(static_cast<size_t>(j) * r + i) * Lo + l];
      break;
    }
    case O_GEMM: {
      uint32_t m = t.d0, k = t.d1, nn = t.d2;
      const NumRef& a = in[0];
      const NumRef& b = in[1];
      View va = view(vm, a, false), vb = view(vm, b, false);
      double* ga = a.active() ? adj + a.n.off : nullptr;
      double* gb = b.active() ? adj + b.n.off : nullptr;
      const GemmKernels* small = small_gemm(m, k, nn);
      if (small && (Lo == 1 || (va.ls && vb.ls)) && ga != gb) {  // (matmul X X): the generic loops
        (ga && gb ? small->bwd_ab : ga ? small->bwd_a : small->bwd_b)(va.p, vb.p, go, ga, gb, Lo);
        break;
      }
      if (Lo == 1) {
        for (uint32_t i = 0; i < m; ++i)
          for (uint32_t j = 0; j < nn; ++j) {
            double g = go[i * nn + j];
            if (g == 0) continue;
            for (uint32_t q = 0; q < k; ++q) {
              if (ga) ga[i * k + q] += g * vb.p[q * nn + j];
              if (gb) gb[q * nn + j] += g * va.p[i * k + q];
            }
          }
        break;
      }
      if (va.ls && vb.ls) {  // both lane-varying: contiguous lane loops
        for (uint32_t i = 0; i < m; ++i)
          for (uint32_t j = 0; j < nn; ++j) {
            const double* g = go + (static_cast<size_t>(i) * nn + j) * Lo;
            for (uint32_t q = 0; q < k; ++q) {
              size_t ea = (static_cast<size_t>(i) * k + q) * Lo, eb = (static_cast<size_t>(q) * nn + j) * Lo;
              if (ga) { double* d = ga + ea; const double* y = vb.p + eb; for (uint32_t l = 0; l < Lo; ++l) d[l] += g[l] * y[l]; }
              if (gb) { double* d = gb + eb; const double* x = va.p + ea; for (uint32_t l = 0; l < Lo; ++l) d[l] += g[l] * x[l]; }
            }
          }
        break;
      }
      for (uint32_t i = 0; i < m; ++i)
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
      break;
    }
    case O_VSUM:
    case O_NORM:
    case O_TRACE: {
      const NumRef& a = in[0];
      const double* x = vm.data(a);
      double* ga = adj + a.n.off;
      uint32_t ne = a.numel();
      int dim = static_cast<int>(t.d0);
      for (uint32_t e = 0; e < ne; ++e) {
        if (t.op == O_TRACE && (e % (dim + 1)) != 0) continue;
        for (uint32_t l = 0; l < Lo; ++l) {
          size_t ie = static_cast<size_t>(e) * Lo + l;
          double d = t.op == O_NORM ? (z[l] == 0 ? 0 : x[ie] / z[l]) : 1.0;
          ga[ie] += go[l] * d;
        }
      }
      break;
    }
    case O_DET:
    case O_LOGDET:
    case O_INV:
    case O_CHOL: {
      // per lane: d det = det A^-T, d logdet = A^-T, d inv: -Y^T G Y^T, cholesky: Murray (2016)
      const NumRef& a = in[0];
      int d = static_cast<int>(t.d0);
      if (d == 2 && t.op != O_CHOL && !a.uniform()) {  // closed forms, vectorized over lanes
        const double *a0 = vm.data(a), *a1 = a0 + Lo, *a2 = a1 + Lo, *a3 = a2 + Lo;
        double *g0 = adj + a.n.off, *g1 = g0 + Lo, *g2 = g1 + Lo, *g3 = g2 + Lo;
        if (t.op == O_INV) {
          const double *y0 = z, *y1 = y0 + Lo, *y2 = y1 + Lo, *y3 = y2 + Lo;
          const double *h0 = go, *h1 = h0 + Lo, *h2 = h1 + Lo, *h3 = h2 + Lo;
          for (uint32_t l = 0; l < Lo; ++l) {
            // W = Y^T G, R = -W Y^T
            double w0 = y0[l] * h0[l] + y2[l] * h2[l], w1 = y0[l] * h1[l] + y2[l] * h3[l];
            double w2 = y1[l] * h0[l] + y3[l] * h2[l], w3 = y1[l] * h1[l] + y3[l] * h3[l];
            g0[l] -= w0 * y0[l] + w1 * y1[l];
            g1[l] -= w0 * y2[l] + w1 * y3[l];
            g2[l] -= w2 * y0[l] + w3 * y1[l];
            g3[l] -= w2 * y2[l] + w3 * y3[l];
          }
        } else {
          for (uint32_t l = 0; l < Lo; ++l) {
            double det = a0[l] * a3[l] - a1[l] * a2[l];
            double s = (t.op == O_DET ? go[l] * z[l] : go[l]) / det;  // A^-T = [a3 -a2; -a1 a0] / det
            if (go[l] == 0) continue;
            g0[l] += s * a3[l]; g1[l] -= s * a2[l]; g2[l] -= s * a1[l]; g3[l] += s * a0[l];
          }
        }
        break;
      }
      size_t dd = static_cast<size_t>(d) * d;
      double* A = vm.scratch_for(6 * dd + 8, d);
      int* piv = vm.pivots.data();
      double *Ainv = A + dd, *G = Ainv + dd, *R = G + dd, *W = R + dd, *T = W + dd;
      for (uint32_t l = 0; l < Lo; ++l) {
        if (t.op == O_DET || t.op == O_LOGDET) {
          double g = go[l];
          if (g == 0) continue;
          gather(vm, a, l, A);
          if (d == 2) {
            double det = A[0] * A[3] - A[1] * A[2];
            Ainv[0] = A[3] / det; Ainv[1] = -A[1] / det; Ainv[2] = -A[2] / det; Ainv[3] = A[0] / det;
          } else {
            invert(A, d, Ainv, W, piv, T, &vm);
          }
          double s = t.op == O_DET ? g * z[l] : g;
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) R[i * d + j] = s * Ainv[j * d + i];
        } else if (t.op == O_INV) {
          gather(vm, out, l, Ainv);  // Y
          for (size_t e = 0; e < dd; ++e) G[e] = go[e * Lo + l];
          // R = -Y^T G Y^T
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < d; ++p) s += Ainv[p * d + i] * G[p * d + j];
              W[i * d + j] = s;
            }
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < d; ++p) s += W[i * d + p] * Ainv[j * d + p];
              R[i * d + j] = -s;
            }
        } else {  // cholesky
          gather(vm, out, l, A);  // L
          for (size_t e = 0; e < dd; ++e) G[e] = go[e * Lo + l];
          // P = Phi(L^T Lbar): lower triangle, diagonal halved
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < d; ++p) s += A[p * d + i] * G[p * d + j];
              W[i * d + j] = j > i ? 0 : (j == i ? 0.5 * s : s);
            }
          // S = L^-T P L^-1, via Linv
          invert(A, d, Ainv, T, piv, R, &vm);
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < d; ++p) s += Ainv[p * d + i] * W[p * d + j];
              T[i * d + j] = s;
            }
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < d; ++p) s += T[i * d + p] * Ainv[p * d + j];
              G[i * d + j] = s;
            }
          // the algorithm reads only the lower triangle: fold the symmetric gradient onto it
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double sym = 0.5 * (G[i * d + j] + G[j * d + i]);
              R[i * d + j] = j > i ? 0 : (j == i ? sym : 2 * sym);
            }
        }
        scatter_add(vm, adj, a, l, R);
      }
      break;
    }
    case O_SOLVE: {
      // x = A^-1 b:  gb = A^-T g,  gA = -gb x^T
      const NumRef& a = in[0];
      const NumRef& b = in[1];
      int d = static_cast<int>(t.d0), m = static_cast<int>(t.d1);
      size_t dd = static_cast<size_t>(d) * d, dm = static_cast<size_t>(d) * m;
      double* A = vm.scratch_for(3 * dd + 3 * dm + 8, d);
      int* piv = vm.pivots.data();
      double *AT = A + dd, *X = AT + dd, *GB = X + dm, *T = GB + dm, *RA = T + dm;
      for (uint32_t l = 0; l < Lo; ++l) {
        gather(vm, a, a.uniform() ? 0 : l, A);
        for (int i = 0; i < d; ++i)
          for (int j = 0; j < d; ++j) AT[i * d + j] = A[j * d + i];
        for (size_t e = 0; e < dm; ++e) GB[e] = go[e * Lo + l];
        if (!lu(AT, d, piv, &vm)) for (size_t e = 0; e < dm; ++e) GB[e] = NAN;
        else lu_solve(AT, piv, d, GB, m, T);
        if (b.active()) scatter_add(vm, adj, b, l, GB);
        if (a.active()) {
          gather(vm, out, l, X);
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) {
              double s = 0;
              for (int p = 0; p < m; ++p) s += GB[i * m + p] * X[j * m + p];
              RA[i * d + j] = -s;
            }
          scatter_add(vm, adj, a, l, RA);
        }
      }
      break;
    }
  }
}

// ---- replay --------------------------------------------------------------------------------

void forward_record(VM& vm, const TapeRec& t) {
  const NumRef* in = t.nin > 2 ? vm.targs.data() + t.args : t.in;
  const NumRef& out = t.out;
  double* o = vm.data(out);
  const uint32_t Lo = vm.lanes_of(out);
  const size_t total = static_cast<size_t>(out.numel()) * Lo;
  bool rounded = true;  // float32 programs round what the evaluator rounds
  if (Lo == 1 && t.op <= O_DIV) {  // one lane, + - * /: the loop inline (the evaluator's arithmetic)
    const double* pa = vm.data(in[0]);
    const double* pb = vm.data(in[1]);
    const uint32_t sa = in[0].ne == 1 ? 0 : 1, sb = in[1].ne == 1 ? 0 : 1;
    const uint32_t n = out.numel();
    switch (t.op) {
      case O_ADD: for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] + pb[i * sb]; break;
      case O_SUB: for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] - pb[i * sb]; break;
      case O_MUL: for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] * pb[i * sb]; break;
      default: for (uint32_t i = 0; i < n; ++i) o[i] = pa[i * sa] / pb[i * sb]; break;
    }
    if (vm.prog->f32) round_f32(o, n);
    return;
  }
  switch (t.op) {
    case O_ADD: case O_SUB: case O_MUL: case O_DIV: case O_POW: case O_ATAN2: case O_MIN: case O_MAX:
      fwd2(static_cast<Op>(t.op), o, out.numel(), Lo, view(vm, in[0], true), view(vm, in[1], true));
      break;
    case O_NEG: case O_EXP: case O_LOG: case O_SQRT: case O_SIN: case O_COS: case O_TAN: case O_ASIN:
    case O_ACOS: case O_ATAN: case O_TANH: case O_ABS: case O_SQUARE: case O_SIGMOID: case O_SOFTPLUS:
      unary_loop(static_cast<Op>(t.op), vm.data(in[0]), o, total);
      break;
    case O_SLICE: {
      const double* src = vm.data(in[0]) + static_cast<size_t>(t.d0) * Lo;
      for (size_t i = 0; i < total; ++i) o[i] = src[i];
      rounded = false;
      break;
    }
    case O_CONCAT:
      concat_compute(vm, in, t.nin == 255 ? static_cast<int>(t.d2) : t.nin, o, Lo);
      rounded = false;
      break;
    case O_TRANSPOSE:
      transpose_compute(vm, in[0], o, t.d0, t.d1, Lo);
      rounded = false;
      break;
    case O_GEMM: gemm_compute(vm, in[0], in[1], o, t.d0, t.d1, t.d2, Lo); break;
    case O_TRACE: case O_VSUM: case O_NORM: case O_DET: case O_LOGDET:
      reduce_compute(vm, static_cast<Op>(t.op), in[0], o, Lo, static_cast<int>(t.d0));
      break;
    case O_INV: inv_compute(vm, in[0], o, static_cast<int>(t.d0), Lo); break;
    case O_SOLVE: solve_compute(vm, in[0], in[1], o, static_cast<int>(t.d0), static_cast<int>(t.d1), Lo); break;
    case O_CHOL:
      chol_compute(vm, in[0], o, static_cast<int>(t.d0), Lo);
      rounded = false;
      break;
    case O_FLOOR: case O_CEILING: case O_ROUND: case O_TRUNCATE:
      rounding_loop(static_cast<Op>(t.op), vm.data(in[0]), o, total);
      rounded = false;
      break;
    case O_QUOTIENT: case O_REMAINDER: case O_MODULO:
      int_div_loop(static_cast<Op>(t.op), view(vm, in[0], true), view(vm, in[1], true), o, Lo, nullptr);
      rounded = false;
      break;
    case O_GUARD: return;
  }
  if (rounded && vm.prog->f32) round_f32(o, total);
}

bool guard_holds(VM& vm, const TapeRec& t) {
  const NumRef* in = t.nin > 2 ? vm.targs.data() + t.args : t.in;
  int n = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
  uint8_t* m = vm.lane_mask_buf(vm.L);
  int prim = static_cast<int>(t.d0);
  if (prim == P_EQVP) eqv_mask(vm, in[0], in[1], m);
  else if (prim == P_NUM_EQ || prim == P_LT || prim == P_GT || prim == P_LE || prim == P_GE) compare_mask(vm, prim, in, n, m);
  else pred_mask(vm, prim, in[0], m, nullptr);
  return std::memcmp(m, vm.guard_masks.data() + t.d1, vm.L) == 0;
}

}  // namespace ndvm
