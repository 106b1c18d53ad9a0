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
#include "simd.h"
#include "vm.h"

namespace ndvm::kern {
// Internal linkage in every unit that includes this header, as when these kernels lived in one
// file: the compiler inlines a kernel into its one caller per unit (the replay and evaluator loops)
// instead of calling a shared out-of-line copy.
namespace {

[[noreturn]] inline void err_at(const Node* site, const std::string& msg) {
  eval_error(msg, site ? site->line : 0, site ? site->col : 0);
}

// A read view of a value inside a run of L lanes: element stride and lane stride.
using simd::View;

template <class V>  // Value or NumRef
inline View view(VM& vm, const V& v, bool broadcast_scalar) {
  uint32_t lanes = vm.lanes_of(v);
  return View{vm.data(v), (broadcast_scalar && v.numel() == 1) ? 0u : lanes, v.uniform() ? 0u : 1u};
}

// The unary ops without vector math (simd::Kernels::has_unary is false): the C library's, element
// by element.
inline double fwd1(Op op, double x) {
  switch (op) {
    case O_SIN: return std::sin(x);
    case O_COS: return std::cos(x);
    case O_TAN: return std::tan(x);
    case O_ASIN: return std::asin(x);
    case O_ACOS: return std::acos(x);
    case O_ATAN: return std::atan(x);
    default: return NAN;
  }
}

// d out / d in, given the input x and the output z
inline double der1(Op op, double x, double z) {
  switch (op) {
    case O_SIN: return std::cos(x);
    case O_COS: return -std::sin(x);
    case O_TAN: return 1.0 + z * z;
    case O_ASIN: return 1.0 / std::sqrt(1.0 - x * x);
    case O_ACOS: return -1.0 / std::sqrt(1.0 - x * x);
    case O_ATAN: return 1.0 / (1.0 + x * x);
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
// + - * / expt go to the SIMD kernels (simd.h); the others loop here.
[[gnu::noinline]] inline void fwd2(Op op, double* o, uint32_t n, uint32_t Lo, View a, View b) {
  const simd::Kernels& k = simd::active();
  if (k.has_binary(op)) {
    k.binary(op, o, n, Lo, a, b);
    return;
  }
  switch (op) {
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

// Vector math where the SIMD kernels have it (simd.h, vecmath.h), else the C library's.
[[gnu::noinline]] inline void unary_loop(Op op, const double* x, double* o, size_t total) {
  const simd::Kernels& k = simd::active();
  if (k.has_unary(op)) {
    k.unary(op, x, o, total);
    return;
  }
  for (size_t i = 0; i < total; ++i) o[i] = fwd1(op, x[i]);
}

// One-lane + - * / of n elements with element strides sa, sb (0: a scalar broadcast, or 1): a loop
// inline for the few elements of scalar and small-matrix code, the SIMD kernels for data vectors.
inline void arith_one_lane(Op op, double* po, const double* pa, const double* pb, uint32_t n, uint32_t sa,
                           uint32_t sb) {
  constexpr uint32_t kInlineElements = 16;
  if (n >= kInlineElements) {
    simd::active().binary(op, po, n, 1, View{pa, sa, 1}, View{pb, sb, 1});
    return;
  }
  switch (op) {
    case O_ADD:
      for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] + pb[i * sb];
      break;
    case O_SUB:
      for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] - pb[i * sb];
      break;
    case O_MUL:
      for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] * pb[i * sb];
      break;
    default:
      for (uint32_t i = 0; i < n; ++i) po[i] = pa[i * sa] / pb[i * sb];
      break;
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
    // an infinity is no integer (R7RS): floor(inf) == inf would let it through
    if (!std::isfinite(x) || !std::isfinite(y) || x != std::floor(x) || y != std::floor(y))
      err_at(site, opname(site) + ": expects integers");
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
        if (!std::isfinite(x) || x != std::floor(x)) err_at(site, opname(site) + ": expects an integer");
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
