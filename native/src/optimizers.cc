// Gradient descent, Adam and L-BFGS (two-loop recursion with an Armijo backtracking line search),
// per lane. Each lane's arithmetic depends only on its own loss and gradient, so a lane's iterates
// are the same whatever the other lanes do.
#include "optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ndvm {

namespace {

// Copies P doubles; P may be 0 (a program without parameters), where memcpy's pointers may be null.
inline void copy_row(double* dst, const double* src, int P) {
  if (P > 0) std::memcpy(dst, src, sizeof(double) * P);
}

class GradientDescent final : public StepRule {
 public:
  GradientDescent(double lr, int P) : lr_(lr), P_(P) {}
  bool update(int, int, double, const double* g, double* u) override {
    for (int j = 0; j < P_; ++j) u[j] -= lr_ * g[j];
    return true;
  }

 private:
  double lr_;
  int P_;
};

class Adam final : public StepRule {
 public:
  Adam(double lr, int R, int P) : lr_(lr), P_(P), m1_(static_cast<size_t>(R) * P, 0.0), m2_(m1_.size(), 0.0) {}
  bool update(int r, int step, double, const double* g, double* u) override {
    double t = step + 1;
    double c1 = 1 - std::pow(kB1, t), c2 = 1 - std::pow(kB2, t);
    for (int j = 0; j < P_; ++j) {
      size_t i = static_cast<size_t>(r) * P_ + j;
      m1_[i] = kB1 * m1_[i] + (1 - kB1) * g[j];
      m2_[i] = kB2 * m2_[i] + (1 - kB2) * g[j] * g[j];
      u[j] -= lr_ * (m1_[i] / c1) / (std::sqrt(m2_[i] / c2) + kEps);
    }
    return true;
  }

 private:
  static constexpr double kB1 = 0.9, kB2 = 0.999, kEps = 1e-8;
  double lr_;
  int P_;
  std::vector<double> m1_, m2_;  // first and second moments [R, P]
};

// Every evaluation of a lane is either the first (its starting point) or a trial point u0 + alpha d
// of a line search along d from u0: accepted under the Armijo condition (a new curvature pair and
// direction), otherwise alpha is halved.
class LBFGS final : public StepRule {
 public:
  LBFGS(double lr, int memory, int R, int P) : lr_(lr), M_(memory), P_(P), lanes_(R) {
    for (Lane& s : lanes_) {
      s.s.assign(static_cast<size_t>(M_) * P, 0);
      s.y.assign(static_cast<size_t>(M_) * P, 0);
      s.rho.assign(M_, 0);
      s.g.assign(P, 0);
      s.d.assign(P, 0);
      s.u0.assign(P, 0);
    }
  }

  bool on_nonfinite(int r, double* u, bool* converged) override {
    Lane& S = lanes_[r];
    *converged = false;
    if (!S.have_point) return false;
    // a trial point of the line search left the domain: shrink the step instead
    S.alpha *= 0.25;
    if (S.alpha < 1e-12) {
      *converged = true;
      return false;
    }
    for (int j = 0; j < P_; ++j) u[j] = S.u0[j] + S.alpha * S.d[j];
    return true;
  }

