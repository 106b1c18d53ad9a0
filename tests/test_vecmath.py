"""Accuracy of NDVM's vector math (native/src/vecmath.h: exp, log, sin, cos, tan, asin, acos, atan,
tanh, sigmoid, softplus, and the binary expt and two-argument atan) against mpmath at 200 bits,
through the VM's own elementwise kernels (a program over data vectors).

The error of each result is measured in units in the last place of the correctly rounded double
(ulp; for subnormal results, 2^-1074) and asserted against the bounds documented in the README
("Vector math"): exp, log, sin, cos, tan, asin, acos, atan, atan2 and expt within 1 ulp, tanh,
sigmoid and softplus within 2 ulp, over
wide ranges (exp over its whole finite range, subnormal results included; log from the smallest
subnormal to the largest double; sin and cos to |x| = 2^20 through the vector reduction and
beyond through the C library; nearest doubles to multiples of pi/2; expt with y log x over exp's
whole range, integer and half-integer exponents, bases near 1 with huge exponents). Special values
(+-0, +-inf, NaN, overflow and underflow thresholds; for expt every case of C99 Annex F's pow) must be
exactly what C99 Annex F gives.
"""

import math

import numpy as np
import pytest

import ndvm

mpmath = pytest.importorskip("mpmath", reason="mpmath (a dependency of sympy/torch) gives the reference values")
mpmath.mp.prec = 200

BOUND_ULP = {
    "exp": 1.0,
    "log": 1.0,
    "sin": 1.0,
    "cos": 1.0,
    "tan": 1.0,
    "asin": 1.0,
    "acos": 1.0,
    "atan": 1.0,
    "tanh": 2.0,
    "sigmoid": 2.0,
    "softplus": 2.0,
}
BINARY_BOUND_ULP = {"expt": 1.0, "atan2": 1.0}

