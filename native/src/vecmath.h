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

// e^r - 1 for |r| <= ln2/2 (a little more after rounding): Taylor to r^13, whose remainder is
// below 2^-57 relative.
inline double expm1_reduced(double r) {
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
  return r + (r * r) * p;
}

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
inline double log(double x) {
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
  // log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(NaN) = NaN
  const double special = x == 0.0 ? -kInf : (x < 0.0 ? __builtin_nan("") : x);
  return (x > 0.0 && x < kInf) ? r : special;
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
inline double sin_reduced(double r, double rl) {
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
  return s + (e + rest);
}
inline double cos_reduced(double r, double rl) {
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
  return s + (e + rest);
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

}  // namespace vm
}  // namespace
}  // namespace ndvm::simd
