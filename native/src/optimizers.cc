// Gradient descent, Adam and L-BFGS (two-loop recursion with a strong Wolfe line search), per lane,
// with their stopping rules. Each lane's arithmetic depends only on its own loss and gradient, so
// a lane's iterates, its stop and its counts are the same whatever the other lanes do.
#include "optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ndvm {

namespace {

double inf_norm(const double* x, int P) {
  double m = 0;
  for (int j = 0; j < P; ++j) m = std::max(m, std::fabs(x[j]));
  return m;
}

double dot(const double* a, const double* b, int P) {
  double s = 0;
  for (int j = 0; j < P; ++j) s += a[j] * b[j];
  return s;
}

class GradientDescent final : public StepRule {
 public:
  GradientDescent(double lr, double gtol, int R, int P) : StepRule(R), lr_(lr), gtol_(gtol), P_(P) {}
  int update(int r, int, double, const double* g, double* u) override {
    if (gtol_ > 0 && inf_norm(g, P_) <= gtol_) return STOP_GRADIENT;
    for (int j = 0; j < P_; ++j) u[j] -= lr_ * g[j];
    ++iterations_[r];
    return kContinue;
  }

 private:
  double lr_, gtol_;
  int P_;
};

class Adam final : public StepRule {
 public:
  Adam(double lr, double gtol, int R, int P)
      : StepRule(R), lr_(lr), gtol_(gtol), P_(P), m1_(static_cast<size_t>(R) * P, 0.0), m2_(m1_.size(), 0.0) {}
  int update(int r, int step, double, const double* g, double* u) override {
    if (gtol_ > 0 && inf_norm(g, P_) <= gtol_) return STOP_GRADIENT;
    double t = step + 1;
    double c1 = 1 - std::pow(kB1, t), c2 = 1 - std::pow(kB2, t);
    for (int j = 0; j < P_; ++j) {
      size_t i = static_cast<size_t>(r) * P_ + j;
      m1_[i] = kB1 * m1_[i] + (1 - kB1) * g[j];
      m2_[i] = kB2 * m2_[i] + (1 - kB2) * g[j] * g[j];
      u[j] -= lr_ * (m1_[i] / c1) / (std::sqrt(m2_[i] / c2) + kEps);
    }
    ++iterations_[r];
    return kContinue;
  }

 private:
  static constexpr double kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
  double lr_, gtol_;
  int P_;
  std::vector<double> m1_, m2_;  // first and second moments [R, P]
};

// Minimizer of the cubic through (a, fa) and (b, fb) with slopes dga and dgb (Nocedal & Wright,
// eq. 3.59); NaN when the cubic has no minimizer.
double cubic_min(double a, double fa, double dga, double b, double fb, double dgb) {
  double d1 = dga + dgb - 3 * (fa - fb) / (a - b);
  double rad = d1 * d1 - dga * dgb;
  if (!(rad >= 0)) return NAN;
  double d2 = std::copysign(std::sqrt(rad), b - a);
  return b - (b - a) * (dgb + d2 - d1) / (dgb - dga + 2 * d2);
}

// Every evaluation of a lane is either its starting point or a trial point u0 + a d of a line
// search along the direction d from the current iterate u0. The line search looks for a step
// meeting the strong Wolfe conditions (sufficient decrease and |slope| <= c2 |initial slope|):
// first step 1 (the quasi-Newton step), extended while the loss still descends steeply, then a
// bracket [lo, hi] shrunk by safeguarded cubic interpolation (Nocedal & Wright, algorithms 3.5
// and 3.6). A search that cannot meet them settles for the best sufficient decrease it found; one
// that found none restarts once from steepest descent with the memory cleared, then stops the lane.
class LBFGS final : public StepRule {
 public:
  LBFGS(const CalibSpec& spec, int R, int P)
      : StepRule(R),
        lr_(spec.lr),
        gtol_(spec.gtol),
        ftol_(spec.ftol),
        xtol_(spec.xtol),
        M_(std::max(1, spec.lbfgs_memory)),
        P_(P),
        lanes_(R),
        sv_(P),
        yv_(P),
        q_(P),
        a_(M_) {
    for (Lane& s : lanes_) {
      s.s.assign(static_cast<size_t>(M_) * P, 0);
      s.y.assign(static_cast<size_t>(M_) * P, 0);
      s.rho.assign(M_, 0);
      s.g0.assign(P, 0);
      s.g_lo.assign(P, 0);
      s.d.assign(P, 0);
      s.u0.assign(P, 0);
    }
  }

  int update(int r, int, double f, const double* g, double* u) override {
    Lane& S = lanes_[r];
    if (!S.have_point) {  // the first evaluation is the starting point
      if (inf_norm(g, P_) <= gtol_) return STOP_GRADIENT;
      return begin_iteration(S, f, g, u);
    }
    return line_search(S, r, f, dot(g, S.d.data(), P_), g, u);
  }