REFERENCE = {
    "exp": mpmath.exp,
    "log": mpmath.log,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tan": mpmath.tan,
    "asin": mpmath.asin,
    "acos": mpmath.acos,
    "atan": mpmath.atan,
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


# The binary ops: the source form and the mpmath reference. (atan y x) is atan2(y, x).
BINARY = {
    "expt": ("(expt x y)", lambda x, y: mpmath.power(x, y)),
    "atan2": ("(atan x y)", lambda x, y: mpmath.atan2(x, y)),
}


def vm_apply2(name: str, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """A binary op applied elementwise by the VM's kernels (two data vectors, one lane)."""
    if name not in _programs:
        _programs[name] = ndvm.compile(BINARY[name][0])
    inputs = {"x": np.ascontiguousarray(xs, dtype=np.float64), "y": np.ascontiguousarray(ys, dtype=np.float64)}
    return np.asarray(_programs[name].evaluate(np.zeros((1, 0)), inputs))[0]


def ulp_errors(name: str, xs: np.ndarray, got: np.ndarray, ys: np.ndarray | None = None) -> np.ndarray:
    errs = np.empty(xs.size)
    for i, (x, g) in enumerate(zip(xs.tolist(), got.tolist(), strict=True)):
        if ys is None:
            exact = REFERENCE[name](mpmath.mpf(x))
        else:
            exact = BINARY[name][1](mpmath.mpf(x), mpmath.mpf(float(ys[i])))
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
    if name == "tan":  # near the poles too: the quotient of two reduced values
        poles = np.array([float((k + 0.5) * mpmath.pi) for k in range(-40, 40)])
        return np.concatenate(
            [
                2.0 ** rng.uniform(-30, 20, n) * rng.choice([-1, 1], n),
                rng.uniform(-10, 10, n // 2),
                np.concatenate([poles, np.nextafter(poles, np.inf), np.nextafter(poles, -np.inf)]),
                2.0 ** rng.uniform(20, 1000, n // 8),  # beyond the vector reduction: the C library
            ]
        )
    if name == "atan":
        return np.concatenate(
            [
                rng.uniform(-3, 3, n),
                2.0 ** rng.uniform(-1074, 1023, n) * rng.choice([-1, 1], n),
                rng.uniform(0.1, 1.3, n),
            ]
        )
    if name in ("asin", "acos"):  # near +-1 (where 1 - x^2 cancels), near 0, subnormals
        near_one = 1.0 - 2.0 ** rng.uniform(-53, -1, n)
        return np.concatenate(
            [
                rng.uniform(-1, 1, n),
                near_one * rng.choice([-1, 1], n),
                2.0 ** rng.uniform(-1074, -1, n) * rng.choice([-1, 1], n),
            ]
        )
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


def _binary_samples(name: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    if name == "expt":
        # bases over 120 binades with y log x spread over exp's whole range (overflow and subnormal
        # results included), bases near 1 with exponents up to 1e8 (where log x must be exact to
        # far below an ulp), negative bases with integer exponents, the exponents of LLM-written
        # laws (integers and halves) on data-like bases
        x1 = 2.0 ** rng.uniform(-60, 60, n)
        y1 = rng.uniform(-760, 720, n) / np.log(x1)
        x2 = 1 + rng.uniform(-1e-6, 1e-6, n)
        y2 = rng.uniform(-1e8, 1e8, n)
        x3 = -(2.0 ** rng.uniform(-20, 20, n))
        y3 = rng.integers(-40, 40, n).astype(float)
        x4 = rng.uniform(0, 1000, n)
        y4 = rng.choice([0.5, 1.5, 2.0, 3.0, -0.5, -1.0, -2.0, 2.5, 0.25], n)
        x5 = 2.0 ** rng.uniform(-1074, 1023, n)
        y5 = rng.uniform(-1.2, 1.2, n)
        return np.concatenate([x1, x2, x3, x4, x5]), np.concatenate([y1, y2, y3, y4, y5])
    # atan2: every quadrant, magnitudes far apart (the ratio's exponent over 2,000 binades)
    sign = lambda: rng.choice([-1.0, 1.0], n)  # noqa: E731
    ys = np.concatenate([rng.uniform(-5, 5, n), sign() * 2.0 ** rng.uniform(-1000, 1000, n)])
    xs = np.concatenate([rng.uniform(-5, 5, n), sign() * 2.0 ** rng.uniform(-1000, 1000, n)])
    return ys, xs


@pytest.mark.parametrize("name", list(BINARY_BOUND_ULP))
def test_binary_max_error_in_ulp_over_wide_ranges(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    xs, ys = _binary_samples(name, rng, 1500)
    errs = ulp_errors(name, xs, vm_apply2(name, xs, ys), ys)
    worst = int(np.argmax(errs))
    assert errs[worst] <= BINARY_BOUND_ULP[name], f"{name}({xs[worst]!r}, {ys[worst]!r}): {errs[worst]:.3f} ulp"


def test_expt_exact_results_are_exact():
    """Powers whose value is a double come out exactly (the error before the last rounding is far
    below half an ulp): squares, cubes, square roots of squares, powers of two."""
    cases = [(2.0, 10.0, 1024.0), (3.0, 2.0, 9.0), (10.0, 3.0, 1000.0), (4.0, 0.5, 2.0), (0.25, 0.5, 0.5)]
    cases += [(2.0, -3.0, 0.125), (1.5, 2.0, 2.25), (9.0, 1.5, 27.0), (2.0, 1023.0, 2.0**1023), (2.0, -1074.0, 5e-324)]
    cases += [(7.0, 1.0, 7.0), (-3.0, 3.0, -27.0), (-2.0, -1.0, -0.5), (12345.0, 2.0, 152399025.0)]
    got = vm_apply2("expt", np.array([c[0] for c in cases]), np.array([c[1] for c in cases]))
    for (x, y, want), g in zip(cases, got.tolist(), strict=True):
        assert g == want, f"(expt {x!r} {y!r}) = {g!r}, want {want!r}"


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
    "tan": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (-5e-324, -5e-324), (INF, NAN), (-INF, NAN), (NAN, NAN)],
    "atan": [
        (0.0, 0.0),
        (-0.0, -0.0),
        (5e-324, 5e-324),
        (INF, math.pi / 2),
        (-INF, -math.pi / 2),
        (1.7976931348623157e308, math.pi / 2),
        (1.0, math.pi / 4),
        (NAN, NAN),
    ],
    "asin": [
        (0.0, 0.0),
        (-0.0, -0.0),
        (5e-324, 5e-324),
        (1.0, math.pi / 2),
        (-1.0, -math.pi / 2),
        (1.0000000000000002, NAN),
        (-2.0, NAN),
        (INF, NAN),
        (NAN, NAN),
    ],
    "acos": [
        (1.0, 0.0),
        (-1.0, math.pi),
        (0.0, math.pi / 2),
        (-0.0, math.pi / 2),
        (1.0000000000000002, NAN),
        (-INF, NAN),
        (NAN, NAN),
    ],
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


# C99 Annex F (F.10.4.4) pow, case by case, then its overflow and underflow: (x, y, expected).
EXPT_SPECIAL = [
    (2.0, 0.0, 1.0),  # pow(x, +-0) = 1 for any x, even a NaN
    (NAN, -0.0, 1.0),
    (-INF, 0.0, 1.0),
    (1.0, NAN, 1.0),  # pow(+1, y) = 1 for any y, even a NaN
    (1.0, -INF, 1.0),
    (0.0, -3.0, INF),  # pow(+-0, y) for y an odd integer < 0: +-inf
    (-0.0, -3.0, -INF),
    (0.0, -2.0, INF),  # y < 0, finite, not an odd integer: +inf
    (-0.0, -2.0, INF),
    (-0.0, -0.5, INF),
    (0.0, -INF, INF),  # pow(+-0, -inf) = +inf
    (-0.0, -INF, INF),
    (0.0, 3.0, 0.0),  # y an odd integer > 0: +-0
    (-0.0, 3.0, -0.0),
    (-0.0, 2.0, 0.0),  # y > 0, not an odd integer: +0
    (-0.0, 0.5, 0.0),
    (-0.0, INF, 0.0),
    (-1.0, INF, 1.0),  # pow(-1, +-inf) = 1
    (-1.0, -INF, 1.0),
    (0.5, -INF, INF),  # |x| < 1: pow(x, -inf) = +inf, pow(x, +inf) = +0
    (-0.5, -INF, INF),
    (0.5, INF, 0.0),
    (2.0, -INF, 0.0),  # |x| > 1: pow(x, -inf) = +0, pow(x, +inf) = +inf
    (-2.0, INF, INF),
    (-INF, -3.0, -0.0),  # pow(-inf, y): y odd integer < 0: -0; other y < 0: +0
    (-INF, -2.0, 0.0),
    (-INF, -0.5, 0.0),
    (-INF, 3.0, -INF),  # y odd integer > 0: -inf; other y > 0: +inf
    (-INF, 2.0, INF),
    (-INF, 0.5, INF),
    (INF, -1.0, 0.0),  # pow(+inf, y < 0) = +0, pow(+inf, y > 0) = +inf
    (INF, 0.5, INF),
    (-2.0, 0.5, NAN),  # x < 0 finite, y finite non-integer: NaN
    (-8.0, 1.0 / 3.0, NAN),
    (-2.0, 3.0, -8.0),  # x < 0, integer y: the sign of an odd power
    (-2.0, 2.0, 4.0),
    (-1.0, 2.0**53 + 2, 1.0),  # every |y| >= 2^53 is an even integer
    (-1.0, 2.0**52 + 1, -1.0),  # an odd integer between 2^52 and 2^53
    (NAN, 1.0, NAN),  # otherwise a NaN operand gives NaN
    (2.0, NAN, NAN),
    (-1.0, NAN, NAN),
    (0.0, NAN, NAN),
    (2.0, 1023.9999999999999, 1.7976931348621742e308),  # near the largest double, then overflow
    (1.9999999999999998, 1024.0, 1.7976931348621115e308),
    (10.0, 309.0, INF),
    (-10.0, 309.0, -INF),
    (2.0, 1024.0, INF),
    (2.0, -1074.0, 5e-324),  # the smallest subnormal, then underflow to zero
    (2.0, -1075.5, 0.0),
    (-2.0, -1077.0, -0.0),
    (1e300, 1e300, INF),  # |y| beyond 2^64
    (0.999, 1e300, 0.0),
    (1.0000000000000002, 1e300, INF),
]


def test_expt_special_values_as_c99_annex_f():
    xs = np.array([c[0] for c in EXPT_SPECIAL])
    ys = np.array([c[1] for c in EXPT_SPECIAL])
    got = vm_apply2("expt", xs, ys)
    for (x, y, want), g in zip(EXPT_SPECIAL, got.tolist(), strict=True):
        if math.isnan(want):
            assert math.isnan(g), f"(expt {x!r} {y!r}) = {g!r}, want NaN"
        else:
            assert g == want and math.copysign(1.0, g) == math.copysign(1.0, want), (
                f"(expt {x!r} {y!r}) = {g!r}, want {want!r}"
            )


# C99 Annex F (F.10.1.4) atan2(y, x), case by case: (y, x, expected).
ATAN2_SPECIAL = [
    (0.0, -0.0, math.pi),
    (-0.0, -0.0, -math.pi),
    (0.0, 0.0, 0.0),
    (-0.0, 0.0, -0.0),
    (0.0, -1.0, math.pi),
    (-0.0, -1.0, -math.pi),
    (0.0, 1.0, 0.0),
    (-0.0, 1.0, -0.0),
    (-1.0, 0.0, -math.pi / 2),
    (-1.0, -0.0, -math.pi / 2),
    (1.0, 0.0, math.pi / 2),
    (1.0, -0.0, math.pi / 2),
    (1.0, -INF, math.pi),
    (-1.0, -INF, -math.pi),
    (1.0, INF, 0.0),
    (-1.0, INF, -0.0),
    (INF, 1.0, math.pi / 2),
    (-INF, -1.0, -math.pi / 2),
    (INF, -INF, 3 * math.pi / 4),
    (-INF, -INF, -3 * math.pi / 4),
    (INF, INF, math.pi / 4),
    (-INF, INF, -math.pi / 4),
    (NAN, 1.0, NAN),
    (1.0, NAN, NAN),
    (1.7976931348623157e308, 1.7976931348623157e308, math.pi / 4),  # scaled, no overflow
    (5e-324, 5e-324, math.pi / 4),
    (-5e-324, -1.0, -math.pi),
]


def test_atan2_special_values_as_c99_annex_f():
    ys = np.array([c[0] for c in ATAN2_SPECIAL])
    xs = np.array([c[1] for c in ATAN2_SPECIAL])
    got = vm_apply2("atan2", ys, xs)
    for (y, x, want), g in zip(ATAN2_SPECIAL, got.tolist(), strict=True):
        if math.isnan(want):
            assert math.isnan(g), f"(atan {y!r} {x!r}) = {g!r}, want NaN"
        else:
            assert g == want and math.copysign(1.0, g) == math.copysign(1.0, want), (
                f"(atan {y!r} {x!r}) = {g!r}, want {want!r}"
            )
