// A parameter's natural value <-> the unconstrained coordinate the optimizers move (softplus for
// `positive`, logistic for `between`), shared by the fused calibration loops (optim.cc, shared.cc).
#pragma once
#include <algorithm>
#include <cmath>

#include "program.h"

namespace ndvm {

inline double logistic_of(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

inline double to_natural(const ParamDecl& d, double u) {
  switch (d.constraint) {
    case C_POSITIVE: return u > 30 ? u : std::log1p(std::exp(u));  // softplus
    case C_BETWEEN: return d.lo + (d.hi - d.lo) * logistic_of(u);
    default: return u;
  }
}
inline double to_unconstrained(const ParamDecl& d, double x) {
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
inline double dnatural_du(const ParamDecl& d, double u) {
  switch (d.constraint) {
    case C_POSITIVE: return logistic_of(u);
    case C_BETWEEN: {
      double s = logistic_of(u);
      return (d.hi - d.lo) * s * (1 - s);
    }
    default: return 1.0;
  }
}

}  // namespace ndvm
