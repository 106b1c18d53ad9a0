// Fused calibration loops and the persistent thread pool.
//
// Restarts are lanes: every step evaluates value and gradient of all running lanes in one walk
// (run_batch), then updates each lane's unconstrained coordinates. A lane whose loss or gradient
// becomes non-finite is frozen (its best iterate kept); the others go on.
#include "optim.h"

#include <pthread.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "error.h"
#include "vm.h"

namespace ndvm {

namespace {

inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

// natural <-> unconstrained coordinates of one parameter
double to_natural(const ParamDecl& d, double u) {
  switch (d.constraint) {
    case C_POSITIVE: return u > 30 ? u : std::log1p(std::exp(u));  // softplus
    case C_BETWEEN: return d.lo + (d.hi - d.lo) * sigmoid(u);
    default: return u;
  }
}
double to_unconstrained(const ParamDecl& d, double x) {
  switch (d.constraint) {
    case C_POSITIVE: {
      double v = x > 1e-300 ? x : 1e-300;
      return v > 30 ? v : std::log(std::expm1(v));  // inverse softplus
    }
    case C_BETWEEN: {
      double t = (x - d.lo) / (d.hi - d.lo);
      t = std::min(std::max(t, 1e-12), 1 - 1e-12);
      return std::log(t / (1 - t));
    }
    default: return x;
  }
}
double dnatural_du(const ParamDecl& d, double u) {
  switch (d.constraint) {
    case C_POSITIVE: return sigmoid(u);
    case C_BETWEEN: { double s = sigmoid(u); return (d.hi - d.lo) * s * (1 - s); }
    default: return 1.0;
  }
}

constexpr double kMaxStep = 2.0;  // L-BFGS: largest move of one coordinate per iteration

// Copies P doubles; P may be 0 (a program without parameters), where memcpy's pointers may be null.
inline void copy_row(double* dst, const double* src, int P) {
  if (P > 0) std::memcpy(dst, src, sizeof(double) * P);
}

bool all_finite(const double* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// Evaluates the running subset of lanes: compact theta rows, with the per-lane inputs and
// targets reached through a lane map (no copies when lanes stop).
struct LaneEvaluator {
  const Program& p;
  VM& vm;
  const Inputs& in;
  const CalibSpec& spec;
  const Limits& lim;
  int P;
  std::vector<int> lanes;  // original lane ids of the compact batch

  LaneEvaluator(const Program& p_, VM& vm_, const Inputs& in_, const CalibSpec& s, const Limits& l)
      : p(p_), vm(vm_), in(in_), spec(s), lim(l), P(static_cast<int>(p_.params.size())) {}

  void set_lanes(const std::vector<int>& ls) { lanes = ls; }

  // theta_all [R, P] natural units -> result for the current lanes
  BatchResult eval(const std::vector<double>& theta_all, bool grad) {
    std::vector<double> th(lanes.size() * P);
    for (size_t k = 0; k < lanes.size(); ++k)
      copy_row(th.data() + k * P, theta_all.data() + static_cast<size_t>(lanes[k]) * P, P);
    return run_batch(p, vm, th.data(), static_cast<int>(lanes.size()), in, grad, &spec.loss, lim, nullptr, &lanes);
  }
};

}  // namespace

CalibResult calibrate(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in,
                      const CalibSpec& spec, const Limits& lim) {
  const int P = static_cast<int>(p.params.size());
  for (size_t i = 0; i < in.per_lane.size(); ++i)
    if (!in.per_lane[i].empty() && static_cast<int>(in.per_lane[i].size()) != R)
      eval_error("lane input '" + p.inputs[i] + "' has " + std::to_string(in.per_lane[i].size()) +
                 " lanes, expected one per restart (" + std::to_string(R) + ")");
  if (!spec.loss.lane_target.empty() && static_cast<int>(spec.loss.lane_target.size()) != R)
    eval_error("lane_target has " + std::to_string(spec.loss.lane_target.size()) + " rows, expected " +
               std::to_string(R));
  CalibResult res;
  res.R = R;
  res.P = P;
  res.best_theta.assign(theta0, theta0 + static_cast<size_t>(R) * P);
  res.best_loss.assign(R, std::numeric_limits<double>::infinity());
  res.status.assign(R, LANE_RUNNING);
  res.history.assign(static_cast<size_t>(spec.steps) * R, NAN);

  std::vector<double> u(static_cast<size_t>(R) * P), theta(theta0, theta0 + static_cast<size_t>(R) * P);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < P; ++j) u[r * P + j] = to_unconstrained(p.params[j], theta0[r * P + j]);
  auto refresh_theta = [&](int r) {
    for (int j = 0; j < P; ++j) theta[r * P + j] = to_natural(p.params[j], u[r * P + j]);
  };
  for (int r = 0; r < R; ++r) refresh_theta(r);

