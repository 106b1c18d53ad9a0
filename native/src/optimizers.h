// The optimizers of fused calibration (optim.cc) as small types behind one interface: each keeps
// its own state for R restart lanes of P unconstrained coordinates and moves a lane's coordinates
// given its loss and gradient. calibrate() owns the loop: evaluation, best-iterate tracking,
// convergence by tolerance, lane status.
#pragma once
#include <memory>
#include <vector>

#include "optim.h"

namespace ndvm {

class StepRule {
 public:
  virtual ~StepRule() = default;
  // Lane r's finite loss f and gradient g (unconstrained coordinates) at u, the `step`-th
  // evaluation: moves u to the next point to evaluate. false: the lane has converged.
  virtual bool update(int r, int step, double f, const double* g, double* u) = 0;
  // Lane r's evaluation at u was not finite. true: u was moved to a new point to try; false: the
  // lane stops, converged (*converged) or non-finite.
  virtual bool on_nonfinite(int r, double* u, bool* converged) {
    (void)r, (void)u;
    *converged = false;
    return false;
  }
  // Whether calibrate() scores the last update after the step budget (a point not evaluated yet).
  virtual bool score_last_update() const { return true; }
};

// The rule named by spec.optimizer, with fresh state for R lanes of P coordinates.
std::unique_ptr<StepRule> make_step_rule(const CalibSpec& spec, int R, int P);

}  // namespace ndvm
