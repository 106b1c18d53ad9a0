// Fused calibration loops (the optimizers themselves are in optimizers.cc, the pool in pool.cc).
//
// Restarts are lanes: every step evaluates value and gradient of all running lanes in one walk
// (run_batch), then updates each lane's unconstrained coordinates. A lane that stops (converged by
// its optimizer's rules or the plateau rule, or non-finite) leaves the running set, so later walks
// no longer evaluate it; its best iterate is kept and the others go on.
#include "optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "error.h"
#include "optimizers.h"
#include "param_transform.h"
#include "pool.h"
#include "vm.h"

namespace ndvm {

namespace {

bool all_finite(const double* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// The parameters calibrate() solves rather than searches: the program's linear ones, for a
// sum-of-squares loss (a declared sigma of the likelihood is not among them).
std::vector<int> solved_params(const Program& p, const CalibSpec& spec) {
  if (!spec.solve_linear || spec.loss.kind == LossKind::Value || !p.basis()) return {};
  std::vector<int> out;
  for (int j : p.linear_params)
    if (!(spec.loss.kind == LossKind::GaussianNLL && j == spec.loss.sigma_param)) out.push_back(j);
  return out;
}

// Evaluates the running subset of lanes: compact theta rows, with the per-lane inputs and
// targets reached through a lane map (no copies when lanes stop). With solved parameters it walks
// the program's basis program (LossSpec::linear): the projected loss, the gradient of the searched
// parameters (0 for the solved ones), and the solved values, which eval() writes into theta_all.
struct LaneEvaluator {
  const Program& p;
  VM& vm;
  const Inputs& in;
  const Limits& lim;
  int P;
  LossSpec loss;
  std::vector<int> lanes;  // original lane ids evaluated: the running ones, then copies of the last
  size_t width = 0;        // lanes evaluated per walk
  std::vector<double> th;  // their parameters, reused across the evaluations of the fit

  LaneEvaluator(const Program& p_, VM& vm_, const Inputs& in_, const CalibSpec& s, const Limits& l)
      : p(p_), vm(vm_), in(in_), lim(l), P(static_cast<int>(p_.params.size())), loss(s.loss) {
    loss.linear = solved_params(p_, s);
  }

  // The batch keeps its width while more than half of it still runs, the stopped lanes' places
  // taken by copies of a running lane (their results are not read): a batch of another width is
  // walked and recorded afresh (a replay needs the recorded lane count), which costs several
  // replays. Below half, it shrinks to the next power of two (the lane counts the tiled replay's
  // lane loops are compiled for). A lane's results do not depend on the lanes beside it.
  void set_lanes(const std::vector<int>& running) {
    if (width == 0) width = running.size();
    else if (running.size() <= width / 2)
      for (width = 1; width < running.size();) width *= 2;
    lanes.assign(running.begin(), running.end());
    lanes.resize(width, running.back());
  }

  // theta_all [R, P] natural units -> result for the current lanes (the running ones first)
  BatchResult eval(std::vector<double>& theta_all, bool grad) {
    th.resize(lanes.size() * P);
    for (size_t k = 0; k < lanes.size(); ++k)
      copy_row(th.data() + k * P, theta_all.data() + static_cast<size_t>(lanes[k]) * P, P);
    // the optimizers read losses and gradients only (want_values false)
    if (loss.linear.empty())
      return run_batch(p, vm, th.data(), static_cast<int>(lanes.size()), in, grad, &loss, lim, nullptr, &lanes, false);
    BatchResult br = run_batch(*p.basis(), vm, th.data(), static_cast<int>(lanes.size()), in, grad, &loss, lim, nullptr,
                               &lanes, false);
    const size_t K = loss.linear.size();
    for (size_t k = 0; k < lanes.size(); ++k) {
      double* theta = theta_all.data() + static_cast<size_t>(lanes[k]) * P;
      for (size_t j = 0; j < K; ++j) theta[loss.linear[j]] = br.linear_solution[k * K + j];
    }
    return br;  // the solved parameters' gradients are 0: the basis program does not read them
  }
};

}  // namespace

CalibResult calibrate(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in, const CalibSpec& spec,
                      const Limits& lim) {
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
  res.reason.assign(R, STOP_BUDGET);
  res.iterations.assign(R, 0);
  res.lane_evals.assign(R, 0);
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

  // A projected loss's gradient carries the square of the solved coefficients' scale (a target in
  // other units moves it by that factor), so its gradient rule is relative to the loss,
  // max |g| <= gtol * |f|, checked here at every evaluation; the rule's own absolute one is off.
  const bool projected = !ev.loss.linear.empty();
  CalibSpec rule_spec = spec;
  if (projected) rule_spec.gtol = 0;
  std::unique_ptr<StepRule> rule = make_step_rule(rule_spec, R, P);
  std::vector<double> prev_loss(R, NAN);
  std::vector<int> calm(R, 0);
  std::vector<double> gu(P);
  auto stop = [&](int r, int reason) {
    res.reason[r] = reason;
    res.status[r] = reason == STOP_NONFINITE ? LANE_NONFINITE : LANE_CONVERGED;
  };
  int step = 0;
  auto cancelled = [&] { return spec.cancel && spec.cancel->load(std::memory_order_relaxed); };
  for (; step < spec.steps && !running.empty() && !cancelled(); ++step) {
    BatchResult br = ev.eval(theta, true);
    ++res.evaluations;
    bool changed = false;
    for (size_t k = 0; k < running.size(); ++k) {
      int r = running[k];
      ++res.lane_evals[r];
      double f = br.losses[k];
      const double* g = br.grads.data() + k * P;
      double* ur = u.data() + static_cast<size_t>(r) * P;
      if (!std::isfinite(f) || !all_finite(g, P)) {
        int next = rule->on_nonfinite(r, ur);
        if (next == kContinue) {  // the rule tries another point
          refresh_theta(r);
          continue;
        }
        stop(r, next);
        changed = true;
        continue;
      }
      res.history[static_cast<size_t>(step) * R + r] = f;
      if (f < res.best_loss[r]) {
        res.best_loss[r] = f;
        copy_row(res.best_theta.data() + static_cast<size_t>(r) * P, theta.data() + static_cast<size_t>(r) * P, P);
      }
      for (int j = 0; j < P; ++j) gu[j] = g[j] * dnatural_du(p.params[j], ur[j]);
      if (projected && spec.gtol > 0) {
        double largest = 0;
        for (int j = 0; j < P; ++j) largest = std::max(largest, std::fabs(gu[j]));
        if (largest <= spec.gtol * std::fabs(f)) {
          stop(r, STOP_GRADIENT);
          changed = true;
          continue;
        }
      }
      if (spec.tol > 0 && std::isfinite(prev_loss[r])) {
        if (std::fabs(prev_loss[r] - f) <= spec.tol * (1 + std::fabs(f))) {
          if (++calm[r] >= spec.patience) {
            stop(r, STOP_PLATEAU);
            changed = true;
            continue;
          }
        } else {
          calm[r] = 0;
        }
      }
      prev_loss[r] = f;
      int next = rule->update(r, step, f, gu.data(), ur);
      if (next != kContinue) {
        stop(r, next);
        changed = true;
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
  if (!running.empty() && rule->score_last_update() && !cancelled()) {
    BatchResult br = ev.eval(theta, false);
    ++res.evaluations;
    for (size_t k = 0; k < running.size(); ++k) {
      int r = running[k];
      ++res.lane_evals[r];
      double f = br.losses[k];
      if (std::isfinite(f) && f < res.best_loss[r]) {
        res.best_loss[r] = f;
        copy_row(res.best_theta.data() + static_cast<size_t>(r) * P, theta.data() + static_cast<size_t>(r) * P, P);
      }
    }
  }
  for (int r = 0; r < R; ++r) res.iterations[r] = rule->iterations(r);
  return res;
}

CalibResult calibrate_threaded(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in,
                               const CalibSpec& spec, const Limits& lim, int threads, const PoolPoll& poll) {
  if (threads <= 0) threads = hardware_threads();
  int chunks = std::min(threads, R / 8);  // below 8 lanes a chunk is not worth a thread
  if (chunks <= 1) {
    if (!poll) return calibrate(p, vm, theta0, R, in, spec, lim);
    // One chunk, from Python's main thread: on a pool worker, so that the waiting thread can take
    // Ctrl-C (poll) while the calibration runs; its failure is rethrown here, as the inline call's.
    // The worker uses the caller's VM (idle while it waits): its tape cache and statistics
    // (replay counts, last usage) stay where the inline call would have left them.
    CalibResult one;
    std::exception_ptr failure;
    parallel_for(
        1, 1,
        [&](int, VM&) {
          try {
            one = calibrate(p, vm, theta0, R, in, spec, lim);
          } catch (...) { failure = std::current_exception(); }
        },
        poll);
    if (spec.cancel && spec.cancel->load()) return CalibResult{};  // incomplete: the caller discards it
    if (failure) std::rethrow_exception(failure);
    return one;
  }
  const int P = static_cast<int>(p.params.size());
  std::vector<int> start(chunks + 1);
  for (int c = 0; c <= chunks; ++c) start[c] = static_cast<int>(static_cast<long long>(R) * c / chunks);
  std::vector<CalibResult> parts(chunks);
  std::vector<std::string> errors(chunks);
  parallel_for(
      chunks, chunks,
      [&](int c, VM& wvm) {
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
      },
      poll);
  if (spec.cancel && spec.cancel->load()) return CalibResult{};  // incomplete: the caller discards it
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
    res.reason.insert(res.reason.end(), q.reason.begin(), q.reason.end());
    res.iterations.insert(res.iterations.end(), q.iterations.begin(), q.iterations.end());
    res.lane_evals.insert(res.lane_evals.end(), q.lane_evals.begin(), q.lane_evals.end());
    for (int st = 0; st < spec.steps; ++st)
      for (int r = 0; r < q.R; ++r)
        res.history[static_cast<size_t>(st) * R + start[c] + r] = q.history[static_cast<size_t>(st) * q.R + r];
    res.steps_done = std::max(res.steps_done, q.steps_done);
    res.evaluations += q.evaluations;
  }
  return res;
}

namespace {

// The work of one job, for ordering only: lanes x input elements (a job of a long series, such
// as a long battery cell, costs more per step than a short one).
double job_cost(const CalibJob& j) {
  double elements = 1;
  for (const Array& a : j.inputs->shared) elements += static_cast<double>(a.numel());
  for (const std::vector<Array>& lanes : j.inputs->per_lane)
    if (!lanes.empty()) elements += static_cast<double>(lanes[0].numel());
  return static_cast<double>(j.R) * elements;
}

}  // namespace

std::vector<CalibResult> calibrate_many(const std::vector<CalibJob>& jobs, const Limits& lim, int threads,
                                        const PoolPoll& poll) {
  // The pool hands out items in index order: the costliest jobs go first, so that the batch does
  // not end with one thread finishing a long job while the others wait (results stay in job order).
  std::vector<int> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) order[i] = static_cast<int>(i);
  std::vector<double> cost(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) cost[i] = job_cost(jobs[i]);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  std::vector<CalibResult> out(jobs.size());
  parallel_for(
      static_cast<int>(jobs.size()), threads,
      [&](int k, VM& vm) {
        const int i = order[k];
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
      },
      poll);
  return out;
}

}  // namespace ndvm
