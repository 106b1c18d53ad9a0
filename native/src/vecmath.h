// Vector math: exp, expm1, log, log1p, sin, cos, tanh, sigmoid and softplus of doubles, written as
// straight-line code (no branches, no calls, no tables) so that GCC vectorizes the loops that call
// them, and so that an element computes the same bits in a vector body and in its scalar tail: every
// function is a fixed sequence of IEEE additions, multiplications, divisions, selects and integer
// bit operations (built with -ffp-contract=off: no FMA contraction, which would round differently).
//
// Accuracy (measured by tests/test_vecmath.py against mpmath, README "Vector math"): exp, log,
// sin, cos within 1 ulp; tanh, sigmoid and softplus within 2 ulp; special values (+-0, +-inf, NaN,
// subnormals, overflow and underflow) as C99 Annex F. sin and cos reduce their argument with a
// three-part pi/2 (Cody-Waite), exact for |x| <= kTrigLimit; larger or non-finite arguments are
// recomputed by the C library in the kernels (kernels_simd.inc), one element at a time.
//
// Only for the per-ISA kernel units: everything here has internal linkage, so that the AVX-512
// copy of a function never replaces the baseline one at link time.
#pragma once
#include <cstdint>

// The larger functions are forced inline: a call in a loop body would keep it from vectorizing.
#define NDVM_VM_INLINE [[gnu::always_inline]] inline