  LaneEvaluator ev(p, vm, in, spec, lim);
  std::vector<int> running(R);
  for (int r = 0; r < R; ++r) running[r] = r;
  ev.set_lanes(running);

  // optimizer state
  std::vector<double> m1(u.size(), 0.0), m2(u.size(), 0.0);
  std::vector<double> prev_loss(R, NAN);
  std::vector<int> calm(R, 0);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  // L-BFGS state per lane
  const int M = spec.lbfgs_memory;
  struct LState {
    std::vector<double> s, y, rho;  // ring buffers [M, P], [M]
    int count = 0, head = 0;
    std::vector<double> g, d, u0;   // gradient (unconstrained) at u0, direction
    double f = NAN, alpha = 1, gd = 0;
    bool have_point = false;
  };
  std::vector<LState> ls(spec.optimizer == Optimizer::LBFGS ? R : 0);
  for (auto& s : ls) {
    s.s.assign(M * P, 0); s.y.assign(M * P, 0); s.rho.assign(M, 0);
    s.g.assign(P, 0); s.d.assign(P, 0); s.u0.assign(P, 0);
  }

  std::vector<double> gu(P);
  int step = 0;
  for (; step < spec.steps && !running.empty(); ++step) {
    BatchResult br = ev.eval(theta, true);
    ++res.evaluations;
    bool changed = false;
    for (size_t k = 0; k < running.size(); ++k) {
      int r = running[k];
      double f = br.losses[k];
      const double* g = br.grads.data() + k * P;
      if (!std::isfinite(f) || !all_finite(g, P)) {
        if (spec.optimizer == Optimizer::LBFGS && ls[r].have_point) {
          // a trial point of the line search left the domain: shrink the step instead
          LState& S = ls[r];
          S.alpha *= 0.25;
          if (S.alpha < 1e-12) { res.status[r] = LANE_CONVERGED; changed = true; continue; }
          for (int j = 0; j < P; ++j) u[r * P + j] = S.u0[j] + S.alpha * S.d[j];
          refresh_theta(r);
          continue;
        }
        res.status[r] = LANE_NONFINITE;
        changed = true;
        continue;
      }
      res.history[static_cast<size_t>(step) * R + r] = f;
      if (f < res.best_loss[r]) {
        res.best_loss[r] = f;
        copy_row(res.best_theta.data() + static_cast<size_t>(r) * P, theta.data() + static_cast<size_t>(r) * P, P);
      }
      for (int j = 0; j < P; ++j) gu[j] = g[j] * dnatural_du(p.params[j], u[r * P + j]);
      if (spec.tol > 0 && std::isfinite(prev_loss[r])) {
        if (std::fabs(prev_loss[r] - f) <= spec.tol * (1 + std::fabs(f))) {
          if (++calm[r] >= spec.patience) { res.status[r] = LANE_CONVERGED; changed = true; continue; }
        } else {
          calm[r] = 0;
        }
      }
      prev_loss[r] = f;
      double* ur = u.data() + static_cast<size_t>(r) * P;
      switch (spec.optimizer) {
        case Optimizer::GD:
          for (int j = 0; j < P; ++j) ur[j] -= spec.lr * gu[j];
          break;
        case Optimizer::Adam: {
          double t = step + 1;
          double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
          for (int j = 0; j < P; ++j) {
            size_t i = static_cast<size_t>(r) * P + j;
            m1[i] = b1 * m1[i] + (1 - b1) * gu[j];
            m2[i] = b2 * m2[i] + (1 - b2) * gu[j] * gu[j];
            ur[j] -= spec.lr * (m1[i] / c1) / (std::sqrt(m2[i] / c2) + eps);
          }
          break;
        }
        case Optimizer::LBFGS: {
          LState& S = ls[r];
          bool accept = !S.have_point;  // the first evaluation defines the starting point
          if (S.have_point) {
            // Armijo condition on the trial point u0 + alpha d
            if (f <= S.f + 1e-4 * S.alpha * S.gd) {
              accept = true;
              // curvature pair
              double sy = 0;
              std::vector<double> sv(P), yv(P);
              for (int j = 0; j < P; ++j) { sv[j] = ur[j] - S.u0[j]; yv[j] = gu[j] - S.g[j]; sy += sv[j] * yv[j]; }
              if (sy > 1e-12) {
                copy_row(S.s.data() + S.head * P, sv.data(), P);
                copy_row(S.y.data() + S.head * P, yv.data(), P);
                S.rho[S.head] = 1.0 / sy;
                S.head = (S.head + 1) % M;
                S.count = std::min(S.count + 1, M);
              }
            } else {
              S.alpha *= 0.5;
              if (S.alpha < 1e-12) { res.status[r] = LANE_CONVERGED; changed = true; break; }
              for (int j = 0; j < P; ++j) ur[j] = S.u0[j] + S.alpha * S.d[j];
            }
          }
          if (accept) {
            S.f = f;
            copy_row(S.u0.data(), ur, P);
            copy_row(S.g.data(), gu.data(), P);
            // two-loop recursion: d = -H g
            std::vector<double> q(gu.begin(), gu.end()), a(M);
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
              gamma = gn > 0 ? spec.lr / std::sqrt(gn) : 1;  // first step: length lr
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
            for (int j = 0; j < P; ++j) { S.d[j] = -q[j]; S.gd += S.d[j] * gu[j]; }
            if (!(S.gd < 0)) {  // not a descent direction: fall back to steepest descent
              S.gd = 0;
              for (int j = 0; j < P; ++j) { S.d[j] = -gu[j] * gamma; S.gd += S.d[j] * gu[j]; }
            }
            if (S.gd == 0) { res.status[r] = LANE_CONVERGED; changed = true; break; }
            // A step is capped in unconstrained coordinates: a long step into a saturated
            // transform (softplus or logistic far from the data) would decrease the loss and then
            // leave the lane on a plateau whose gradient vanishes.
            double dmax = 0;
            for (int j = 0; j < P; ++j) dmax = std::max(dmax, std::fabs(S.d[j]));
            S.alpha = dmax > kMaxStep ? kMaxStep / dmax : 1.0;
            S.have_point = true;
            for (int j = 0; j < P; ++j) ur[j] = S.u0[j] + S.alpha * S.d[j];
          }
          break;
        }
      }
      refresh_theta(r);
    }
    if (changed) {
      std::vector<int> still;
      for (int r : running)
        if (res.status[r] == LANE_RUNNING) still.push_back(r);
      running.swap(still);
      if (!running.empty()) ev.set_lanes(running);
    }
  }
  res.steps_done = step;
  // the last update has not been evaluated yet: score it (best-iterate tracking)
  if (!running.empty() && spec.optimizer != Optimizer::LBFGS) {
    BatchResult br = ev.eval(theta, false);
    ++res.evaluations;
    for (size_t k = 0; k < running.size(); ++k) {
      int r = running[k];
      double f = br.losses[k];
      if (std::isfinite(f) && f < res.best_loss[r]) {
        res.best_loss[r] = f;
        copy_row(res.best_theta.data() + static_cast<size_t>(r) * P, theta.data() + static_cast<size_t>(r) * P, P);
      }
    }
  }
  return res;
}

// ---- the thread pool -------------------------------------------------------------------------

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(CPU_COUNT(&set));
  return n ? static_cast<int>(n) : 1;
}