  bool update(int r, int, double f, const double* gu, double* ur) override {
    const int P = P_, M = M_;
    Lane& S = lanes_[r];
    bool accept = !S.have_point;  // the first evaluation defines the starting point
    if (S.have_point) {
      // Armijo condition on the trial point u0 + alpha d
      if (f <= S.f + 1e-4 * S.alpha * S.gd) {
        accept = true;
        // curvature pair
        double sy = 0;
        std::vector<double> sv(P), yv(P);
        for (int j = 0; j < P; ++j) {
          sv[j] = ur[j] - S.u0[j];
          yv[j] = gu[j] - S.g[j];
          sy += sv[j] * yv[j];
        }
        if (sy > 1e-12) {
          copy_row(S.s.data() + S.head * P, sv.data(), P);
          copy_row(S.y.data() + S.head * P, yv.data(), P);
          S.rho[S.head] = 1.0 / sy;
          S.head = (S.head + 1) % M;
          S.count = std::min(S.count + 1, M);
        }
      } else {
        S.alpha *= 0.5;
        if (S.alpha < 1e-12) return false;
        for (int j = 0; j < P; ++j) ur[j] = S.u0[j] + S.alpha * S.d[j];
      }
    }
    if (!accept) return true;
    S.f = f;
    copy_row(S.u0.data(), ur, P);
    copy_row(S.g.data(), gu, P);
    // two-loop recursion: d = -H g
    std::vector<double> q(gu, gu + P), a(M);
    for (int k2 = 0; k2 < S.count; ++k2) {
      int i = (S.head - 1 - k2 + M) % M;
      double dot = 0;
      for (int j = 0; j < P; ++j) dot += S.s[i * P + j] * q[j];
      a[i] = S.rho[i] * dot;
      for (int j = 0; j < P; ++j) q[j] -= a[i] * S.y[i * P + j];
    }
    double gamma = 1;
    if (S.count > 0) {
      int i = (S.head - 1 + M) % M;
      double yy = 0;
      for (int j = 0; j < P; ++j) yy += S.y[i * P + j] * S.y[i * P + j];
      gamma = 1.0 / (S.rho[i] * yy);
    } else {
      double gn = 0;
      for (int j = 0; j < P; ++j) gn += gu[j] * gu[j];
      gamma = gn > 0 ? lr_ / std::sqrt(gn) : 1;  // first step: length lr
    }
    for (int j = 0; j < P; ++j) q[j] *= gamma;
    for (int k2 = S.count - 1; k2 >= 0; --k2) {
      int i = (S.head - 1 - k2 + M) % M;
      double dot = 0;
      for (int j = 0; j < P; ++j) dot += S.y[i * P + j] * q[j];
      double b = S.rho[i] * dot;
      for (int j = 0; j < P; ++j) q[j] += S.s[i * P + j] * (a[i] - b);
    }
    S.gd = 0;
    for (int j = 0; j < P; ++j) {
      S.d[j] = -q[j];
      S.gd += S.d[j] * gu[j];
    }
    if (!(S.gd < 0)) {  // not a descent direction: fall back to steepest descent
      S.gd = 0;
      for (int j = 0; j < P; ++j) {
        S.d[j] = -gu[j] * gamma;
        S.gd += S.d[j] * gu[j];
      }
    }
    if (S.gd == 0) return false;
    // A step is capped in unconstrained coordinates: a long step into a saturated transform
    // (softplus or logistic far from the data) would decrease the loss and then leave the lane on
    // a plateau whose gradient vanishes.
    double dmax = 0;
    for (int j = 0; j < P; ++j) dmax = std::max(dmax, std::fabs(S.d[j]));
    S.alpha = dmax > kMaxStep ? kMaxStep / dmax : 1.0;
    S.have_point = true;
    for (int j = 0; j < P; ++j) ur[j] = S.u0[j] + S.alpha * S.d[j];
    return true;
  }

  // every point L-BFGS moves to is a trial point that the next step evaluates or abandons
  bool score_last_update() const override { return false; }

 private:
  static constexpr double kMaxStep = 2.0;  // largest move of one coordinate per iteration
  struct Lane {
    std::vector<double> s, y, rho;  // ring buffers [M, P], [M]
    int count = 0, head = 0;
    std::vector<double> g, d, u0;  // gradient (unconstrained) at u0, direction
    double f = NAN, alpha = 1, gd = 0;
    bool have_point = false;
  };
  double lr_;
  int M_, P_;
  std::vector<Lane> lanes_;
};

}  // namespace

std::unique_ptr<StepRule> make_step_rule(const CalibSpec& spec, int R, int P) {
  switch (spec.optimizer) {
    case Optimizer::GD: return std::make_unique<GradientDescent>(spec.lr, P);
    case Optimizer::Adam: return std::make_unique<Adam>(spec.lr, R, P);
    case Optimizer::LBFGS: return std::make_unique<LBFGS>(spec.lr, spec.lbfgs_memory, R, P);
  }
  return nullptr;  // unreachable: the enum is closed
}

}  // namespace ndvm
