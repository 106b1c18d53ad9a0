// The optimizers of fused calibration (optim.cc) as small types behind one interface: each keeps
// its own state for R restart lanes of P unconstrained coordinates and moves a lane's coordinates
// given its loss and gradient, and decides when the lane has converged (its StopReason).
// calibrate() owns the loop: evaluation, best-iterate tracking, the plateau rule, lane status.
#pragma once
#include <cstring>
#include <memory>
#include <vector>

#include "optim.h"

namespace ndvm {

// Copies P doubles; P may be 0 (a program without parameters), where memcpy's pointers may be null.
inline void copy_row(double* dst, const double* src, int P) {
  if (P > 0) std::memcpy(dst, src, sizeof(double) * P);
}

// Returned by StepRule::update and on_nonfinite when the lane goes on (otherwise a StopReason).
constexpr int kContinue = -1;

class StepRule {
 public:
  explicit StepRule(int R) : iterations_(R, 0) {}
  virtual ~StepRule() = default;
  // Lane r's finite loss f and gradient g (unconstrained coordinates) at u, the `step`-th
  // evaluation: moves u to the next point to evaluate and returns kContinue, or returns why the
  // lane stops (u is then left as evaluated).
  virtual int update(int r, int step, double f, const double* g, double* u) = 0;
  // Lane r's evaluation at u was not finite: kContinue when u was moved to a new point to try,
  // otherwise why the lane stops.
  virtual int on_nonfinite(int r, double* u) {
    (void)r, (void)u;
    return STOP_NONFINITE;
  }
  // Whether calibrate() scores the last update after the step budget (a point not evaluated yet).
  virtual bool score_last_update() const { return true; }
  int iterations(int r) const { return iterations_[r]; }

 protected:
  std::vector<int> iterations_;  // [R] completed iterations of each lane
};

// The rule named by spec.optimizer, with fresh state for R lanes of P coordinates.
std::unique_ptr<StepRule> make_step_rule(const CalibSpec& spec, int R, int P);

}  // namespace ndvm
