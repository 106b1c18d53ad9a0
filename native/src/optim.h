// Fused calibration: Adam, L-BFGS and gradient descent run natively over all restart lanes for
// the whole step budget; Python is called once. The optimizers are in optimizers.h, the pool in
// pool.h.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "pool.h"  // parallel_for, hardware_threads (callers of calibrate_many use them)
#include "program.h"

namespace ndvm {

// The optimizer table, in the manner of the primitive table (prims.h): one line per optimizer of
// fused calibration with
//   id     its enum value (optimizers.cc: make_step_rule builds its StepRule)
//   name   its name in ndvm.calibrate(optimizer=...)
//   steps  the default budget, in evaluations of value and gradient per lane
//   lr     the default learning rate (L-BFGS: the length of its first step)
// The binding exports it (_native.OPTIMIZERS); ndvm/calibrate.py reads names and defaults from it.
// clang-format off
#define NDVM_OPTIMIZERS(X)        \
  X(Adam,  "adam",  200,  0.05)   \
  X(LBFGS, "lbfgs", 1000, 0.05)   \
  X(GD,    "gd",    200,  0.05)
// clang-format on

enum class Optimizer {
#define NDVM_OPTIMIZER_ENUM(id, name, steps, lr) id,
  NDVM_OPTIMIZERS(NDVM_OPTIMIZER_ENUM)
#undef NDVM_OPTIMIZER_ENUM
};

struct OptimizerInfo {
  Optimizer id;
  const char* name;
  int default_steps;
  double default_lr;
};

inline constexpr OptimizerInfo kOptimizers[] = {
#define NDVM_OPTIMIZER_INFO(id, name, steps, lr) {Optimizer::id, name, steps, lr},
    NDVM_OPTIMIZERS(NDVM_OPTIMIZER_INFO)
#undef NDVM_OPTIMIZER_INFO
};

struct CalibSpec {
  Optimizer optimizer = Optimizer::Adam;
  int steps = 200;  // evaluations per lane (L-BFGS: line-search trials included)
  double lr = 0.05;
  // Plateau rule (every optimizer), > 0: a lane stops when its loss changes by less than
  // tol*(1+|loss|) on `patience` evaluations in a row.
  double tol = 0;
  int patience = 5;
  // Per-lane stopping rules (0: off). gtol: the largest |gradient| component in unconstrained
  // coordinates (every optimizer). ftol: relative decrease of an L-BFGS iteration,
  // (f_k - f_k+1) / max(|f_k|, |f_k+1|). xtol: the largest move of an L-BFGS iteration,
  // |u_k+1 - u_k|_inf <= xtol * (1 + |u_k+1|_inf).
  double gtol = 0, ftol = 0, xtol = 0;
  int lbfgs_memory = 10;
  LossSpec loss;
  // Variable projection (MSE and Gaussian NLL): the program's linear parameters
  // (Program::linear_params) are not searched but solved by least squares at every evaluation
  // for the lane's other parameters; the optimizer moves only those (docs/runtime.md).
  bool solve_linear = false;
  // Set (by the binding's PoolPoll, on Ctrl-C): the calibration stops before its next step; its
  // result is then incomplete and discarded by the caller.
  const std::atomic<bool>* cancel = nullptr;
};

enum LaneStatus : int { LANE_RUNNING = 0, LANE_NONFINITE = 1, LANE_CONVERGED = 2 };

// Why a lane stopped. STOP_BUDGET: it was still running when the step budget ran out. Every reason
// but budget and nonfinite is convergence (LANE_CONVERGED).
enum StopReason : int {
  STOP_BUDGET = 0,
  STOP_GRADIENT = 1,   // gradient norm <= gtol
  STOP_DECREASE = 2,   // relative decrease <= ftol
  STOP_STEP = 3,       // step <= xtol, or the line search found no decrease along a descent direction
  STOP_PLATEAU = 4,    // the tol/patience rule
  STOP_NONFINITE = 5,  // the loss or gradient became non-finite with no finite point to fall back to
};

struct CalibResult {
  int R = 0, P = 0;
  std::vector<double> best_theta;  // [R, P] natural units, best iterate of each lane
  std::vector<double> best_loss;   // [R]
  std::vector<double> history;     // [steps, R] loss at each step (NaN once a lane stopped)
  std::vector<int> status;         // [R] LaneStatus
  std::vector<int> reason;         // [R] StopReason
  std::vector<int> iterations;     // [R] optimizer iterations (L-BFGS: accepted line searches)
  std::vector<int> lane_evals;     // [R] evaluations of each lane
  int steps_done = 0;
  int evaluations = 0;
  std::string error;  // non-empty: the program failed (calibrate_many only)
  int error_kind = -1, error_line = 0, error_col = 0;
};

class VM;

// theta0 [R, P] in natural units. Lane inputs and lane targets, when given, have R entries.
CalibResult calibrate(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in, const CalibSpec& spec,
                      const Limits& lim);

// The same, with the restart lanes split into `threads` chunks run on the pool (threads <= 1: on
// the calling thread with `vm`). Lanes are independent, so the result is identical either way.
CalibResult calibrate_threaded(const Program& p, VM& vm, const double* theta0, int R, const Inputs& in,
                               const CalibSpec& spec, const Limits& lim, int threads, const PoolPoll& poll = nullptr);

// Calibrates each job on the persistent pool (threads <= 0: all cores), costliest jobs first
// (lanes x input elements). Results are in job order, identical to a serial run; a failing job
// yields CalibResult.error. `poll`: see parallel_for (a cancelled batch's results are incomplete). Jobs may differ in program and in data: a grouped fit (one job per
// program and group, e.g. per battery cell) is one call.
struct CalibJob {
  const Program* program;
  std::vector<double> theta0;  // [R, P]
  int R;
  const Inputs* inputs;
  CalibSpec spec;
};
std::vector<CalibResult> calibrate_many(const std::vector<CalibJob>& jobs, const Limits& lim, int threads,
                                        const PoolPoll& poll = nullptr);

}  // namespace ndvm
