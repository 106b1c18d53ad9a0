// Backward: the adjoint of each tape record, one small function per kernel family (the `kind`
// column of the tape-op table in prims.h). VM::backward walks the tape in reverse and calls
// backward_one_lane or backward_record for each record.
#include "linalg.h"

namespace ndvm {

using namespace kern;

namespace {

// Local derivatives of the binary operations: da, db given x, y and the output z.
struct DAdd {
  static constexpr Op kOp = O_ADD;
  static double da(double, double, double) { return 1; }
  static double db(double, double, double) { return 1; }
};
struct DSub {
  static constexpr Op kOp = O_SUB;
  static double da(double, double, double) { return 1; }
  static double db(double, double, double) { return -1; }
};
struct DMul {
  static constexpr Op kOp = O_MUL;
  static double da(double, double y, double) { return y; }
  static double db(double x, double, double) { return x; }
};
struct DDiv {
  static constexpr Op kOp = O_DIV;
  static double da(double, double y, double) { return 1 / y; }
  static double db(double, double y, double z) { return -z / y; }
};
// expt and atan2: the SIMD kernels' own derivatives (vector pow and log), so that a uniform
// operand's adjoint summed here has the bits of the one-lane run's
struct DPow {
  static constexpr Op kOp = O_POW;
  static double da(double x, double y, double z) { return simd::active().binary_derivative(kOp, 0, x, y, z); }
  static double db(double x, double y, double z) { return simd::active().binary_derivative(kOp, 1, x, y, z); }
};
struct DAtan2 {
  static constexpr Op kOp = O_ATAN2;
  static double da(double x, double y, double z) { return simd::active().binary_derivative(kOp, 0, x, y, z); }
  static double db(double x, double y, double z) { return simd::active().binary_derivative(kOp, 1, x, y, z); }
};
struct DMin {
  static constexpr Op kOp = O_MIN;
  static double da(double x, double y, double) { return y < x ? 0 : 1; }
  static double db(double x, double y, double) { return y < x ? 1 : 0; }
};
struct DMax {
  static constexpr Op kOp = O_MAX;
  static double da(double x, double y, double) { return y > x ? 0 : 1; }
  static double db(double x, double y, double) { return y > x ? 1 : 0; }
};

// Backward of a binary op over lanes with the lane strides known at compile time, so the lane
// loops vectorize. An operand with a zero lane stride is uniform and must not be active here.
template <class D, bool AL, bool BL>
void bwd2_lanes(View va, View vb, double* ga, double* gb, const double* go, const double* z, uint32_t n, uint32_t Lo) {
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
  double* ga = a.active() ? vm.adjoint(a) : nullptr;
  double* gb = b.active() ? vm.adjoint(b) : nullptr;
  // The SIMD kernels take every case where an active operand varies by lane (always, in a one-lane
  // run); an active uniform operand (an input's gradient) sums over the lanes below.
  const simd::Kernels& k = simd::active();
  if (k.has_binary(D::kOp) && (Lo == 1 || ((!ga || va.ls) && (!gb || vb.ls)))) {
    k.binary_adjoint(D::kOp, va, vb, ga, gb, go, z, n, Lo);
    return;
  }
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

// g += the contributions c[0..n), n <= 8: elementwise (stride 1), or summed into g[0] (stride 0)
// in the order of simd::combine_chains (chain i holds 0 + c[i]; the chains added pairwise).
inline void accumulate_small(double* g, const double* c, uint32_t n, uint32_t stride) {
  if (stride) {
    for (uint32_t i = 0; i < n; ++i) g[i] += c[i];
    return;
  }
  if (n == 1) {
    g[0] += c[0];
    return;
  }
  double chain[simd::kSumChains] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t i = 0; i < n; ++i) chain[i] += c[i];
  g[0] += simd::combine_chains(chain, 1);
}

// The commonest records of one-lane runs (+ - * and small matrix products), in a function of their
// own: backward_record's prologue, sized for every op, costs as much as their arithmetic.
void backward_one_lane(VM& vm, const TapeRec& t) {
  const NumRef* in = t.in;
  const double* go = vm.adjoint(t.out);
  const NumRef& a = in[0];
  const NumRef& b = in[1];
  double* ga = a.active() ? vm.adjoint(a) : nullptr;
  double* gb = b.active() ? vm.adjoint(b) : nullptr;
  if (t.op == O_GEMM) {
    const GemmKernels* small = small_gemm(t.d0, t.d1, t.d2, 1);
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
  constexpr uint32_t kInlineElements = 8;                         // one kSumChains block: scalars and small matrices
  if (n > kInlineElements) {                                      // data vectors: the SIMD kernels
    simd::active().binary_adjoint(t.op, View{x, sa, 1}, View{y, sb, 1}, ga, gb, go, vm.data(t.out), n, 1);
    return;
  }
  // The SIMD kernels' arithmetic, inline: a zero cotangent contributes nothing; an operand
  // broadcast over n > 1 elements sums its contributions in the order of simd::combine_chains (each in a
  // chain of its own, the chains added pairwise).
  double ca[kInlineElements], cb[kInlineElements];
  for (uint32_t i = 0; i < n; ++i) {
    const double g = go[i];
    double da = 1.0, db = t.op == O_SUB ? -1.0 : 1.0;
    if (t.op == O_MUL) {
      da = y[i * sb];
      db = x[i * sa];
    }
    ca[i] = g != 0 ? g * da : 0.0;
    cb[i] = g != 0 ? g * db : 0.0;
  }
  if (ga) accumulate_small(ga, ca, n, sa);
  if (gb) accumulate_small(gb, cb, n, sb);
}

// accumulate_small with n and the stride fixed. Summed over N = 2..4 elements, the empty chains are
// left out: a chain holds 0 + c, never -0, so the +0 of an empty one changes no sum (same bits).
template <uint32_t N, uint32_t STRIDE>
inline void accumulate_fixed(double* g, const double* c) {
  if (STRIDE || N == 1) {
    accumulate_small(g, c, N, STRIDE);
    return;
  }
  double s = (0.0 + c[0]) + (0.0 + c[1]);
  if (N == 3) s = s + (0.0 + c[2]);
  if (N == 4) s = s + ((0.0 + c[2]) + (0.0 + c[3]));
  g[0] += s;
}

// A decoded one-lane + - * of N <= 4 elements (PlanStep, vm.h): backward_one_lane's inline
// arithmetic with the op, shape and strides fixed, the same bits.
template <int OP, uint32_t N, uint32_t SA, uint32_t SB>
void arith_adjoint_step(const double* pay, double* adj, const PlanStep& s) {
  const double* go = adj + s.out;
  const double* x = pay + s.a;
  const double* y = pay + s.b;
  double ca[N], cb[N];
  for (uint32_t i = 0; i < N; ++i) {
    const double g = go[i];
    double da = 1.0, db = OP == O_SUB ? -1.0 : 1.0;
    if (OP == O_MUL) {
      da = y[i * SB];
      db = x[i * SA];
    }
    ca[i] = g != 0 ? g * da : 0.0;
    cb[i] = g != 0 ? g * db : 0.0;
  }
  if (s.a_active) accumulate_fixed<N, SA>(adj + s.a, ca);
  if (s.b_active) accumulate_fixed<N, SB>(adj + s.b, cb);
}

namespace {
template <int OP, uint32_t N>
PlanStep::Bwd arith_adjoint_for(uint32_t sa, uint32_t sb) {
  if (sa) return sb ? arith_adjoint_step<OP, N, 1, 1> : arith_adjoint_step<OP, N, 1, 0>;
  return sb ? arith_adjoint_step<OP, N, 0, 1> : arith_adjoint_step<OP, N, 0, 0>;
}

template <int OP>
PlanStep::Bwd arith_adjoint_for(uint32_t n, uint32_t sa, uint32_t sb) {
  switch (n) {
    case 1: return arith_adjoint_for<OP, 1>(sa, sb);
    case 2: return arith_adjoint_for<OP, 2>(sa, sb);
    case 3: return arith_adjoint_for<OP, 3>(sa, sb);
    case 4: return arith_adjoint_for<OP, 4>(sa, sb);
    default: return nullptr;
  }
}
}  // namespace

PlanStep::Bwd plan_backward(int op, uint32_t n, uint32_t sa, uint32_t sb) {
  switch (op) {
    case O_ADD: return arith_adjoint_for<O_ADD>(n, sa, sb);
    case O_SUB: return arith_adjoint_for<O_SUB>(n, sa, sb);
    case O_MUL: return arith_adjoint_for<O_MUL>(n, sa, sb);
    default: return nullptr;
  }
}

// ---- backward ------------------------------------------------------------------------------

namespace {

// What every family's adjoint reads: the record's inputs, its output, the output's cotangent.
struct Bwd {
  const NumRef* in;
  const NumRef& out;
  uint32_t Lo;       // lanes of the output
  uint32_t n;        // elements of the output
  const double* go;  // d objective / d output
  const double* z;   // the output
};

void bwd_binary(VM& vm, const TapeRec& t, const Bwd& b) {
  switch (t.op) {
    case O_ADD: bwd2<DAdd>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_SUB: bwd2<DSub>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_MUL: bwd2<DMul>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_DIV: bwd2<DDiv>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_POW: bwd2<DPow>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_ATAN2: bwd2<DAtan2>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_MIN: bwd2<DMin>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    case O_MAX: bwd2<DMax>(vm, b.in, b.go, b.z, b.n, b.Lo); break;
    default: break;
  }
}

void bwd_unary(VM& vm, const TapeRec& t, const Bwd& b) {
  const double* x = vm.data(b.in[0]);
  double* ga = vm.adjoint(b.in[0]);
  size_t total = static_cast<size_t>(b.n) * b.Lo;
  Op op = static_cast<Op>(t.op);
  const simd::Kernels& k = simd::active();
  if (k.has_unary(op)) {
    k.unary_adjoint(op, x, b.z, b.go, ga, total);
    return;
  }
  for (size_t i = 0; i < total; ++i)
    if (b.go[i] != 0) ga[i] += b.go[i] * der1(op, x[i], b.z[i]);
}

void bwd_slice(VM& vm, const TapeRec& t, const Bwd& b) {
  double* ga = vm.adjoint(b.in[0]) + static_cast<size_t>(t.d0) * b.Lo;
  for (size_t i = 0; i < static_cast<size_t>(b.n) * b.Lo; ++i) ga[i] += b.go[i];
}

void bwd_concat(VM& vm, const TapeRec& t, const Bwd& b) {
  int parts = t.nin == 255 ? static_cast<int>(t.d2) : t.nin;
  size_t e = 0;
  for (int k = 0; k < parts; ++k) {
    const NumRef& p = b.in[k];
    uint32_t pe = p.numel();
    if (p.active()) {
      double* gp = vm.adjoint(p);
      uint32_t pl = vm.lanes_of(p);
      for (uint32_t q = 0; q < pe; ++q)
        for (uint32_t l = 0; l < b.Lo; ++l)
          gp[static_cast<size_t>(q) * pl + (pl == 1 ? 0 : l)] += b.go[(e + q) * b.Lo + l];
    }
    e += pe;
  }
}

void bwd_transpose(VM& vm, const TapeRec& t, const Bwd& b) {
  uint32_t r = t.d0, c = t.d1, Lo = b.Lo;
  double* ga = vm.adjoint(b.in[0]);
  for (uint32_t i = 0; i < r; ++i)
    for (uint32_t j = 0; j < c; ++j)
      for (uint32_t l = 0; l < Lo; ++l)
        ga[(static_cast<size_t>(i) * c + j) * Lo + l] += b.go[(static_cast<size_t>(j) * r + i) * Lo + l];
}

// trace vsum norm: the adjoint is the cotangent spread over the elements read
void bwd_reduce(VM& vm, const TapeRec& t, const Bwd& b) {
  const NumRef& a = b.in[0];
  const double* x = vm.data(a);
  double* ga = vm.adjoint(a);
  uint32_t ne = a.numel();
  int dim = static_cast<int>(t.d0);
  for (uint32_t e = 0; e < ne; ++e) {
    if (t.op == O_TRACE && (e % (dim + 1)) != 0) continue;
    for (uint32_t l = 0; l < b.Lo; ++l) {
      size_t ie = static_cast<size_t>(e) * b.Lo + l;
      double d = t.op == O_NORM ? (b.z[l] == 0 ? 0 : x[ie] / b.z[l]) : 1.0;
      ga[ie] += b.go[l] * d;
    }
  }
}

}  // namespace

void backward_record(VM& vm, const TapeRec& t) {
  const NumRef* in = vm.record_inputs(t);
  const NumRef& out = t.out;
  const Bwd b{in, out, vm.lanes_of(out), out.numel(), vm.adjoint(out), vm.data(out)};
  switch (tape_kind(t.op)) {
    case TapeKind::ROUNDING:
    case TapeKind::INTDIV:
    case TapeKind::GUARD: break;  // piecewise constant, or a decision: nothing flows back
    case TapeKind::BINARY: bwd_binary(vm, t, b); break;
    case TapeKind::UNARY: bwd_unary(vm, t, b); break;
    case TapeKind::SLICE: bwd_slice(vm, t, b); break;
    case TapeKind::CONCAT: bwd_concat(vm, t, b); break;
    case TapeKind::TRANSPOSE: bwd_transpose(vm, t, b); break;
    case TapeKind::GEMM: gemm_adjoint(vm, in[0], in[1], b.go, t.d0, t.d1, t.d2, b.Lo); break;
    case TapeKind::REDUCE: bwd_reduce(vm, t, b); break;
    case TapeKind::DET: det_adjoint(vm, in[0], b.go, b.z, static_cast<int>(t.d0), b.Lo, t.op == O_LOGDET); break;
    case TapeKind::INV: inv_adjoint(vm, in[0], out, b.go, static_cast<int>(t.d0), b.Lo); break;
    case TapeKind::CHOL: chol_adjoint(vm, in[0], out, b.go, static_cast<int>(t.d0), b.Lo); break;
    case TapeKind::SOLVE:
      solve_adjoint(vm, in[0], in[1], out, b.go, static_cast<int>(t.d0), static_cast<int>(t.d1), b.Lo);
      break;
  }
}

// Both records' adjoints of the pair (* s U) (+ X that) ending at record r, in one pass: the
// product's adjoint is formed in registers, never stored.
void VM::scaled_add_backward(size_t r) {
  const TapeRec& sum = tape[r];
  const TapeRec& product = tape[r - 1];
  double* gx = sum.in[0].active() ? adjoint(sum.in[0]) : nullptr;
  wide_table(L).scaled_add_adjoint(adjoint(sum.out), gx, data(product.in[1]), adjoint(product.in[0]), sum.out.numel(),
                                   L);
}

}  // namespace ndvm