namespace {

constexpr size_t kWorkerStack = 256u << 20;  // reserved, not committed: deep recursion is safe

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destruction
    return *pool;
  }

  void run(int n, int threads, const std::function<void(int, VM&)>& fn) {
    std::lock_guard<std::mutex> one_job_at_a_time(job_mu_);
    ensure(threads);
    std::unique_lock<std::mutex> lk(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    wanted_ = threads;
    pending_ = threads;
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(lk, [&] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  std::mutex job_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<pthread_t> workers_;
  const std::function<void(int, VM&)>* fn_ = nullptr;
  int n_ = 0, wanted_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  std::atomic<int> next_{0};

  struct Arg { Pool* pool; int index; };

  void ensure(int threads) {
    while (static_cast<int>(workers_.size()) < threads) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kWorkerStack);
      pthread_t t;
      auto* arg = new Arg{this, static_cast<int>(workers_.size())};
      if (pthread_create(&t, &attr, &Pool::main, arg) != 0) {
        pthread_attr_destroy(&attr);
        delete arg;
        throw std::runtime_error("cannot start a calibration thread");
      }
      pthread_attr_destroy(&attr);
      pthread_detach(t);
      workers_.push_back(t);
    }
  }

  static void* main(void* p) {
    Arg a = *static_cast<Arg*>(p);
    delete static_cast<Arg*>(p);
    set_thread_stack_budget(kWorkerStack - (8u << 20));
    a.pool->loop(a.index);
    return nullptr;
  }

  void loop(int index) {
    VM vm;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int, VM&)>* fn;
      int n;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= wanted_) continue;
        fn = fn_;
        n = n_;
      }
      for (int k; (k = next_.fetch_add(1)) < n;) (*fn)(k, vm);
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
};

}  // namespace

