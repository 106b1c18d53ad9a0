// Grouped fits with shared parameters (shared.h). The loop is calibrate()'s (optim.cc): lanes are
// restarts, each step evaluates value and gradient of the running lanes, a StepRule moves each
// lane's unconstrained coordinates, a lane stops on its own. What differs is the evaluation: one
// run_batch per group, each on its own VM so that every group keeps its recorded tape for replay
// (a replay is only valid for the inputs it was recorded on), summed into the joint loss.
#include "shared.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "error.h"
#include "optimizers.h"
#include "param_transform.h"
#include "pool.h"
#include "vm.h"

namespace ndvm {

namespace {

// This thread's VMs for the groups of a joint fit: VM g keeps group g's tape between steps. They
// are reused by the next joint fit on this thread (a replay checks program and inputs itself).
std::vector<std::unique_ptr<VM>>& group_vms(size_t G) {
  thread_local std::vector<std::unique_ptr<VM>> vms;
  while (vms.size() < G) vms.push_back(make_vm());
  return vms;
}

bool finite_row(const double* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace

void split_params(const Program& p, std::vector<int>& shared, std::vector<int>& local) {
  shared.clear();
  local.clear();
  for (size_t j = 0; j < p.params.size(); ++j) (p.params[j].shared ? shared : local).push_back(static_cast<int>(j));
}

SharedResult calibrate_shared(const SharedJob& job, const Limits& lim) {
  const Program& p = *job.program;
  const int P = static_cast<int>(p.params.size());
  const int R = job.R;
  const int G = static_cast<int>(job.inputs.size());
  if (static_cast<int>(job.specs.size()) != G) eval_error("calibrate_shared: one spec per group expected");
  if (G == 0) eval_error("calibrate_shared: no groups");
  std::vector<int> sh, loc;
  split_params(p, sh, loc);
  const int S = job.fit_shared ? static_cast<int>(sh.size()) : 0;  // shared coordinates in the joint vector
  const int Q = static_cast<int>(loc.size());
  const int D = S + G * Q;
  const CalibSpec& spec = job.specs[0];

  SharedResult out;
  out.G = G;
  CalibResult& res = out.joint;
  res.R = R;
  res.P = D;
  res.best_loss.assign(R, std::numeric_limits<double>::infinity());
  res.status.assign(R, LANE_RUNNING);
  res.reason.assign(R, STOP_BUDGET);
  res.iterations.assign(R, 0);
  res.lane_evals.assign(R, 0);
  res.history.assign(static_cast<size_t>(spec.steps) * R, NAN);
  out.group_theta.assign(static_cast<size_t>(G) * R * P, NAN);
  out.group_loss.assign(static_cast<size_t>(R) * G, NAN);

  // The parameter declaration of joint coordinate k.
  std::vector<const ParamDecl*> decl(D);
  for (int k = 0; k < S; ++k) decl[k] = &p.params[sh[k]];
  for (int g = 0; g < G; ++g)
    for (int q = 0; q < Q; ++q) decl[S + g * Q + q] = &p.params[loc[q]];

  // u [R, D] unconstrained; every group's block starts from the lane's row of theta0.
  std::vector<double> u(static_cast<size_t>(R) * D);
  for (int r = 0; r < R; ++r) {
    const double* t0 = job.theta0.data() + static_cast<size_t>(r) * P;
    for (int k = 0; k < S; ++k) u[r * D + k] = to_unconstrained(*decl[k], t0[sh[k]]);
    for (int g = 0; g < G; ++g)
      for (int q = 0; q < Q; ++q) u[r * D + S + g * Q + q] = to_unconstrained(p.params[loc[q]], t0[loc[q]]);
  }
  // Group g's parameter row of lane r (natural units) from u: shared from the joint vector (or theta0).
  auto group_row = [&](int r, int g, double* row) {
    const double* ur = u.data() + static_cast<size_t>(r) * D;
    const double* t0 = job.theta0.data() + static_cast<size_t>(r) * P;
    for (size_t k = 0; k < sh.size(); ++k) row[sh[k]] = job.fit_shared ? to_natural(*decl[k], ur[k]) : t0[sh[k]];
    for (int q = 0; q < Q; ++q) row[loc[q]] = to_natural(p.params[loc[q]], ur[S + g * Q + q]);
  };

  std::vector<std::unique_ptr<VM>>& vms = group_vms(static_cast<size_t>(G));
  std::vector<int> running(R);
  for (int r = 0; r < R; ++r) running[r] = r;
  // The batch keeps its width until half its lanes stopped (padded with copies of a running lane,
  // whose results are not read), as calibrate()'s LaneEvaluator: a new width means a new recording.
  size_t width = 0;
  std::vector<int> lanes;
  auto set_lanes = [&]() {
    if (width == 0) width = running.size();
    else if (running.size() <= width / 2)
      for (width = 1; width < running.size();) width *= 2;
    lanes.assign(running.begin(), running.end());
    lanes.resize(width, running.back());
  };
  set_lanes();

  std::vector<double> th, f(R), gl(static_cast<size_t>(R) * G), gu(static_cast<size_t>(R) * D);
  // Evaluates every group on the current lanes: f[r] the summed loss, gl[r, g] each group's,
  // gu[r, :] the joint gradient in unconstrained coordinates (when grad).
  auto evaluate = [&](bool grad) {
    const size_t B = lanes.size();
    th.resize(B * P);
    for (size_t k = 0; k < running.size(); ++k) {
      const int r = running[k];
      f[r] = 0;
      if (grad) std::fill(gu.begin() + static_cast<size_t>(r) * D, gu.begin() + static_cast<size_t>(r + 1) * D, 0.0);
    }
    for (int g = 0; g < G; ++g) {
      for (size_t k = 0; k < B; ++k) group_row(lanes[k], g, th.data() + k * P);
      BatchResult br = run_batch(p, *vms[g], th.data(), static_cast<int>(B), *job.inputs[g], grad, &job.specs[g].loss,
                                 lim, nullptr, nullptr, false);
      for (size_t k = 0; k < running.size(); ++k) {
        const int r = running[k];
        const double fg = br.losses[k];
        gl[static_cast<size_t>(r) * G + g] = fg;
        f[r] += fg;
        if (!grad) continue;
        const double* gr = br.grads.data() + k * P;
        const double* ur = u.data() + static_cast<size_t>(r) * D;
        double* gur = gu.data() + static_cast<size_t>(r) * D;
        for (int k2 = 0; k2 < S; ++k2) gur[k2] += gr[sh[k2]] * dnatural_du(*decl[k2], ur[k2]);
        for (int q = 0; q < Q; ++q) {
          const int c = S + g * Q + q;
          gur[c] = gr[loc[q]] * dnatural_du(*decl[c], ur[c]);
        }
      }
    }
  };
  auto keep_best = [&](int r) {
    res.best_loss[r] = f[r];
    for (int g = 0; g < G; ++g) {
      group_row(r, g, out.group_theta.data() + (static_cast<size_t>(g) * R + r) * P);
      out.group_loss[static_cast<size_t>(r) * G + g] = gl[static_cast<size_t>(r) * G + g];
    }
  };
  // Lanes that never reach a finite loss report their starting point.
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) group_row(r, g, out.group_theta.data() + (static_cast<size_t>(g) * R + r) * P);

  std::unique_ptr<StepRule> rule = make_step_rule(spec, R, D);
  std::vector<double> prev_loss(R, NAN);
  std::vector<int> calm(R, 0);
  auto stop = [&](int r, int reason) {
    res.reason[r] = reason;
    res.status[r] = reason == STOP_NONFINITE ? LANE_NONFINITE : LANE_CONVERGED;
  };
  int step = 0;
  auto cancelled = [&] { return spec.cancel && spec.cancel->load(std::memory_order_relaxed); };
  for (; step < spec.steps && !running.empty() && !cancelled(); ++step) {
    evaluate(true);
    ++res.evaluations;
    bool changed = false;
    for (int r : running) {
      ++res.lane_evals[r];
      double* ur = u.data() + static_cast<size_t>(r) * D;
      const double* g = gu.data() + static_cast<size_t>(r) * D;
      if (!std::isfinite(f[r]) || !finite_row(g, D)) {
        const int next = rule->on_nonfinite(r, ur);
        if (next != kContinue) {
          stop(r, next);
          changed = true;
        }
        continue;
      }
      res.history[static_cast<size_t>(step) * R + r] = f[r];
      if (f[r] < res.best_loss[r]) keep_best(r);
      if (spec.tol > 0 && std::isfinite(prev_loss[r])) {
        if (std::fabs(prev_loss[r] - f[r]) <= spec.tol * (1 + std::fabs(f[r]))) {
          if (++calm[r] >= spec.patience) {
            stop(r, STOP_PLATEAU);
            changed = true;
            continue;
          }
        } else {
          calm[r] = 0;
        }
      }
      prev_loss[r] = f[r];
      const int next = rule->update(r, step, f[r], g, ur);
      if (next != kContinue) {
        stop(r, next);
        changed = true;
      }
    }
    if (changed) {
      std::vector<int> still;
      for (int r : running)
        if (res.status[r] == LANE_RUNNING) still.push_back(r);
      running.swap(still);
      if (!running.empty()) set_lanes();
    }
  }
  res.steps_done = step;
  if (!running.empty() && rule->score_last_update()) {  // the last update, not evaluated yet
    evaluate(false);
    ++res.evaluations;
    for (int r : running) {
      ++res.lane_evals[r];
      if (std::isfinite(f[r]) && f[r] < res.best_loss[r]) keep_best(r);
    }
  }
  for (int r = 0; r < R; ++r) res.iterations[r] = rule->iterations(r);
  // best_theta: the joint vector of each lane's best iterate, natural units (shared, then blocks)
  res.best_theta.assign(static_cast<size_t>(R) * D, NAN);
  for (int r = 0; r < R; ++r) {
    const double* g0 = out.group_theta.data() + static_cast<size_t>(r) * P;  // group 0's row
    for (int k = 0; k < S; ++k) res.best_theta[static_cast<size_t>(r) * D + k] = g0[sh[k]];
    for (int g = 0; g < G; ++g) {
      const double* row = out.group_theta.data() + (static_cast<size_t>(g) * R + r) * P;
      for (int q = 0; q < Q; ++q) res.best_theta[static_cast<size_t>(r) * D + S + g * Q + q] = row[loc[q]];
    }
  }
  return out;
}

std::vector<SharedResult> calibrate_shared_many(const std::vector<SharedJob>& jobs, const Limits& lim, int threads,
                                                const PoolPoll& poll) {
  // costliest first (lanes x groups' input elements), results in job order
  std::vector<double> cost(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    double elements = 1;
    for (const Inputs* in : jobs[i].inputs)
      for (const Array& a : in->shared) elements += static_cast<double>(a.numel());
    cost[i] = static_cast<double>(jobs[i].R) * elements;
  }
  std::vector<int> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  std::vector<SharedResult> out(jobs.size());
  parallel_for(
      static_cast<int>(jobs.size()), threads,
      [&](int k, VM&) {
        const int i = order[k];
        try {
          out[i] = calibrate_shared(jobs[i], lim);
        } catch (const Error& e) {
          out[i] = SharedResult{};
          out[i].joint.error = e.what();
          out[i].joint.error_kind = static_cast<int>(e.kind);
          out[i].joint.error_line = e.line;
          out[i].joint.error_col = e.col;
        } catch (const std::exception& e) {
          out[i] = SharedResult{};
          out[i].joint.error = std::string("internal error: ") + e.what();
          out[i].joint.error_kind = static_cast<int>(ErrorKind::Eval);
        }
      },
      poll);
  return out;
}

}  // namespace ndvm
