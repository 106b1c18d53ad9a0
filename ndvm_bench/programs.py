"""The benchmark programs and their deterministic data, shared by every baseline, suite and test.

Each :class:`BenchProgram` holds NDVM source text, the inputs it needs and the parameter vector
at which gradients are compared and timed. The Kalman observations are simulated from a known
local-level model with a fixed seed, so every run (and every baseline) sees the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class BenchProgram:
    name: str
    regime: str
    source: str
    inputs: dict = field(default_factory=dict)
    theta: tuple[float, ...] = ()  # the point at which values and gradients are taken

    def theta_batch(self, B: int, spread: float = 0.0) -> np.ndarray:
        """``[B, P]`` copies of ``theta``; with ``spread`` > 0 each lane is scaled by a distinct factor
        in ``[1 - spread, 1 + spread]`` (deterministic), so lanes are different problems."""
        base = np.tile(np.asarray(self.theta, dtype=np.float64), (B, 1))
        if spread and B > 1:
            base = base * np.linspace(1.0 - spread, 1.0 + spread, B)[:, None]
        return base


KALMAN_SOURCE = """\
(param q 0.3 positive)
(param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys))
      nll
      (let* ((Pp (+ P (* q I)))
             (S (+ Pp (* r I)))
             (e (- (ref ys t) x))
             (Si (inv S))
             (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp)
              (+ nll (logdet S) (dot e (matvec Si e)))))))
"""

KALMAN_TRUE_Q = 0.2
KALMAN_TRUE_R = 0.5
KALMAN_SEED = 20260101


def kalman_observations(
    T: int = 80, q: float = KALMAN_TRUE_Q, r: float = KALMAN_TRUE_R, seed: int = KALMAN_SEED
) -> np.ndarray:
    """``[T, 2]`` observations of a 2-D local-level model: x_t = x_{t-1} + N(0, q I), y_t = x_t + N(0, r I),
    x_0 = 0. Simulated (not measured) data, from a fixed seed."""
    rng = np.random.default_rng(seed)
    x = np.zeros(2)
    ys = np.empty((T, 2))
    for t in range(T):
        x = x + rng.normal(0.0, np.sqrt(q), 2)
        ys[t] = x + rng.normal(0.0, np.sqrt(r), 2)
    return ys


def _build() -> dict[str, BenchProgram]:
    programs = [
        BenchProgram(
            "scalar_mul_add", "scalar", "(param a 0.5)\n(param b 0.3)\n(+ (* a x) b)\n", {"x": 1.7}, (0.5, 0.3)
        ),
        BenchProgram(
            "michaelis_menten",
            "scalar",
            "(param Vmax 1.2)\n(param Km 0.4)\n(/ (* Vmax S) (+ Km S))\n",
            {"S": 0.8},
            (1.2, 0.4),
        ),
        BenchProgram(
            "damped_oscillator",
            "transcendental",
            "(param A 1.1)\n(param b 0.3)\n(param w 2.0)\n(* A (* (exp (- 0.0 (* b t))) (cos (* w t))))\n",
            {"t": 1.3},
            (1.1, 0.3, 2.0),
        ),
        BenchProgram(
            "logistic_map_loop",
            "recursive scalar",
            "(param r 3.2)\n(param x0 0.4)\n"
            "(loop ((i 0) (x x0))\n  (if (= i 16) x (recur (+ i 1) (* r x (- 1.0 x)))))\n",
            {},
            (3.2, 0.4),
        ),
        BenchProgram("kalman2d_T80", "matrix rollout", KALMAN_SOURCE, {"ys": kalman_observations(80)}, (0.3, 0.3)),
    ]
    return {p.name: p for p in programs}


PROGRAMS: dict[str, BenchProgram] = _build()
REGIME_ORDER = ["scalar_mul_add", "michaelis_menten", "damped_oscillator", "logistic_map_loop", "kalman2d_T80"]


def get(name: str) -> BenchProgram:
    try:
        return PROGRAMS[name]
    except KeyError:
        raise KeyError(f"unknown benchmark program {name!r}; known: {', '.join(REGIME_ORDER)}") from None


__all__ = ["BenchProgram", "KALMAN_SOURCE", "PROGRAMS", "REGIME_ORDER", "get", "kalman_observations"]