void parallel_for(int n, int threads, const std::function<void(int, VM&)>& fn) {
  if (threads <= 0) threads = hardware_threads();
  if (threads > n) threads = n;
  if (n <= 0) return;
  Pool::get().run(n, threads, fn);
}

CalibResult calibrate_threaded(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in,
                               const CalibSpec& spec, const Limits& lim, int threads) {
  if (threads <= 0) threads = hardware_threads();
  int chunks = std::min(threads, R / 8);  // below 8 lanes a chunk is not worth a thread
  if (chunks <= 1) return calibrate(p, vm, theta0, R, in, spec, lim);
  const int P = static_cast<int>(p.params.size());
  std::vector<int> start(chunks + 1);
  for (int c = 0; c <= chunks; ++c) start[c] = static_cast<int>(static_cast<long long>(R) * c / chunks);
  std::vector<CalibResult> parts(chunks);
  std::vector<std::string> errors(chunks);
  parallel_for(chunks, chunks, [&](int c, VM& wvm) {
    int lo = start[c], hi = start[c + 1];
    Inputs sub;
    sub.shared = in.shared;
    sub.per_lane.resize(in.per_lane.size());
    for (size_t i = 0; i < in.per_lane.size(); ++i)
      if (!in.per_lane[i].empty()) sub.per_lane[i].assign(in.per_lane[i].begin() + lo, in.per_lane[i].begin() + hi);
    CalibSpec s = spec;
    if (!spec.loss.lane_target.empty())
      s.loss.lane_target.assign(spec.loss.lane_target.begin() + lo, spec.loss.lane_target.begin() + hi);
    try {
      parts[c] = calibrate(p, wvm, theta0 + static_cast<size_t>(lo) * P, hi - lo, sub, s, lim);
    } catch (const std::exception& e) {
      errors[c] = e.what();
      parts[c].error_kind = -2;
    }
  });
  for (int c = 0; c < chunks; ++c)
    if (parts[c].error_kind == -2) {
      // surface the failure as the serial run would
      return calibrate(p, vm, theta0, R, in, spec, lim);
    }
  CalibResult res;
  res.R = R;
  res.P = P;
  res.history.assign(static_cast<size_t>(spec.steps) * R, NAN);
  for (int c = 0; c < chunks; ++c) {
    const CalibResult& q = parts[c];
    res.best_theta.insert(res.best_theta.end(), q.best_theta.begin(), q.best_theta.end());
    res.best_loss.insert(res.best_loss.end(), q.best_loss.begin(), q.best_loss.end());
    res.status.insert(res.status.end(), q.status.begin(), q.status.end());
    for (int st = 0; st < spec.steps; ++st)
      for (int r = 0; r < q.R; ++r) res.history[static_cast<size_t>(st) * R + start[c] + r] = q.history[static_cast<size_t>(st) * q.R + r];
    res.steps_done = std::max(res.steps_done, q.steps_done);
    res.evaluations += q.evaluations;
  }
  return res;
}

std::vector<CalibResult> calibrate_many(const std::vector<CalibJob>& jobs, const Limits& lim, int threads) {
  std::vector<CalibResult> out(jobs.size());
  parallel_for(static_cast<int>(jobs.size()), threads, [&](int i, VM& vm) {
    const CalibJob& j = jobs[i];
    try {
      out[i] = calibrate(*j.program, vm, j.theta0.data(), j.R, *j.inputs, j.spec, lim);
    } catch (const Error& e) {
      out[i].error = e.what();
      out[i].error_kind = static_cast<int>(e.kind);
      out[i].error_line = e.line;
      out[i].error_col = e.col;
    } catch (const std::exception& e) {
      out[i].error = std::string("internal error: ") + e.what();
      out[i].error_kind = static_cast<int>(ErrorKind::Eval);
    }
  });
  return out;
}

}  // namespace ndvm
