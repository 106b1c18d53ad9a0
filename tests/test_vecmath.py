"""Accuracy of NDVM's vector math (native/src/vecmath.h: exp, log, sin, cos, tanh, sigmoid, softplus)
against mpmath at 200 bits, through the VM's own elementwise kernels (a program over a data vector).

The error of each result is measured in units in the last place of the correctly rounded double
(ulp; for subnormal results, 2^-1074) and asserted against the bounds documented in the README
("Vector math"): exp, log, sin, cos within 1 ulp, tanh, sigmoid and softplus within 2 ulp, over
wide ranges (exp over its whole finite range, subnormal results included; log from the smallest
subnormal to the largest double; sin and cos to |x| = 2^20 through the vector reduction and
beyond through the C library; nearest doubles to multiples of pi/2). Special values (+-0, +-inf,
NaN, overflow and underflow thresholds) must be exactly what C99 Annex F gives.
"""

import math

import numpy as np
import pytest

import ndvm

mpmath = pytest.importorskip("mpmath", reason="mpmath (a dependency of sympy/torch) gives the reference values")
mpmath.mp.prec = 200

BOUND_ULP = {"exp": 1.0, "log": 1.0, "sin": 1.0, "cos": 1.0, "tanh": 2.0, "sigmoid": 2.0, "softplus": 2.0}

REFERENCE = {
    "exp": mpmath.exp,
    "log": mpmath.log,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tanh": mpmath.tanh,
    "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
    "softplus": lambda x: mpmath.log1p(mpmath.exp(x)),
}

_programs: dict[str, object] = {}


def vm_apply(name: str, xs: np.ndarray) -> np.ndarray:
    """name applied elementwise by the VM's kernels (a data vector, one lane)."""
    if name not in _programs:
        _programs[name] = ndvm.compile(f"({name} x)")
    out = _programs[name].evaluate(np.zeros((1, 0)), {"x": np.ascontiguousarray(xs, dtype=np.float64)})
    return np.asarray(out)[0]


def ulp_errors(name: str, xs: np.ndarray, got: np.ndarray) -> np.ndarray:
    errs = np.empty(xs.size)
    for i, (x, g) in enumerate(zip(xs.tolist(), got.tolist(), strict=True)):
        exact = REFERENCE[name](mpmath.mpf(x))
        rounded = float(exact)
        if math.isinf(rounded):  # the exact value overflows: the result must too
            errs[i] = 0.0 if g == rounded else math.inf
            continue
        unit = max(math.ulp(rounded), 5e-324)
        errs[i] = float(abs(mpmath.mpf(g) - exact) / unit)
    return errs


def _wide_samples(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if name == "exp":
        return np.concatenate(
            [rng.uniform(-745.13, 709.78, n), rng.uniform(-745.13, -708.0, n // 4), rng.uniform(-1, 1, n // 4)]
        )
    if name == "log":  # log-uniform over every exponent, subnormals included, and near 1
        return np.concatenate(
            [2.0 ** rng.uniform(-1074, 1024, n), 1 + rng.uniform(-0.3, 0.4, n // 4), rng.uniform(0, 1e-310, n // 8)]
        )
    if name in ("sin", "cos"):
        mag = 2.0 ** rng.uniform(-30, 20, n)
        large = 2.0 ** rng.uniform(20, 1000, n // 8)  # beyond the vector reduction: the C library
        return np.concatenate([mag * rng.choice([-1, 1], n), rng.uniform(-10, 10, n // 2), large])
    if name == "tanh":
        return np.concatenate(
            [rng.uniform(-25, 25, n), 2.0 ** rng.uniform(-60, 2, n // 2) * rng.choice([-1, 1], n // 2)]
        )
    return np.concatenate([rng.uniform(-50, 50, n), rng.uniform(-800, 800, n // 4)])


@pytest.mark.parametrize("name", list(BOUND_ULP))
def test_max_error_in_ulp_over_wide_ranges(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    xs = _wide_samples(name, rng, 3000)
    errs = ulp_errors(name, xs, vm_apply(name, xs))
    worst = int(np.argmax(errs))
    assert errs[worst] <= BOUND_ULP[name], f"{name}({xs[worst]!r}): {errs[worst]:.3f} ulp"


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_trig_near_multiples_of_half_pi(name):
    """The nearest doubles to k pi/2 (the zeros of sin or cos among them): the reduction's three-part
    pi/2 keeps these within the bound for |x| <= 2^20."""
    ks = np.concatenate([np.arange(1, 2000), np.random.default_rng(5).integers(2000, 667_000, 1500)])
    xs = np.array([float(k * mpmath.pi / 2) for k in ks.tolist()])
    xs = np.concatenate([xs, np.nextafter(xs, np.inf), np.nextafter(xs, -np.inf)])
    errs = ulp_errors(name, xs, vm_apply(name, xs))
    worst = int(np.argmax(errs))
    assert errs[worst] <= BOUND_ULP[name], f"{name}({xs[worst]!r}): {errs[worst]:.3f} ulp"


INF, NAN = math.inf, math.nan
SPECIAL = {
    "exp": [
        (0.0, 1.0),
        (-0.0, 1.0),
        (INF, INF),
        (-INF, 0.0),
        (NAN, NAN),
        (709.782712893384, 1.7976931348622732e308),  # the largest argument with a finite result
        (709.7827128933841, INF),
        (710.0, INF),
        (-745.1332191019411, 5e-324),  # the smallest subnormal
        (-745.14, 0.0),
        (-1e4, 0.0),
        (5e-324, 1.0),
    ],
    "log": [
        (0.0, -INF),
        (-0.0, -INF),
        (-1.0, NAN),
        (-INF, NAN),
        (INF, INF),
        (NAN, NAN),
        (1.0, 0.0),
        (5e-324, -744.4400719213812),
        (1.7976931348623157e308, 709.782712893384),
    ],
    "sin": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (INF, NAN), (-INF, NAN), (NAN, NAN)],
    "cos": [(0.0, 1.0), (-0.0, 1.0), (5e-324, 1.0), (INF, NAN), (-INF, NAN), (NAN, NAN)],
    "tanh": [
        (0.0, 0.0),
        (-0.0, -0.0),
        (5e-324, 5e-324),
        (22.0, 1.0),
        (-40.0, -1.0),
        (INF, 1.0),
        (-INF, -1.0),
        (NAN, NAN),
    ],
    "sigmoid": [(0.0, 0.5), (INF, 1.0), (-INF, 0.0), (-800.0, 0.0), (800.0, 1.0), (NAN, NAN)],
    "softplus": [(-INF, 0.0), (INF, INF), (0.0, math.log(2.0)), (-800.0, 0.0), (800.0, 800.0), (NAN, NAN)],
}


@pytest.mark.parametrize("name", list(SPECIAL))
def test_special_values(name):
    xs = np.array([x for x, _ in SPECIAL[name]])
    got = vm_apply(name, xs)
    for x, want, g in zip(xs.tolist(), [w for _, w in SPECIAL[name]], got.tolist(), strict=True):
        if math.isnan(want):
            assert math.isnan(g), f"{name}({x!r}) = {g!r}, want NaN"
        else:
            assert g == want and math.copysign(1.0, g) == math.copysign(1.0, want), (
                f"{name}({x!r}) = {g!r}, want {want!r}"
            )