  int on_nonfinite(int r, double* u) override {
    Lane& S = lanes_[r];
    if (!S.have_point) return STOP_NONFINITE;
    // a trial point left the domain: it bounds the step from above
    S.zoom = true;
    S.a_hi = S.a;
    S.f_hi = INFINITY;
    S.dg_hi = NAN;
    return next_trial(S, r, u);
  }

  // every point L-BFGS moves to is a trial point that the next step evaluates or abandons
  bool score_last_update() const override { return false; }

 private:
  static constexpr double kMaxStep = 2.0;         // largest move of one coordinate per iteration
  static constexpr double kC1 = 1e-4, kC2 = 0.9;  // Wolfe constants for quasi-Newton methods
  static constexpr double kGrow = 4.0;            // extension of a step that still descends steeply
  static constexpr int kMaxTrials = 20;           // trial points per line search
  struct Lane {
    std::vector<double> s, y, rho;  // curvature pairs, ring buffers [M, P], [M]
    int count = 0, head = 0;
    std::vector<double> u0, g0, d;  // the iterate, its gradient, the search direction
    double f0 = NAN, gd0 = 0;       // loss at u0, slope along d
    // line search: the trial step a; the bracket's ends (lo: the best step with sufficient decrease)
    double a = 1, a_max = 1, a_lo = 0, f_lo = 0, dg_lo = 0, a_hi = 0, f_hi = 0, dg_hi = 0;
    std::vector<double> g_lo;  // gradient at the step a_lo
    bool zoom = false, have_point = false, restarted = false;
    int trials = 0;
  };

  void move_to(const Lane& S, double a, double* u) const {
    for (int j = 0; j < P_; ++j) u[j] = S.u0[j] + a * S.d[j];
  }

  // u0 = u with loss f and gradient g: the next direction and the first trial step.
  int begin_iteration(Lane& S, double f, const double* g, double* u) {
    const int P = P_, M = M_;
    S.f0 = f;
    copy_row(S.u0.data(), u, P);
    copy_row(S.g0.data(), g, P);
    // two-loop recursion: d = -H g
    std::copy(g, g + P, q_.begin());
    for (int k = 0; k < S.count; ++k) {
      int i = (S.head - 1 - k + M) % M;
      a_[i] = S.rho[i] * dot(S.s.data() + i * P, q_.data(), P);
      for (int j = 0; j < P; ++j) q_[j] -= a_[i] * S.y[i * P + j];
    }
    double gamma;
    if (S.count > 0) {
      int i = (S.head - 1 + M) % M;
      gamma = 1.0 / (S.rho[i] * dot(S.y.data() + i * P, S.y.data() + i * P, P));
    } else {
      double gn = std::sqrt(dot(g, g, P));
      gamma = gn > 0 ? lr_ / gn : 1;  // no curvature known yet: a first step of length lr
    }
    for (int j = 0; j < P; ++j) q_[j] *= gamma;
    for (int k = S.count - 1; k >= 0; --k) {
      int i = (S.head - 1 - k + M) % M;
      double b = S.rho[i] * dot(S.y.data() + i * P, q_.data(), P);
      for (int j = 0; j < P; ++j) q_[j] += S.s[i * P + j] * (a_[i] - b);
    }
    for (int j = 0; j < P; ++j) S.d[j] = -q_[j];
    S.gd0 = dot(S.d.data(), g, P);
    if (!(S.gd0 < 0)) {  // not a descent direction: steepest descent
      for (int j = 0; j < P; ++j) S.d[j] = -g[j] * gamma;
      S.gd0 = dot(S.d.data(), g, P);
    }
    if (!(S.gd0 < 0)) return STOP_STEP;  // no direction of descent representable
    // A step is capped in unconstrained coordinates: a long step into a saturated transform
    // (softplus or logistic far from the data) would decrease the loss and then leave the lane on
    // a plateau whose gradient vanishes.
    double dmax = inf_norm(S.d.data(), P);
    S.a_max = kMaxStep / dmax;
    S.a = std::min(1.0, S.a_max);
    S.a_lo = 0;
    S.f_lo = f;
    S.dg_lo = S.gd0;
    S.zoom = false;
    S.trials = 1;
    S.have_point = true;
    move_to(S, S.a, u);
    return kContinue;
  }

  int line_search(Lane& S, int r, double phi, double dphi, const double* g, double* u) {
    const bool sufficient = phi <= S.f0 + kC1 * S.a * S.gd0 && phi < S.f_lo;
    const bool flat = std::fabs(dphi) <= -kC2 * S.gd0;
    if (!S.zoom) {
      if (!sufficient) {
        set_hi(S, S.a, phi, dphi);
        S.zoom = true;
      } else if (flat) {
        return accept(S, r, phi, g, u);
      } else if (dphi >= 0) {  // passed a minimizer along d
        set_hi(S, S.a_lo, S.f_lo, S.dg_lo);
        set_lo(S, S.a, phi, dphi, g);
        S.zoom = true;
      } else {  // still descending steeply: a longer step, up to the cap
        set_lo(S, S.a, phi, dphi, g);
        if (S.a >= S.a_max) return accept(S, r, phi, g, u);
        if (++S.trials > kMaxTrials) return give_up(S, r, u);
        S.a = std::min(kGrow * S.a, S.a_max);
        move_to(S, S.a, u);
        return kContinue;
      }
    } else if (!sufficient) {
      set_hi(S, S.a, phi, dphi);
    } else {
      if (flat) return accept(S, r, phi, g, u);
      if (dphi * (S.a_hi - S.a_lo) >= 0) set_hi(S, S.a_lo, S.f_lo, S.dg_lo);
      set_lo(S, S.a, phi, dphi, g);
    }
    return next_trial(S, r, u);
  }

