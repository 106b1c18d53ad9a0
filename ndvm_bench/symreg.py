"""Suite ``symreg``: fitting LLM-written equation skeletons to thousands of points, NDVM against the
LLM-SR protocol (scipy BFGS with finite-difference gradients on a numpy implementation).

Four generated data sets (fixed seeds, Gaussian noise; 2,000-10,000 points) and 49 skeletons of
the kind an LLM-SR run proposes: polynomial, trigonometric, exponential and rational forms with
3-10 free parameters, each written twice, in the NDVM language and in numpy, and checked to compute
the same function before anything is timed. Every parameter starts at 1.0 (LLM-SR's convention);
the other seven of the 8 starts are 1 + N(0, 1), seeded per skeleton, and both sides get the same
points.

Per skeleton and NDVM configuration:
(a) one start: ``scipy.optimize.minimize(method="BFGS")`` (no ``jac``: two-point finite differences)
    against ``ndvm.calibrate(restarts=1, init=start)``;
(b) 8 starts: scipy from each start one after another (the best of the 8 kept) against one
    ``ndvm.calibrate(restarts=8, init=starts)`` (the starts as lanes).
Both final losses are the training MSE recomputed by the same numpy function from the returned
parameters. NDVM runs with one thread (scipy's numpy is single-threaded too) and otherwise at the
``ndvm.calibrate`` defaults (L-BFGS with its stopping rules, a budget of 1,000 evaluations); Adam at
its defaults (200 steps, lr 0.05), the defaults before issue 20, is measured beside it.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ndvm_bench.common import BenchConfig, SuiteResult, SuiteSkipped, fmt_num, fmt_ratio, require_ndvm

N_STARTS = 8
# ndvm's loss counts as "as good as scipy's" when ndvm <= scipy * (1 + REL_TOL) + ABS_TOL.
REL_TOL, ABS_TOL = 1e-6, 1e-12
# The NDVM configurations measured: the calibrate defaults (variable projection since issue 37),
# L-BFGS searching every parameter (the defaults before it), and Adam (the defaults before issue 20).
NDVM_CONFIGS: dict[str, dict[str, Any]] = {
    "defaults (lbfgs, 1000 evaluations, linear parameters solved)": {},
    "lbfgs, every parameter searched (solve_linear=False)": {"solve_linear": False},
    "adam, 200 steps": {"optimizer": "adam"},
}
# The skeletons run in --quick mode: one or two per data set.
QUICK = ("osc_damped_cos_offset", "growth_logistic_offset", "stress_tanh_linear", "bact_monod_gauss")


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    inputs: dict[str, np.ndarray]
    target: np.ndarray


@dataclass(frozen=True)
class Skeleton:
    name: str
    dataset: str
    n_params: int
    body: str  # NDVM expression over p0..p{n-1} and the data set's inputs
    numpy: Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray]  # (p [P], inputs) -> predictions

    @property
    def source(self) -> str:
        """The NDVM program: every parameter declared free, starting at 1.0."""
        decls = "".join(f"(param p{i} 1.0)\n" for i in range(self.n_params))
        return decls + self.body + "\n"


def make_datasets() -> dict[str, Dataset]:
    """The four data sets; deterministic (one seed each)."""
    out = {}

    rng = np.random.default_rng(2026_0501)
    t = np.linspace(0.0, 20.0, 5000)
    y = 1.8 * np.exp(-0.15 * t) * np.cos(2.1 * t + 0.4) + 0.2 + rng.normal(0.0, 0.05, t.size)
    out["oscillator"] = Dataset("oscillator", "damped oscillator, 5,000 points, t in [0, 20]", {"t": t}, y)

    rng = np.random.default_rng(2026_0502)
    t = np.linspace(0.5, 40.0, 2000)
    y = 12.0 / (1.0 + 30.0 * np.exp(-0.3 * t)) ** (1.0 / 0.7) + rng.normal(0.0, 0.15, t.size)
    out["growth"] = Dataset("growth", "generalized logistic growth, 2,000 points, t in [0.5, 40]", {"t": t}, y)

    rng = np.random.default_rng(2026_0503)
    e = np.linspace(0.0, 0.08, 8000)
    E, s0, m, H = 200.0, 0.35, 4.0, 1.5  # modulus, yield stress, transition sharpness, hardening (GPa)
    y = E * e / (1.0 + (E * e / s0) ** m) ** (1.0 / m) + H * e + rng.normal(0.0, 0.005, e.size)
    out["stress_strain"] = Dataset("stress_strain", "elastic-plastic stress-strain, 8,000 points", {"e": e}, y)

    rng = np.random.default_rng(2026_0504)
    S = rng.uniform(0.1, 10.0, 10_000)
    T = rng.uniform(-2.0, 1.5, 10_000)  # temperature as (T - 30 C) / 10 C: from 10 to 45 C
    y = 2.5 * S / (0.8 + S) * np.exp(-(((T - 0.5) / 0.7) ** 2)) + rng.normal(0.0, 0.02, S.size)
    out["bacteria"] = Dataset(
        "bacteria", "bacterial growth rate vs substrate S and scaled temperature T, 10,000 points", {"S": S, "T": T}, y
    )
    return out


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _skeletons() -> list[Skeleton]:
    k: list[Skeleton] = []

    def add(name: str, dataset: str, n: int, body: str, fn: Callable[..., np.ndarray]) -> None:
        k.append(Skeleton(name, dataset, n, body, fn))

    # oscillator: input t
    d = "oscillator"
    add(
        "osc_poly3",
        d,
        4,
        "(+ p0 (* p1 t) (* p2 t t) (* p3 t t t))",
        lambda p, x: p[0] + p[1] * x["t"] + p[2] * x["t"] ** 2 + p[3] * x["t"] ** 3,
    )
    add(
        "osc_damped_cos",
        d,
        4,
        "(* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3)))",
        lambda p, x: p[0] * np.exp(-p[1] * x["t"]) * np.cos(p[2] * x["t"] + p[3]),
    )
    add(
        "osc_damped_cos_offset",
        d,
        5,
        "(+ (* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3))) p4)",
        lambda p, x: p[0] * np.exp(-p[1] * x["t"]) * np.cos(p[2] * x["t"] + p[3]) + p[4],
    )
    add(
        "osc_damped_sincos",
        d,
        5,
        "(+ (* (exp (- (* p0 t))) (+ (* p1 (cos (* p2 t))) (* p3 (sin (* p2 t))))) p4)",
        lambda p, x: np.exp(-p[0] * x["t"]) * (p[1] * np.cos(p[2] * x["t"]) + p[3] * np.sin(p[2] * x["t"])) + p[4],
    )
    add("osc_cos", d, 4, "(+ (* p0 (cos (+ (* p1 t) p2))) p3)", lambda p, x: p[0] * np.cos(p[1] * x["t"] + p[2]) + p[3])
    add(
        "osc_rational_envelope",
        d,
        5,
        "(+ (/ (* p0 (cos (+ (* p1 t) p2))) (+ 1 (* p3 t))) p4)",
        lambda p, x: p[0] * np.cos(p[1] * x["t"] + p[2]) / (1 + p[3] * x["t"]) + p[4],
    )
    add(
        "osc_mode_plus_decay",
        d,
        6,
        "(+ (* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3))) (* p4 (exp (- (* p5 t)))))",
        lambda p, x: p[0] * np.exp(-p[1] * x["t"]) * np.cos(p[2] * x["t"] + p[3]) + p[4] * np.exp(-p[5] * x["t"]),
    )
    add(
        "osc_quadratic_envelope",
        d,
        7,
        "(+ (* (+ p0 (* p1 t) (* p2 t t)) (exp (- (* p3 t))) (cos (+ (* p4 t) p5))) p6)",
        lambda p, x: (
            (p[0] + p[1] * x["t"] + p[2] * x["t"] ** 2) * np.exp(-p[3] * x["t"]) * np.cos(p[4] * x["t"] + p[5]) + p[6]
        ),
    )
    add(
        "osc_tanh_envelope",
        d,
        5,
        "(+ (* p0 (- 1 (tanh (* p1 t))) (cos (+ (* p2 t) p3))) p4)",
        lambda p, x: p[0] * (1 - np.tanh(p[1] * x["t"])) * np.cos(p[2] * x["t"] + p[3]) + p[4],
    )
    add(
        "osc_two_modes",
        d,
        9,
        "(+ (* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3))) (* p4 (exp (- (* p5 t))) (cos (+ (* p6 t) p7))) p8)",
        lambda p, x: (
            p[0] * np.exp(-p[1] * x["t"]) * np.cos(p[2] * x["t"] + p[3])
            + p[4] * np.exp(-p[5] * x["t"]) * np.cos(p[6] * x["t"] + p[7])
            + p[8]
        ),
    )
    add(
        "osc_gauss_envelope",
        d,
        7,
        "(+ (* p0 (exp (- (* p1 t t))) (cos (+ (* p2 t) p3))) (* p4 (exp (- (* p5 t)))) p6)",
        lambda p, x: (
            p[0] * np.exp(-p[1] * x["t"] ** 2) * np.cos(p[2] * x["t"] + p[3]) + p[4] * np.exp(-p[5] * x["t"]) + p[6]
        ),
    )
    add(
        "osc_poly_decay",
        d,
        7,
        "(+ (* (exp (- (* p0 t))) (+ p1 (* p2 t) (* p3 t t) (* p4 t t t) (* p5 t t t t))) p6)",
        lambda p, x: (
            np.exp(-p[0] * x["t"])
            * (p[1] + p[2] * x["t"] + p[3] * x["t"] ** 2 + p[4] * x["t"] ** 3 + p[5] * x["t"] ** 4)
            + p[6]
        ),
    )

    # growth: input t
    d = "growth"
    add(
        "growth_logistic",
        d,
        3,
        "(/ p0 (+ 1 (exp (- (* p1 (- t p2))))))",
        lambda p, x: p[0] / (1 + np.exp(-p[1] * (x["t"] - p[2]))),
    )
    add(
        "growth_logistic_offset",
        d,
        4,
        "(+ (/ p0 (+ 1 (exp (- (* p1 (- t p2)))))) p3)",
        lambda p, x: p[0] / (1 + np.exp(-p[1] * (x["t"] - p[2]))) + p[3],
    )
    add(
        "growth_gompertz",
        d,
        3,
        "(* p0 (exp (- (* p1 (exp (- (* p2 t)))))))",
        lambda p, x: p[0] * np.exp(-p[1] * np.exp(-p[2] * x["t"])),
    )
    add(
        "growth_gompertz_offset",
        d,
        4,
        "(+ (* p0 (exp (- (* p1 (exp (- (* p2 t))))))) p3)",
        lambda p, x: p[0] * np.exp(-p[1] * np.exp(-p[2] * x["t"])) + p[3],
    )
    add(
        "growth_richards",
        d,
        4,
        "(/ p0 (expt (+ 1 (* p1 (exp (- (* p2 t))))) p3))",
        lambda p, x: p[0] / (1 + p[1] * np.exp(-p[2] * x["t"])) ** p[3],
    )
    add(
        "growth_poly4",
        d,
        5,
        "(+ p0 (* p1 t) (* p2 t t) (* p3 t t t) (* p4 t t t t))",
        lambda p, x: p[0] + p[1] * x["t"] + p[2] * x["t"] ** 2 + p[3] * x["t"] ** 3 + p[4] * x["t"] ** 4,
    )
    add(
        "growth_hill",
        d,
        4,
        "(+ (/ (* p0 (expt t p1)) (+ p2 (expt t p1))) p3)",
        lambda p, x: p[0] * x["t"] ** p[1] / (p[2] + x["t"] ** p[1]) + p[3],
    )
    add(
        "growth_tanh",
        d,
        4,
        "(+ (* p0 (tanh (* p1 (- t p2)))) p3)",
        lambda p, x: p[0] * np.tanh(p[1] * (x["t"] - p[2])) + p[3],
    )
    add(
        "growth_exp_rise",
        d,
        3,
        "(+ (* p0 (- 1 (exp (- (* p1 t))))) p2)",
        lambda p, x: p[0] * (1 - np.exp(-p[1] * x["t"])) + p[2],
    )
    add(
        "growth_rational",
        d,
        5,
        "(/ (+ (* p0 t t) (* p1 t) p2) (+ (* t t) (* p3 t) p4))",
        lambda p, x: (p[0] * x["t"] ** 2 + p[1] * x["t"] + p[2]) / (x["t"] ** 2 + p[3] * x["t"] + p[4]),
    )
    add(
        "growth_logistic_linear",
        d,
        5,
        "(+ (/ p0 (+ 1 (exp (- (* p1 (- t p2)))))) (* p3 t) p4)",
        lambda p, x: p[0] / (1 + np.exp(-p[1] * (x["t"] - p[2]))) + p[3] * x["t"] + p[4],
    )
    add(
        "growth_double_logistic",
        d,
        6,
        "(+ (/ p0 (+ 1 (exp (- (* p1 (- t p2)))))) (/ p3 (+ 1 (exp (- (* p4 (- t p5)))))))",
        lambda p, x: p[0] / (1 + np.exp(-p[1] * (x["t"] - p[2]))) + p[3] / (1 + np.exp(-p[4] * (x["t"] - p[5]))),
    )

    # stress-strain: input e (strain)
    d = "stress_strain"
    add(
        "stress_poly3",
        d,
        3,
        "(+ (* p0 e) (* p1 e e) (* p2 e e e))",
        lambda p, x: p[0] * x["e"] + p[1] * x["e"] ** 2 + p[2] * x["e"] ** 3,
    )
    add(
        "stress_tanh_linear",
        d,
        3,
        "(+ (* p0 (tanh (* p1 e))) (* p2 e))",
        lambda p, x: p[0] * np.tanh(p[1] * x["e"]) + p[2] * x["e"],
    )
    add(
        "stress_tanh_offset",
        d,
        4,
        "(+ (* p0 (tanh (* p1 e))) (* p2 e) p3)",
        lambda p, x: p[0] * np.tanh(p[1] * x["e"]) + p[2] * x["e"] + p[3],
    )
    add(
        "stress_rational",
        d,
        3,
        "(+ (/ (* p0 e) (+ 1 (* p1 e))) (* p2 e))",
        lambda p, x: p[0] * x["e"] / (1 + p[1] * x["e"]) + p[2] * x["e"],
    )
    add(
        "stress_voce",
        d,
        4,
        "(+ (* p0 (- 1 (exp (- (* p1 e))))) (* p2 e) p3)",
        lambda p, x: p[0] * (1 - np.exp(-p[1] * x["e"])) + p[2] * x["e"] + p[3],
    )
    add(
        "stress_sqrt_softening",
        d,
        3,
        "(+ (/ (* p0 e) (sqrt (+ 1 (square (* p1 e))))) (* p2 e))",
        lambda p, x: p[0] * x["e"] / np.sqrt(1 + (p[1] * x["e"]) ** 2) + p[2] * x["e"],
    )
    add(
        "stress_poly5",
        d,
        6,
        "(+ (* p0 e) (* p1 e e) (* p2 e e e) (* p3 e e e e) (* p4 e e e e e) p5)",
        lambda p, x: (
            p[0] * x["e"] + p[1] * x["e"] ** 2 + p[2] * x["e"] ** 3 + p[3] * x["e"] ** 4 + p[4] * x["e"] ** 5 + p[5]
        ),
    )
    add(
        "stress_rational22",
        d,
        5,
        "(+ (/ (+ (* p0 e) (* p1 e e)) (+ 1 (* p2 e) (* p3 e e))) p4)",
        lambda p, x: (p[0] * x["e"] + p[1] * x["e"] ** 2) / (1 + p[2] * x["e"] + p[3] * x["e"] ** 2) + p[4],
    )
    add(
        "stress_log_hardening",
        d,
        4,
        "(+ (* p0 (log (+ 1 (* (abs p1) e)))) (* p2 e) p3)",
        lambda p, x: p[0] * np.log(1 + np.abs(p[1]) * x["e"]) + p[2] * x["e"] + p[3],
    )
    add(
        "stress_swift",
        d,
        4,
        "(+ (* p0 (expt (+ (abs p1) e) p2)) (* p3 e))",
        lambda p, x: p[0] * (np.abs(p[1]) + x["e"]) ** p[2] + p[3] * x["e"],
    )
    add(
        "stress_two_tanh",
        d,
        5,
        "(+ (* p0 (tanh (* p1 e))) (* p2 (tanh (* p3 e))) (* p4 e))",
        lambda p, x: p[0] * np.tanh(p[1] * x["e"]) + p[2] * np.tanh(p[3] * x["e"]) + p[4] * x["e"],
    )
    add(
        "stress_voce_quadratic",
        d,
        5,
        "(+ (* p0 (- 1 (exp (- (* p1 e))))) (* p2 e) (* p3 e e) p4)",
        lambda p, x: p[0] * (1 - np.exp(-p[1] * x["e"])) + p[2] * x["e"] + p[3] * x["e"] ** 2 + p[4],
    )

    # bacteria: inputs S (substrate) and T (temperature, scaled)
    d = "bacteria"
    add(
        "bact_monod_linear_T",
        d,
        3,
        "(* (/ (* p0 S) (+ p1 S)) (+ 1 (* p2 T)))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * (1 + p[2] * x["T"]),
    )
    add(
        "bact_monod_gauss",
        d,
        4,
        "(* (/ (* p0 S) (+ p1 S)) (exp (- (* p2 (square (- T p3))))))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * np.exp(-p[2] * (x["T"] - p[3]) ** 2),
    )
    add(
        "bact_monod_gauss_offset",
        d,
        5,
        "(+ (* (/ (* p0 S) (+ p1 S)) (exp (- (* p2 (square (- T p3)))))) p4)",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * np.exp(-p[2] * (x["T"] - p[3]) ** 2) + p[4],
    )
    add(
        "bact_monod_quadratic_T",
        d,
        5,
        "(* (/ (* p0 S) (+ p1 S)) (+ p2 (* p3 T) (* p4 T T)))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * (p[2] + p[3] * x["T"] + p[4] * x["T"] ** 2),
    )
    add(
        "bact_haldane_gauss",
        d,
        5,
        "(* (/ (* p0 S) (+ p1 S (* p2 S S))) (exp (- (* p3 (square (- T p4))))))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"] + p[2] * x["S"] ** 2) * np.exp(-p[3] * (x["T"] - p[4]) ** 2),
    )
    add(
        "bact_exp_saturation",
        d,
        4,
        "(* p0 (- 1 (exp (- (* p1 S)))) (exp (- (* p2 (square (- T p3))))))",
        lambda p, x: p[0] * (1 - np.exp(-p[1] * x["S"])) * np.exp(-p[2] * (x["T"] - p[3]) ** 2),
    )
    add(
        "bact_ratkowsky",
        d,
        6,
        "(* (/ (* p0 S) (+ p1 S)) (square (* p2 (- T p3))) (- 1 (exp (* p4 (- T p5)))))",
        lambda p, x: (
            p[0] * x["S"] / (p[1] + x["S"]) * (p[2] * (x["T"] - p[3])) ** 2 * (1 - np.exp(p[4] * (x["T"] - p[5])))
        ),
    )
    add(
        "bact_thermal_deactivation",
        d,
        5,
        "(/ (* (/ (* p0 S) (+ p1 S)) (exp (* p2 T))) (+ 1 (exp (* p3 (- T p4)))))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * np.exp(p[2] * x["T"]) / (1 + np.exp(p[3] * (x["T"] - p[4]))),
    )
    add(
        "bact_poly2",
        d,
        6,
        "(+ p0 (* p1 S) (* p2 T) (* p3 S T) (* p4 S S) (* p5 T T))",
        lambda p, x: (
            p[0] + p[1] * x["S"] + p[2] * x["T"] + p[3] * x["S"] * x["T"] + p[4] * x["S"] ** 2 + p[5] * x["T"] ** 2
        ),
    )
    add(
        "bact_hill_gauss",
        d,
        5,
        "(* (/ (* p0 (expt S p1)) (+ p2 (expt S p1))) (exp (- (* p3 (square (- T p4))))))",
        lambda p, x: p[0] * x["S"] ** p[1] / (p[2] + x["S"] ** p[1]) * np.exp(-p[3] * (x["T"] - p[4]) ** 2),
    )
    add(
        "bact_tanh_gauss",
        d,
        5,
        "(+ (* p0 (tanh (* p1 S)) (exp (- (* p2 (square (- T p3)))))) p4)",
        lambda p, x: p[0] * np.tanh(p[1] * x["S"]) * np.exp(-p[2] * (x["T"] - p[3]) ** 2) + p[4],
    )
    add(
        "bact_monod_sigmoids",
        d,
        6,
        "(* (/ (* p0 S) (+ p1 S)) (sigmoid (* p2 (- T p3))) (sigmoid (- (* p4 (- T p5)))))",
        lambda p, x: p[0] * x["S"] / (p[1] + x["S"]) * _sig(p[2] * (x["T"] - p[3])) * _sig(-p[4] * (x["T"] - p[5])),
    )
    add(
        "bact_monod_gauss_poly",
        d,
        10,
        "(+ (* (/ (* p0 S) (+ p1 S)) (exp (- (* p2 (square (- T p3)))))) (* p4 S) (* p5 T) p6 (* p7 S T) (* p8 T T) (* p9 S S))",
        lambda p, x: (
            p[0] * x["S"] / (p[1] + x["S"]) * np.exp(-p[2] * (x["T"] - p[3]) ** 2)
            + p[4] * x["S"]
            + p[5] * x["T"]
            + p[6]
            + p[7] * x["S"] * x["T"]
            + p[8] * x["T"] ** 2
            + p[9] * x["S"] ** 2
        ),
    )
    return k


SKELETONS: dict[str, Skeleton] = {s.name: s for s in _skeletons()}


def starts(skeleton: Skeleton) -> np.ndarray:
    """[8, P] starting points: all ones (LLM-SR's start), then 1 + N(0, 1), seeded by the name."""
    rng = np.random.default_rng(sum(skeleton.name.encode()) * 7919 + skeleton.n_params)
    x0 = 1.0 + rng.standard_normal((N_STARTS, skeleton.n_params))
    x0[0] = 1.0
    return x0


def numpy_loss(skeleton: Skeleton, data: Dataset) -> Callable[[np.ndarray], float]:
    """The training MSE scipy minimizes (what an LLM-SR evaluator computes)."""

    def loss(p: np.ndarray) -> float:
        with np.errstate(all="ignore"):
            return float(np.mean((skeleton.numpy(p, data.inputs) - data.target) ** 2))

    return loss


def check_agreement(ndvm: Any, skeleton: Skeleton, data: Dataset, program: Any = None) -> float:
    """Evaluates the NDVM program and the numpy skeleton at one parameter vector (1 + 0.3 N(0, 1),
    seeded) over the whole data set; raises AssertionError naming the skeleton when they differ by
    more than 1e-9 relative to the scale of the values. Returns the largest difference."""
    program = program or ndvm.compile(skeleton.source)
    theta = 1.0 + 0.3 * np.random.default_rng(len(skeleton.name)).standard_normal(skeleton.n_params)
    got = np.asarray(program.evaluate(theta[None, :], data.inputs))[0]
    with np.errstate(all="ignore"):
        want = skeleton.numpy(theta, data.inputs)
    if got.shape != want.shape or not (np.isfinite(got).all() and np.isfinite(want).all()):
        raise AssertionError(f"skeleton {skeleton.name}: shapes {got.shape}/{want.shape} or non-finite values")
    diff = float(np.max(np.abs(got - want)))
    scale = float(np.max(np.abs(want))) + 1.0
    if diff > 1e-9 * scale:
        raise AssertionError(f"skeleton {skeleton.name}: NDVM and numpy differ by {diff:.3g} (scale {scale:.3g})")
    return diff


def _finite(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def as_good(ndvm_loss: float, scipy_loss: float) -> bool:
    """ndvm's loss is at least as good as scipy's, within REL_TOL and ABS_TOL (two infinite losses tie)."""
    if ndvm_loss == math.inf:
        return scipy_loss == math.inf
    return ndvm_loss <= scipy_loss * (1 + REL_TOL) + ABS_TOL


def fit_scipy(loss: Callable[[np.ndarray], float], x0: np.ndarray) -> tuple[float, float, int]:
    """One LLM-SR fit: BFGS, finite-difference gradient. Returns (final loss, seconds, evaluations)."""
    from scipy.optimize import minimize

    t0 = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # overflow and "desired error not necessarily achieved"
        res = minimize(loss, x0, method="BFGS")
    seconds = time.perf_counter() - t0
    return _finite(loss(res.x)), seconds, int(res.nfev)


def fit_ndvm(ndvm: Any, program: Any, data: Dataset, x0: np.ndarray, loss, options: dict) -> dict:
    """One ``ndvm.calibrate`` call with the starts ``x0`` [R, P] as lanes, one thread."""
    R = x0.shape[0]
    t0 = time.perf_counter()
    fit = ndvm.calibrate(program, data.inputs, target=data.target, restarts=R, init=x0, threads=1, **options)
    seconds = time.perf_counter() - t0
    from ndvm.calibrate import DEFAULT_OPTIMIZER, OPTIMIZER_STEPS

    budget = options.get("steps", OPTIMIZER_STEPS[options.get("optimizer", DEFAULT_OPTIMIZER)])
    final = _finite(loss(fit.theta[0])) if fit.status == "ok" else math.inf
    return {
        "loss": final,
        "seconds": seconds,
        "steps": fit.steps,
        "evaluations": fit.evaluations,
        "whole_budget": fit.steps >= budget,
        "lane_status": fit.lane_status,
        "lane_reason": fit.lane_reason,
        "lane_evaluations": fit.lane_evaluations.tolist(),
    }


def run_skeletons(names: Sequence[str], ndvm: Any, datasets: dict[str, Dataset]) -> list[dict]:
    """Fits each named skeleton both ways; one record per skeleton (everything measured)."""
    records = []
    for name in names:
        sk = SKELETONS[name]
        data = datasets[sk.dataset]
        program = ndvm.compile(sk.source)
        agreement = check_agreement(ndvm, sk, data, program)  # before any timing
        loss = numpy_loss(sk, data)
        x0 = starts(sk)
        rec: dict[str, Any] = {"skeleton": name, "dataset": sk.dataset, "P": sk.n_params, "agreement": agreement}
        scipy_runs = [fit_scipy(loss, x0[i]) for i in range(N_STARTS)]
        rec["scipy_1"] = {"loss": scipy_runs[0][0], "seconds": scipy_runs[0][1], "evaluations": scipy_runs[0][2]}
        rec["scipy_8"] = {
            "loss": min(r[0] for r in scipy_runs),
            "seconds": sum(r[1] for r in scipy_runs),
            "evaluations": sum(r[2] for r in scipy_runs),
        }
        for config, options in NDVM_CONFIGS.items():
            # warm-up (two steps): first-call costs are not the fit's
            fit_ndvm(ndvm, program, data, x0[:1], loss, {**options, "steps": 2})
            rec[config] = {"1": fit_ndvm(ndvm, program, data, x0[:1], loss, options)}
            rec[config]["8"] = fit_ndvm(ndvm, program, data, x0, loss, options)
        records.append(rec)
    return records


def summarize(records: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Per NDVM configuration and start count: skeletons as good as scipy, geometric-mean speed ratio
    (scipy seconds / ndvm seconds), fits that ran the whole step budget."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for config in NDVM_CONFIGS:
        out[config] = {}
        for n in ("1", "8"):
            good = sum(as_good(r[config][n]["loss"], r[f"scipy_{n}"]["loss"]) for r in records)
            speedups = [r[f"scipy_{n}"]["seconds"] / r[config][n]["seconds"] for r in records]
            out[config][n] = {
                "skeletons": len(records),
                "as_good": good,
                "fraction_as_good": good / len(records),
                "geomean_speedup": _geomean(speedups),
                "whole_budget": sum(r[config][n]["whole_budget"] for r in records),
                # evaluations per fit: NDVM's batched walks (the slowest lane's count), scipy's loss calls
                "median_evaluations": float(np.median([r[config][n]["evaluations"] for r in records])),
                "scipy_median_evaluations": float(np.median([r[f"scipy_{n}"]["evaluations"] for r in records])),
                "scipy_seconds": sum(r[f"scipy_{n}"]["seconds"] for r in records),
                "ndvm_seconds": sum(r[config][n]["seconds"] for r in records),
            }
        # Where the time goes: one NDVM value-and-gradient (one lane) against one numpy loss
        # evaluation of scipy's, and what an 8-lane evaluation costs against a one-lane one.
        per_eval = [
            (r[config]["1"]["seconds"] / r[config]["1"]["evaluations"])
            / (r["scipy_1"]["seconds"] / r["scipy_1"]["evaluations"])
            for r in records
        ]
        lanes8 = [
            (r[config]["8"]["seconds"] / r[config]["8"]["evaluations"])
            / (r[config]["1"]["seconds"] / r[config]["1"]["evaluations"])
            for r in records
        ]
        out[config]["cost"] = {
            "ndvm_eval_over_numpy_eval_geomean": _geomean(per_eval),
            "eight_lane_eval_over_one_lane_geomean": _geomean(lanes8),
        }
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def run_symreg(config: BenchConfig, names: Sequence[str] | None = None) -> SuiteResult:
    ndvm = require_ndvm("compile", "calibrate")
    try:
        import scipy.optimize  # noqa: F401
    except ImportError as exc:
        raise SuiteSkipped(f"scipy is not installed: {exc}") from exc
    from ndvm.calibrate import DEFAULT_OPTIMIZER, DEFAULT_STEPS

    if (DEFAULT_OPTIMIZER, DEFAULT_STEPS) != ("lbfgs", 1000):  # the first configuration's label says so
        raise RuntimeError("ndvm.calibrate's defaults changed: update the labels of NDVM_CONFIGS in symreg.py")
    unknown = [n for n in names or () if n not in SKELETONS]
    if unknown:
        raise ValueError(f"unknown symreg skeleton(s): {', '.join(unknown)}")
    names = list(names or config.pick(list(SKELETONS), list(QUICK)))
    datasets = make_datasets()
    records = run_skeletons(names, ndvm, datasets)
    summary = summarize(records)
    rows = []
    for cfg, by_n in summary.items():
        for n in ("1", "8"):
            s = by_n[n]
            rows.append(
                [
                    f"ndvm {cfg}",
                    f"{n} start{'s' if n != '1' else ''}",
                    f"{s['as_good']}/{s['skeletons']} ({s['fraction_as_good']:.0%})",
                    fmt_ratio(s["geomean_speedup"]),
                    f"{s['whole_budget']}/{s['skeletons']}",
                    f"{s['median_evaluations']:.0f} / {s['scipy_median_evaluations']:.0f}",
                    fmt_num(s["scipy_seconds"], 3) + " s",
                    fmt_num(s["ndvm_seconds"], 3) + " s",
                ]
            )
    sizes = ", ".join(
        f"{d.name} {d.target.size:,}" for d in datasets.values() if any(r["dataset"] == d.name for r in records)
    )
    notes = [
        f"{len(records)} skeletons ({sizes} points); every NDVM skeleton agrees with its numpy twin to 1e-9 "
        "relative at one parameter vector (checked before timing).",
        "scipy: minimize(method='BFGS'), two-point finite-difference gradients, scipy defaults (gtol 1e-5); "
        "8 starts: one after another, the best loss kept, times summed. NDVM: ndvm.calibrate with the same "
        "starts as init (8 starts: 8 lanes in one call), threads=1, loss='mse', otherwise defaults.",
        f"'as good': ndvm loss <= scipy loss x (1 + {REL_TOL:g}) + {ABS_TOL:g} (both final losses recomputed by "
        "the same numpy MSE). Speed: geometric mean over skeletons of scipy seconds / ndvm seconds.",
        *[
            f"ndvm {cfg}: one value-and-gradient (one lane) costs "
            f"{c['cost']['ndvm_eval_over_numpy_eval_geomean']:.1f}x one numpy loss evaluation of scipy's, an 8-lane "
            f"one {c['cost']['eight_lane_eval_over_one_lane_geomean']:.1f}x a one-lane one (geometric means)"
            for cfg, c in summary.items()
        ],
        "Whole budget: NDVM fits whose step count reached the budget (no lane stopped early). Evaluations: "
        "median per fit of NDVM's value-and-gradient walks (8 starts: walks of the running lanes, as many as "
        "the slowest lane needed) and of scipy's loss calls (finite differences included; 8 starts: summed). "
        "Issue 20 targets: as good on >= 95% from 8 starts, >= 10x (8 starts) and >= 5x (one start).",
    ]
    return SuiteResult(
        "symreg",
        "LLM-style skeletons: ndvm.calibrate vs scipy BFGS with finite differences (LLM-SR protocol)",
        [
            "ndvm configuration",
            "starts",
            "as good as scipy",
            "speed (geomean)",
            "whole budget",
            "evaluations (median, ndvm / scipy)",
            "scipy total",
            "ndvm total",
        ],
        rows,
        notes,
        {"records": records, "summary": summary, "rel_tol": REL_TOL, "abs_tol": ABS_TOL},
    )


__all__ = ["NDVM_CONFIGS", "QUICK", "SKELETONS", "as_good", "check_agreement", "make_datasets", "run_symreg", "starts"]
