// Grouped fits with shared parameters: one calibration whose parameter vector is the program's
// shared parameters (declared `(param NAME INIT [CONSTRAINT] shared)`) followed by one block of its
// other (per-group) parameters for each group, fitted to the sum over groups of each group's loss
// on its own data. Gradients are exact: a shared coordinate's is the sum of the groups' gradients,
// a per-group coordinate's that group's. Restarts are lanes, as in calibrate() (optim.h).
#pragma once
#include <vector>

#include "optim.h"
#include "pool.h"

namespace ndvm {

struct SharedJob {
  const Program* program = nullptr;
  std::vector<double> theta0;  // [R, P] natural units: every group starts its block from a lane's row
  int R = 0;
  std::vector<const Inputs*> inputs;  // [G] each group's inputs
  std::vector<CalibSpec> specs;       // [G] each group's spec (its target); the optimizer settings of specs[0]
  // false: the shared parameters keep theta0's values and only the per-group blocks are fitted
  // (a held-out group fitted on its own rows with the shared values of a training fit)
  bool fit_shared = true;
};

struct SharedResult {
  CalibResult joint;                // over the joint vector: best_loss [R] is the sum over groups
  std::vector<double> group_theta;  // [G, R, P] natural units: each group's parameters at the lane's best iterate
  std::vector<double> group_loss;   // [R, G] each group's loss at the lane's best iterate
  int G = 0;
};

// The joint vector of a program: indices (into its params) of the shared parameters and the others.
void split_params(const Program& p, std::vector<int>& shared, std::vector<int>& local);

SharedResult calibrate_shared(const SharedJob& job, const Limits& lim);

// Each job on the pool (threads <= 0: all cores), costliest first; results in job order. A job
// whose program fails gives joint.error (and its kind and position), like calibrate_many. `poll`:
// see parallel_for (Ctrl-C; each running fit stops on its specs' cancel flag, the results are
// then incomplete and the caller discards them).
std::vector<SharedResult> calibrate_shared_many(const std::vector<SharedJob>& jobs, const Limits& lim, int threads,
                                                const PoolPoll& poll = nullptr);

}  // namespace ndvm
