// The elementwise kernels shared by the evaluator (kernels.cc), replay (replay.cc) and backward
// (backward.cc): every kernel is a loop over lanes (innermost, contiguous) so that one walk of the
// program serves B parameter vectors; operands that are uniform (shared by all lanes) or scalar
// (broadcast over elements) are read with a zero stride. Kernels are elementwise in the lanes and
// never reorder a lane's arithmetic, so a lane computes the same bits whatever the batch width, and
// a replayed run the bits of a walked one.
#pragma once
#include <cmath>
#include <cstring>
#include <string>

#include "prims.h"
#include "vm.h"

namespace ndvm::kern {
// Internal linkage in every unit that includes this header, as when these kernels lived in one
// file: the compiler inlines a kernel into its one caller per unit (the replay and evaluator loops)
// instead of calling a shared out-of-line copy.
namespace {

[[noreturn]] inline void err_at(const Node* site, const std::string& msg) {
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

inline double fwd1(Op op, double x) {
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
inline double der1(Op op, double x, double z) {
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

// Out of line (here and in unary_loop, rounding_loop, int_div_loop, lu, lu_solve, invert): inlined
// into forward_record, their loops made its prologue save more registers for every record (2% more
// instructions on the one-lane Kalman replay, 7% more in forward_record at 16 lanes).
[[gnu::noinline]] inline void fwd2(Op op, double* o, uint32_t n, uint32_t Lo, View a, View b) {
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

inline void round_f32(double* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<double>(static_cast<float>(p[i]));
}

inline std::string opname(const Node* site) {
  return site && !site->name.empty() ? "'" + site->name + "'" : "arithmetic";
}

// ---- kernels shared by the evaluator and replay -----------------------------------------------
// The evaluator and a replay (forward_record) compute through the same functions, so a replayed
// run gives the bits of a walked one.

[[gnu::noinline]] inline void unary_loop(Op op, const double* x, double* o, size_t total) {
  switch (op) {  // specialized loops for the common cases so they vectorize
    case O_NEG:
      for (size_t i = 0; i < total; ++i) o[i] = -x[i];
      break;
    case O_EXP:
      for (size_t i = 0; i < total; ++i) o[i] = std::exp(x[i]);
      break;
    case O_SQUARE:
      for (size_t i = 0; i < total; ++i) o[i] = x[i] * x[i];
      break;
    default:
      for (size_t i = 0; i < total; ++i) o[i] = fwd1(op, x[i]);
  }
}

[[gnu::noinline]] inline void rounding_loop(Op op, const double* x, double* o, size_t total) {
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
[[gnu::noinline]] inline void int_div_loop(Op op, View va, View vb, double* o, uint32_t Lo, const Node* site) {
  for (uint32_t l = 0; l < Lo; ++l) {
    double x = va.p[l * va.ls], y = vb.p[l * vb.ls];
    if (x != std::floor(x) || y != std::floor(y)) err_at(site, opname(site) + ": expects integers");
    if (y == 0) err_at(site, opname(site) + ": division by zero");
    double r;
    if (op == O_QUOTIENT) r = std::trunc(x / y);
    else if (op == O_REMAINDER) r = std::fmod(x, y);
    else {
      r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
    }
    o[l] = r == 0 ? 0.0 : r;  // no negative zero
  }
}

// The lanes' outcomes of a chained numeric comparison of n scalars.
template <class V>
inline void compare_mask(VM& vm, int prim, const V* args, int n, uint8_t* m) {
  std::memset(m, 1, vm.lane_count());
  for (int i = 0; i + 1 < n; ++i) {
    View a = view(vm, args[i], true), b = view(vm, args[i + 1], true);
    for (int l = 0; l < vm.lane_count(); ++l) {
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
inline void pred_mask(VM& vm, int prim, const V& a, uint8_t* m, const Node* site) {
  View v = view(vm, a, true);
  int lanes = a.uniform() ? 1 : vm.lane_count();
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
inline void eqv_mask(VM& vm, const V& a, const V& b, uint8_t* m) {
  std::memset(m, 1, vm.lane_count());
  View va = view(vm, a, false), vb = view(vm, b, false);
  for (uint32_t e = 0; e < a.numel(); ++e)
    for (int l = 0; l < vm.lane_count(); ++l) {
      double x = va.p[e * va.es + l * va.ls], y = vb.p[e * vb.es + l * vb.ls];
      m[l] &= x == y && std::signbit(x) == std::signbit(y);  // (eqv? 0.0 -0.0) is #f
    }
}

template <class V>
void concat_compute(VM& vm, const V* parts, int n, double* o, uint32_t Lo) {
  size_t e = 0;
  for (int i = 0; i < n; ++i) {
    const V& p = parts[i];
    const double* src = vm.data(p);
    for (uint32_t k = 0; k < p.numel(); ++k, ++e) {
      double* dst = o + e * Lo;
      if (p.uniform())
        for (uint32_t l = 0; l < Lo; ++l) dst[l] = src[k];
      else std::memcpy(dst, src + static_cast<size_t>(k) * Lo, sizeof(double) * Lo);
    }
  }
}

template <class V>
void transpose_compute(VM& vm, const V& a, double* o, uint32_t r, uint32_t c, uint32_t lanes) {
  const double* x = vm.data(a);
  for (uint32_t i = 0; i < r; ++i)
    for (uint32_t j = 0; j < c; ++j)
      std::memcpy(o + (static_cast<size_t>(j) * r + i) * lanes, x + (static_cast<size_t>(i) * c + j) * lanes,
                  sizeof(double) * lanes);
}

}  // namespace
}  // namespace ndvm::kern