  void set_lo(Lane& S, double a, double f, double dg, const double* g) {
    S.a_lo = a;
    S.f_lo = f;
    S.dg_lo = dg;
    copy_row(S.g_lo.data(), g, P_);
  }
  static void set_hi(Lane& S, double a, double f, double dg) {
    S.a_hi = a;
    S.f_hi = f;
    S.dg_hi = dg;
  }

  // The next trial step inside the bracket (zoom phase).
  int next_trial(Lane& S, int r, double* u) {
    const double lo = S.a_lo, hi = S.a_hi, w = std::fabs(hi - lo);
    // the bracket no longer separates representable points, or the search ran too long
    if (++S.trials > kMaxTrials || w * inf_norm(S.d.data(), P_) <= 1e-15 * (1 + inf_norm(S.u0.data(), P_)))
      return give_up(S, r, u);
    double a;
    if (!std::isfinite(S.f_hi)) {
      a = lo + 0.25 * (hi - lo);  // beyond hi the program is not finite: shrink fast
    } else {
      a = cubic_min(lo, S.f_lo, S.dg_lo, hi, S.f_hi, S.dg_hi);
      double left = std::min(lo, hi) + 0.1 * w, right = std::max(lo, hi) - 0.1 * w;
      if (!std::isfinite(a)) a = 0.5 * (lo + hi);
      a = std::min(std::max(a, left), right);
    }
    S.a = a;
    move_to(S, a, u);
    return kContinue;
  }

  // The line search cannot meet the Wolfe conditions: take the best sufficient decrease found, or
  // restart once from steepest descent, or stop.
  int give_up(Lane& S, int r, double* u) {
    if (S.a_lo > 0) {
      move_to(S, S.a_lo, u);
      return accept(S, r, S.f_lo, S.g_lo.data(), u);
    }
    copy_row(u, S.u0.data(), P_);
    if (S.count > 0 && !S.restarted) {
      S.count = 0;
      S.head = 0;
      S.restarted = true;
      std::vector<double> g0 = S.g0;
      return begin_iteration(S, S.f0, g0.data(), u);
    }
    return STOP_STEP;
  }

  // The trial point u (loss f, gradient g) becomes the next iterate: a curvature pair, the
  // stopping rules, then the next direction.
  int accept(Lane& S, int r, double f, const double* g, double* u) {
    const int P = P_;
    double sy = 0, yy = 0, step = 0;
    for (int j = 0; j < P; ++j) {
      sv_[j] = u[j] - S.u0[j];
      yv_[j] = g[j] - S.g0[j];
      sy += sv_[j] * yv_[j];
      yy += yv_[j] * yv_[j];
      step = std::max(step, std::fabs(sv_[j]));
    }
    if (sy > 1e-16 * yy && sy > 0) {  // keeps H positive definite
      copy_row(S.s.data() + S.head * P, sv_.data(), P);
      copy_row(S.y.data() + S.head * P, yv_.data(), P);
      S.rho[S.head] = 1.0 / sy;
      S.head = (S.head + 1) % M_;
      S.count = std::min(S.count + 1, M_);
    }
    ++iterations_[r];
    S.restarted = false;
    const double f_prev = S.f0;
    if (inf_norm(g, P) <= gtol_) return STOP_GRADIENT;
    if (ftol_ > 0 && f_prev - f <= ftol_ * std::max(std::fabs(f_prev), std::fabs(f))) return STOP_DECREASE;
    if (xtol_ > 0 && step <= xtol_ * (1 + inf_norm(u, P))) return STOP_STEP;
    return begin_iteration(S, f, g, u);
  }

  double lr_, gtol_, ftol_, xtol_;
  int M_, P_;
  std::vector<Lane> lanes_;
  std::vector<double> sv_, yv_, q_, a_;  // scratch
};

}  // namespace

std::unique_ptr<StepRule> make_step_rule(const CalibSpec& spec, int R, int P) {
  switch (spec.optimizer) {
    case Optimizer::GD: return std::make_unique<GradientDescent>(spec.lr, spec.gtol, R, P);
    case Optimizer::Adam: return std::make_unique<Adam>(spec.lr, spec.gtol, R, P);
    case Optimizer::LBFGS: return std::make_unique<LBFGS>(spec, R, P);
  }
  return nullptr;  // unreachable: the enum is closed
}

}  // namespace ndvm