namespace ndvm::simd {
namespace {
namespace vm {

inline uint64_t bits(double x) {
  uint64_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u;
}
inline double from_bits(uint64_t u) {
  double x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
}
inline double abs(double x) { return from_bits(bits(x) & 0x7fffffffffffffffULL); }
// x with the sign of s
inline double copysign(double x, double s) {
  return from_bits((bits(x) & 0x7fffffffffffffffULL) | (bits(s) & 0x8000000000000000ULL));
}

constexpr double kInf = __builtin_inf();
// Adding 1.5 * 2^52 to a double of magnitude below 2^51 rounds it to an integer, which then sits in
// the low bits of the sum's mantissa; subtracting it again gives that integer as a double.
constexpr double kShift = 0x1.8p52;
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
// ln 2 in two parts: the first has 32 significant bits, so k * kLn2Hi is exact for |k| < 2^21.
constexpr double kLn2Hi = 0x1.62e42fee00000p-1;
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;
// The argument range that keeps exp's scale factors representable: exp overflows above
// 709.78 and underflows to zero below -745.13.
constexpr double kExpMax = 710.0, kExpMin = -746.0;

// 2^k for an integral double k in [-1022, 1023]: the biased exponent shifted into place.
inline double pow2(double k) { return from_bits(bits(k + (1023.0 + kShift)) << 52); }

// e^r - 1 - r for |r| <= ln2/2 (a little more after rounding): Taylor to r^13, whose remainder is
// below 2^-57 relative to e^r - 1.
inline double expm1_tail(double r) {
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = 1.0 / 479001600.0 + r * p;
  p = 1.0 / 39916800.0 + r * p;
  p = 1.0 / 3628800.0 + r * p;
  p = 1.0 / 362880.0 + r * p;
  p = 1.0 / 40320.0 + r * p;
  p = 1.0 / 5040.0 + r * p;
  p = 1.0 / 720.0 + r * p;
  p = 1.0 / 120.0 + r * p;
  p = 1.0 / 24.0 + r * p;
  p = 1.0 / 6.0 + r * p;
  p = 0.5 + r * p;
  return (r * r) * p;
}
// e^r - 1 for |r| <= ln2/2
inline double expm1_reduced(double r) { return r + expm1_tail(r); }

// x = k ln2 + r with k integral, |r| <= ~ln2/2; returns r, sets k (as a double).
inline double exp_reduce(double x, double* k) {
  double kd = x * kInvLn2 + kShift;
  kd -= kShift;
  *k = kd;
  return (x - kd * kLn2Hi) - kd * kLn2Lo;
}

inline double exp(double x) {
  x = x < kExpMin ? kExpMin : x;  // NaN stays NaN (comparisons with it are false)
  x = x > kExpMax ? kExpMax : x;
  double k;
  const double r = exp_reduce(x, &k);
  // 2^k in two factors, so that k beyond the normal exponents (overflow, subnormal results)
  // still scales exactly before the one rounding of the last product
  const bool low = k < -1000.0, high = k > 1000.0;
  const double k2 = low ? -600.0 : (high ? 100.0 : 0.0);
  const double f2 = low ? 0x1p-600 : (high ? 0x1p100 : 1.0);
  return ((1.0 + expm1_reduced(r)) * pow2(k - k2)) * f2;
}

// e^x - 1 for x in [0, 45] (tanh's range): (2^k - 1) + 2^k p, exact in its parts for small k.
inline double expm1_nonneg(double x) {
  double k;
  const double r = exp_reduce(x, &k);
  const double s = pow2(k);
  return (s - 1.0) + s * expm1_reduced(r);
}

// log(x) = k ln2 + log(m), m in [sqrt(1/2), sqrt(2)); log(m) = log(1 + f) from the series of
// 2 atanh(s), s = f / (2 + f), written so that f itself (exact) carries the leading bits.
NDVM_VM_INLINE double log(double x) {
  const bool sub = x < 0x1p-1022;  // subnormal (and zero, negative: fixed up below)
  const double xs = sub ? x * 0x1p54 : x;
  const uint64_t u = bits(xs);
  double k = from_bits(((u >> 52) & 0x7ff) | bits(kShift)) - kShift - 1023.0;
  k = sub ? k - 54.0 : k;
  double m = from_bits((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // [1, 2)
  const bool big = m > 0x1.6a09e667f3bcdp+0;                                  // sqrt(2)
  m = big ? m * 0.5 : m;
  k = big ? k + 1.0 : k;
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;
  // R(z) = sum_{j=1..11} 2 z^j / (2j + 1); the next term is below 2^-60 relative
  double R = 2.0 / 23.0;
  R = 2.0 / 21.0 + z * R;
  R = 2.0 / 19.0 + z * R;
  R = 2.0 / 17.0 + z * R;
  R = 2.0 / 15.0 + z * R;
  R = 2.0 / 13.0 + z * R;
  R = 2.0 / 11.0 + z * R;
  R = 2.0 / 9.0 + z * R;
  R = 2.0 / 7.0 + z * R;
  R = 2.0 / 5.0 + z * R;
  R = 2.0 / 3.0 + z * R;
  R = z * R;
  const double hfsq = 0.5 * f * f;
  // log(1 + f) = f - hfsq + s (hfsq + R)
  const double r = k * kLn2Hi + (f - (hfsq - (s * (hfsq + R) + k * kLn2Lo)));
  // log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(NaN) = NaN: one select after another
  // (nested ones on a loop-invariant x keep the loop from vectorizing)
  double v = x < kInf ? r : x;  // +inf and NaN
  v = x < 0.0 ? __builtin_nan("") : v;
  return x == 0.0 ? -kInf : v;
}

// log(1 + u) for u > -1, exact for tiny u: log(w) corrected by the rounding of w = 1 + u.
inline double log1p(double u) {
  const double w = 1.0 + u;
  return log(w) - ((w - 1.0) - u) / w;
}

// pi/2 in three parts of 33, 33 and 53 bits: n * kPio2_1 and n * kPio2_2 are exact for |n| < 2^20.
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
constexpr double kPio2_1 = 0x1.921fb54400000p+0;
constexpr double kPio2_2 = 0x1.0b4611a600000p-34;
constexpr double kPio2_3 = 0x1.3198a2e037073p-69;
// Above this, sin and cos come from the C library (kernels_simd.inc).
constexpr double kTrigLimit = 0x1p20;

// The rounding error of a * b, exactly (Dekker's product, no FMA): a and b split into halves of
// 26 bits whose products are exact.
inline double split_hi(double a) {
  const double c = 134217729.0 * a;  // 2^27 + 1
  return c - (c - a);
}
inline double product_error(double a, double b, double p) {
  const double ah = split_hi(a), al = a - ah, bh = split_hi(b), bl = b - bh;
  return (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
}
// x / d as q + (returned) low part, for a small integer d: the remainder x - q d is exact.
inline double divide_low(double x, double xl, double d, double q) {
  const double m = q * d;
  return (((x - m) - product_error(q, d, m)) + xl) / d;
}

// sin and cos of r + rl (rl: the reduction's tail, |rl| <= ulp(r)), |r| <= ~pi/4, nearly
// correctly rounded: the two leading terms (r - r^3/6; 1 - r^2/2 + r^4/24) in two-part arithmetic,
// the rest of the Taylor series (to r^19, r^18: remainders below 2^-58 relative) in plain doubles,
// added last to the leading parts' low words.
// A double-double: hi + lo (the extended-precision intermediates of pow, tan and the inverse
// trigonometric functions; normalized, |lo| <= ulp(hi), except where said).
struct DD {
  double hi, lo;
};

// (hi, lo not normalized: lo may exceed ulp(hi))
inline DD sin_reduced_dd(double r, double rl) {
  const double z = r * r, zl = product_error(r, r, z);           // r^2 = z + zl
  const double c = r * z, cl = product_error(r, z, c) + r * zl;  // r^3 = c + cl
  const double q = c / 6.0, ql = divide_low(c, cl, 6.0, q);      // r^3 / 6 = q + ql
  double p = -1.0 / 121645100408832000.0;                        // -1/19!
  p = 1.0 / 355687428096000.0 + z * p;
  p = -1.0 / 1307674368000.0 + z * p;
  p = 1.0 / 6227020800.0 + z * p;
  p = -1.0 / 39916800.0 + z * p;
  p = 1.0 / 362880.0 + z * p;
  p = -1.0 / 5040.0 + z * p;
  p = 1.0 / 120.0 + z * p;
  const double rest = (c * z) * p + rl * (1.0 - 0.5 * z) - ql;
  const double s = r - q;
  const double e = (r - s) - q;  // exact: |r| > |q|
  return {s, e + rest};
}
inline DD cos_reduced_dd(double r, double rl) {
  const double z = r * r, zl = product_error(r, r, z);                 // r^2 = z + zl
  const double d = z * z, dl = product_error(z, z, d) + 2.0 * z * zl;  // r^4 = d + dl
  const double q = d / 24.0, ql = divide_low(d, dl, 24.0, q);          // r^4 / 24 = q + ql
  const double hz = 0.5 * z;                                           // exact
  const double w = 1.0 - hz, we = (1.0 - w) - hz;                      // exact
  double p = -1.0 / 6402373705728000.0;                                // -1/18!
  p = 1.0 / 20922789888000.0 + z * p;
  p = -1.0 / 87178291200.0 + z * p;
  p = 1.0 / 479001600.0 + z * p;
  p = -1.0 / 3628800.0 + z * p;
  p = 1.0 / 40320.0 + z * p;
  p = -1.0 / 720.0 + z * p;
  const double rest = (((we - 0.5 * zl) + ql) + (d * z) * p) - r * rl;
  const double s = w + q;
  const double e = (w - s) + q;  // exact: w > q
  return {s, e + rest};
}
inline double sin_reduced(double r, double rl) {
  const DD d = sin_reduced_dd(r, rl);
  return d.hi + d.lo;
}
inline double cos_reduced(double r, double rl) {
  const DD d = cos_reduced_dd(r, rl);
  return d.hi + d.lo;
}

// x = n pi/2 + r + rl (r + rl: the remainder in two parts); returns r, sets rl and the quadrant
// n mod 4 in the low bits of *q.
inline double trig_reduce(double x, double* rl, uint64_t* q) {
  double nd = x * kTwoOverPi + kShift;
  *q = bits(nd);
  nd -= kShift;
  const double r1 = x - nd * kPio2_1;  // exact (n * kPio2_1 is, and the difference is small)
  const double w = nd * kPio2_2;       // exact
  const double r2 = r1 - w;
  const double bb = r2 - r1;  // the rounding error of r1 - w (Knuth's two-sum)
  const double e2 = (r1 - (r2 - bb)) + (-w - bb);
  const double tail = e2 - nd * kPio2_3;
  const double r = r2 + tail;
  *rl = (r2 - r) + tail;
  return r;
}

// sin (quarter = 0) or cos (quarter = 1) of x, |x| <= kTrigLimit: sin(x + quarter pi/2) from the
// quadrant's polynomial, selected and signed with integer masks.
inline double sincos(double x, uint64_t quarter) {
  uint64_t q;
  double rl;
  const double r = trig_reduce(x, &rl, &q);
  q += quarter;
  const double s = sin_reduced(r, rl), c = cos_reduced(r, rl);
  const uint64_t odd = 0 - (q & 1);  // all ones in odd quadrants: cos of r, else sin
  const uint64_t v = (bits(c) & odd) | (bits(s) & ~odd);
  return from_bits(v ^ ((q & 2) << 62));  // quadrants 2 and 3: negated
}
inline double sin(double x) { return x == 0.0 ? x : sincos(x, 0); }  // sin(-0) = -0
inline double cos(double x) { return sincos(x, 1); }

// tanh(x) = sign(x) t / (t + 2), t = e^{2|x|} - 1; |x| >= 22 rounds to +-1.
inline double tanh(double x) {
  double a = abs(x);
  a = a > 22.0 ? 22.0 : a;
  const double t = expm1_nonneg(2.0 * a);
  return copysign(t / (t + 2.0), x);
}

// 1 / (1 + e^-x), without overflow: e = e^{-|x|} <= 1 on both sides.
inline double sigmoid(double x) {
  const double e = exp(-abs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

// log(1 + e^x) = max(x, 0) + log1p(e^{-|x|})
inline double softplus(double x) {
  const double l = log1p(exp(-abs(x)));
  return x > 0.0 ? x + l : l;
}

// ---- extended precision: pow, tan and the inverse trigonometric functions ----------------------
// Conditions combine with & and | (not && and ||), whose short-circuit branches would keep the
// loops from vectorizing. Their results come from a double-double value (hi + lo, about 100 bits, computed with Dekker's
// exact products and Knuth's exact sums) rounded once at the end, so that they stay within about
// half an ulp plus the last rounding (tests/test_vecmath.py, README "Vector math").

// a + b = s + e exactly
NDVM_VM_INLINE DD two_sum(double a, double b) {
  const double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}
// a + b = s + e exactly when |a| >= |b| (or a == 0)
NDVM_VM_INLINE DD fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}
// a * b = p + e exactly (|a|, |b| below 2^995, no underflow in the parts)
NDVM_VM_INLINE DD two_prod(double a, double b) {
  const double p = a * b;
  return {p, product_error(a, b, p)};
}
// (a.hi + a.lo)(b.hi + b.lo) to about 2^-100 relative
NDVM_VM_INLINE DD dd_mul(DD a, DD b) {
  const DD p = two_prod(a.hi, b.hi);
  return fast_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}
// (n.hi + n.lo) / (d.hi + d.lo): the quotient and the correction from its exact remainder
NDVM_VM_INLINE DD dd_div(DD n, DD d) {
  const double q = n.hi / d.hi;
  const DD p = two_prod(q, d.hi);
  // n.hi - p.hi is exact (Sterbenz: p.hi is within a rounding of n.hi)
  return {q, (((n.hi - p.hi) - p.lo) + (n.lo - q * d.lo)) / d.hi};
}

// 1/3 and 1/5 in two parts
constexpr double kThirdHi = 0x1.5555555555555p-2, kThirdLo = 0x1.5555555555555p-56;
constexpr double kFifthHi = 0x1.999999999999ap-3, kFifthLo = -0x1.999999999999ap-57;

// log(x) as hi + lo for x positive and finite (subnormals included), relative error below 2^-70:
// enough that pow's y log(x) stays exact to 2^-60 however large (up to 745 before exp overflows).
// As log() above, log(m) = 2 atanh(s), s = f / (2 + f), but the series' three leading terms
// 2s (1 + z/3 + z^2/5 + z^3 R(z)), z = s^2 <= 0.0295, in double-double.
NDVM_VM_INLINE DD log_dd(double x) {
  const bool sub = x < 0x1p-1022;
  const double xs = sub ? x * 0x1p54 : x;
  const uint64_t u = bits(xs);
  double k = from_bits(((u >> 52) & 0x7ff) | bits(kShift)) - kShift - 1023.0;
  k = sub ? k - 54.0 : k;
  double m = from_bits((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
  const bool big = m > 0x1.6a09e667f3bcdp+0;
  m = big ? m * 0.5 : m;
  k = big ? k + 1.0 : k;
  const double f = m - 1.0;                             // exact
  const DD s = dd_div({f, 0.0}, fast_two_sum(2.0, f));  // f / (2 + f)
  const DD z = fast_two_sum(s.hi * s.hi, product_error(s.hi, s.hi, s.hi * s.hi) + 2.0 * s.hi * s.lo);
  // R(z) = sum_{j=3..13} z^(j-3) / (2j + 1): the series to s^27, whose remainder is below 2^-70
  double R = 1.0 / 27.0;
  R = 1.0 / 25.0 + z.hi * R;
  R = 1.0 / 23.0 + z.hi * R;
  R = 1.0 / 21.0 + z.hi * R;
  R = 1.0 / 19.0 + z.hi * R;
  R = 1.0 / 17.0 + z.hi * R;
  R = 1.0 / 15.0 + z.hi * R;
  R = 1.0 / 13.0 + z.hi * R;
  R = 1.0 / 11.0 + z.hi * R;
  R = 1.0 / 9.0 + z.hi * R;
  R = 1.0 / 7.0 + z.hi * R;
  // P = 1/3 + z/5 + z^2 R: the first two terms in two parts, the rest (below 2^-11 of P) plain
  const DD z5 = dd_mul(z, {kFifthHi, kFifthLo});
  const DD p0 = two_sum(kThirdHi, z5.hi);
  const DD P = fast_two_sum(p0.hi, ((p0.lo + z5.lo) + (z.hi * z.hi) * R) + kThirdLo);
  const DD c = dd_mul(dd_mul(s, z), P);  // s z P: log(m) = 2 (s + c)
  const DD lm = fast_two_sum(s.hi, c.hi);
  const double lm_lo = lm.lo + (s.lo + c.lo);
  // k ln2 + 2 (s + c): k kLn2Hi is exact; |k ln2| >= |log m| unless k = 0
  const DD h = fast_two_sum(k * kLn2Hi, 2.0 * lm.hi);
  return fast_two_sum(h.hi, h.lo + (k * kLn2Lo + 2.0 * lm_lo));
}

// e^(h + l), |l| <= ulp(h): as exp() above, with the argument's low part carried through the
// reduction and 1 + r added exactly, so that only the last rounding is a half ulp.
NDVM_VM_INLINE double exp_dd(double h, double l) {
  l = h >= kExpMin ? l : 0.0;  // NaN is not passed here
  l = h <= kExpMax ? l : 0.0;
  h = h < kExpMin ? kExpMin : h;
  h = h > kExpMax ? kExpMax : h;
  double k = h * kInvLn2 + kShift;
  k -= kShift;
  const DD r = two_sum(h - k * kLn2Hi, l - k * kLn2Lo);  // h - k kLn2Hi is exact
  const double a = 1.0 + r.hi, ae = (1.0 - a) + r.hi;    // exact: |r| < 1
  const double m = a + (ae + (expm1_tail(r.hi) + r.lo * (1.0 + r.hi)));
  double k2 = k < -1000.0 ? -600.0 : 0.0, f2 = k < -1000.0 ? 0x1p-600 : 1.0;
  k2 = k > 1000.0 ? 100.0 : k2;
  f2 = k > 1000.0 ? 0x1p100 : f2;
  return (m * pow2(k - k2)) * f2;
}

// x^y, C99 Annex F's special cases included: x^0 = 1 and 1^y = 1 (NaN too), a negative x to an
// odd integer power negative and to a non-integer power NaN, 0 and inf to positive and negative
// powers, overflow to inf and underflow to 0 (subnormal results rounded once more). Otherwise
// e^(y log|x|) with log|x| in double-double (log_dd) and the product y log|x| exact to 2^-100.
NDVM_VM_INLINE double pow(double x, double y) {
  const double ax = abs(x), ay = abs(y);
  // y integral (every |y| >= 2^52 is) and odd (none >= 2^53 is): adding and subtracting 2^52
  // rounds a smaller |y| (or |y| / 2) to an integer. No bool temporaries here and below: selects
  // on each condition where it is used, which GCC vectorizes for every instruction set.
  const double y_rounded = ay < 0x1p52 ? (ay + 0x1p52) - 0x1p52 : ay;
  const double half = 0.5 * ay, half_rounded = (half + 0x1p52) - 0x1p52;
  // the finite path on tame inputs (0, inf, NaN are fixed up below); beyond 2^64, y log|x| is
  // beyond exp's range for every x other than 1 (|log x| >= 2^-53)
  double xs = ax < kInf ? ax : 1.0;
  xs = ax > 0.0 ? xs : 1.0;
  const double ys = ay < 0x1p64 ? y : copysign(0x1p64, y);
  const DD lx = log_dd(xs);
  const double ph = ys * lx.hi;
  double r = exp_dd(ph, product_error(ys, lx.hi, ph) + ys * lx.lo);
  // The fix-ups as selects of one condition each, on x alone or y alone: a condition combining
  // both keeps the loop from vectorizing when one operand is the same for every element.
  const double zero_to_y = y > 0.0 ? 0.0 : kInf, inf_to_y = y > 0.0 ? kInf : 0.0;
  r = ax == 0.0 ? zero_to_y : r;
  r = ax == kInf ? inf_to_y : r;
  // a negative x (-0 and -inf included) to an odd integer power: negative
  double sign = half_rounded != half ? copysign(1.0, x) : 1.0;
  sign = ay < 0x1p53 ? sign : 1.0;
  sign = y_rounded == ay ? sign : 1.0;
  r = sign * r;
  // a negative finite x to a non-integer power: NaN
  double non_integral = x < 0.0 ? __builtin_nan("") : r;
  non_integral = x > -kInf ? non_integral : r;
  r = y_rounded == ay ? r : non_integral;
  r = x != x ? x : r;
  r = y != y ? y : r;
  r = x == 1.0 ? 1.0 : r;
  return y == 0.0 ? 1.0 : r;
}

// tan of x, |x| <= kTrigLimit (beyond: the C library, kernels_simd.inc): sin/cos (even quadrants)
// or -cos/sin (odd) of the reduced argument, both in double-double, divided in double-double.
NDVM_VM_INLINE double tan(double x) {
  uint64_t q;
  double rl;
  const double r = trig_reduce(x, &rl, &q);
  // normalized: the polynomials' low parts hold their higher terms, far above an ulp
  const DD s0 = sin_reduced_dd(r, rl), c0 = cos_reduced_dd(r, rl);
  const DD s = fast_two_sum(s0.hi, s0.lo), c = fast_two_sum(c0.hi, c0.lo);
  const bool odd = (q & 1) != 0;
  const DD v = dd_div({odd ? c.hi : s.hi, odd ? c.lo : s.lo}, {odd ? s.hi : c.hi, odd ? s.lo : c.lo});
  const double t = v.hi + v.lo;
  return x == 0.0 ? x : (odd ? -t : t);  // tan(-0) = -0
}

constexpr double kPio2Hi = 0x1.921fb54442d18p+0, kPio2Lo = 0x1.1a62633145c07p-54;
constexpr double kPiHi = 0x1.921fb54442d18p+1, kPiLo = 0x1.1a62633145c07p-53;

// atan(n / d) in [0, pi/2] as hi + lo, for n, d >= 0 (double-double), finite, not both zero, and
// of moderate exponents (the callers scale): u = min(n, d) / max(n, d) in [0, 1], atan(u) =
// atan(c) + atan(t), c = j/4 the nearest quarter, t = (u - c) / (1 + u c), |t| <= 1/8, from its
// Taylor series to t^21 (remainder below 2^-60 relative); for n > d, pi/2 - atan(u).
NDVM_VM_INLINE DD atan_ratio(DD n, DD d) {
  const bool inv = n.hi > d.hi;
  const DD u = dd_div({inv ? d.hi : n.hi, inv ? d.lo : n.lo}, {inv ? n.hi : d.hi, inv ? n.lo : d.lo});
  double j = 4.0 * u.hi + kShift;
  j -= kShift;  // 0..4
  const double c = 0.25 * j;
  // atan(c): 0, atan(1/4), atan(1/2), atan(3/4), pi/4 (one select after another: a chained
  // conditional expression compiles to branches)
  double ch = 0.0, cl = 0.0;
  ch = j == 1.0 ? 0x1.f5b75f92c80ddp-3 : ch;
  cl = j == 1.0 ? 0x1.8ab6e3cf7afbdp-57 : cl;
  ch = j == 2.0 ? 0x1.dac670561bb4fp-2 : ch;
  cl = j == 2.0 ? 0x1.a2b7f222f65e2p-56 : cl;
  ch = j == 3.0 ? 0x1.4978fa3269ee1p-1 : ch;
  cl = j == 3.0 ? 0x1.2419a87f2a458p-56 : cl;
  ch = j == 4.0 ? 0x1.921fb54442d18p-1 : ch;
  cl = j == 4.0 ? 0x1.1a62633145c07p-55 : cl;
  const DD uc = two_prod(u.hi, c);
  const double dh = 1.0 + uc.hi;                                   // 1 + u c: uc.hi <= 1
  const DD den = {dh, ((1.0 - dh) + uc.hi) + (uc.lo + u.lo * c)};  //
  const DD tt = dd_div({u.hi - c, u.lo}, den);                     // u - c is exact (Sterbenz)
  const double t = tt.hi, z = t * t;
  double Q = -1.0 / 21.0;
  Q = 1.0 / 19.0 + z * Q;
  Q = -1.0 / 17.0 + z * Q;
  Q = 1.0 / 15.0 + z * Q;
  Q = -1.0 / 13.0 + z * Q;
  Q = 1.0 / 11.0 + z * Q;
  Q = -1.0 / 9.0 + z * Q;
  Q = 1.0 / 7.0 + z * Q;
  Q = -1.0 / 5.0 + z * Q;
  Q = 1.0 / 3.0 + z * Q;
  // atan(t + tl) = t + tl - t z Q(z) (tl t^2 is below 2^-59 of t)
  const DD a = fast_two_sum(ch, t);  // |atan c| >= |t| unless c = 0
  const double alo = a.lo + (cl + (tt.lo - (t * z) * Q));
  const DD b = fast_two_sum(kPio2Hi, -a.hi);  // pi/2 - atan(u) >= pi/4 >= atan(u)
  return {inv ? b.hi : a.hi, inv ? b.lo + (kPio2Lo - alo) : alo};
}

NDVM_VM_INLINE double atan(double x) {
  // atan(2^60) rounds to pi/2 as every larger argument does: clamping keeps Dekker's products finite
  double a = abs(x);
  a = a < 0x1p60 ? a : 0x1p60;  // and NaN
  const DD v = atan_ratio({a, 0.0}, {1.0, 0.0});
  const double r = copysign(v.hi + v.lo, x);
  return x != x ? x : r;
}

// atan2(y, x) in [-pi, pi], C99 Annex F's special cases (signed zeros and infinities) included.
NDVM_VM_INLINE double atan2(double y, double x) {
  const double ay = abs(y), ax = abs(x);
  // infinities as 1 against 0 (or 1 against 1: pi/4); two zeros as 0 against 1 (one select
  // after another, on doubles: selects on stored flags keep the loop from vectorizing)
  double n = ax == kInf ? 0.0 : ay;
  n = ay == kInf ? 1.0 : n;
  double d = ay == kInf ? 0.0 : ax;
  d = ax == kInf ? 1.0 : d;
  d = ((n == 0.0) & (d == 0.0)) ? 1.0 : d;
  // both scaled by 2^(1023 - e), e the larger one's exponent field, into [2^-1022, 4)
  const double m = n > d ? n : d;
  double e = from_bits((bits(m) >> 52) | bits(kShift)) - kShift;
  e = 1023.0 - e;
  e = e < -1022.0 ? -1022.0 : (e > 1022.0 ? 1022.0 : e);
  const double sc = pow2(e);
  const DD v = atan_ratio({n * sc, 0.0}, {d * sc, 0.0});
  const DD w = fast_two_sum(kPiHi, -v.hi);  // pi - v for x < 0 (and -0): pi - v >= v
  const double r = copysign(1.0, x) < 0.0 ? w.hi + (w.lo + (kPiLo - v.lo)) : v.hi + v.lo;
  return ((x != x) | (y != y)) ? x + y : copysign(r, y);
}

// sqrt(1 - x^2) as hi + lo, |x| <= 1: 1 - x^2 exact in two parts, one Newton correction
NDVM_VM_INLINE DD sqrt1m_dd(double x) {
  const DD p = two_prod(x, x);
  const DD w = fast_two_sum(1.0, -p.hi);
  const double wl = w.lo - p.lo;
  const double sh = __builtin_sqrt(w.hi);
  const DD s2 = two_prod(sh, sh);
  const double sl = (((w.hi - s2.hi) - s2.lo) + wl) / (sh == 0.0 ? 1.0 : 2.0 * sh);
  return {sh, sl};
}

// asin(x) = atan(|x| / sqrt(1 - x^2)), signed; NaN beyond [-1, 1]
NDVM_VM_INLINE double asin(double x) {
  const double a = abs(x);
  const bool in = a <= 1.0;
  const double as = in ? a : 0.0;
  const DD v = atan_ratio({as, 0.0}, sqrt1m_dd(as));
  return in ? copysign(v.hi + v.lo, x) : (x != x ? x : __builtin_nan(""));
}

// acos(x) = atan(sqrt(1 - x^2) / |x|), or pi minus it for x < 0; NaN beyond [-1, 1]
NDVM_VM_INLINE double acos(double x) {
  const double a = abs(x);
  const bool in = a <= 1.0;
  const double as = in ? a : 0.0;
  const DD v = atan_ratio(sqrt1m_dd(as), {as, 0.0});
  const DD w = fast_two_sum(kPiHi, -v.hi);
  const double r = x < 0.0 ? w.hi + (w.lo + (kPiLo - v.lo)) : v.hi + v.lo;
  return in ? r : (x != x ? x : __builtin_nan(""));
}

}  // namespace vm
}  // namespace
}  // namespace ndvm::simd
