"""Gradients of NDVM programs against central finite differences, against torch autograd, and across lanes.

The programs are in tests/gradprogs/cases.py (scalar-valued, with declared parameters: closures,
recursion, named let / loop / do, lists with map and apply, vector inputs, matrices, and divergent
control flow where the 16 lanes of one evaluation take different branches).

For each program and 16 lane points:
- `value_and_grad` agrees with a 5-point central difference of `evaluate` (float64; relative 1e-6
  with an absolute floor of 1e-9 times the scale of the value and gradient of that lane);
- every lane of the 16-lane run equals a 1-lane run of that lane alone, bit for bit, and `evaluate`
  gives the same bits as `value_and_grad`, and a repeat gives the same bits again;
- where the model is also written in torch (float64), NDVM's value and gradient equal torch's to a
  relative 1e-10.
The torch twins are themselves checked against finite differences, so a wrong twin cannot hide.
"""

from __future__ import annotations

import importlib.util
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import ndvm

_spec = importlib.util.spec_from_file_location("ndvm_gradcases", Path(__file__).parent / "gradprogs" / "cases.py")
cases_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cases_module  # dataclasses need the module registered while it executes
_spec.loader.exec_module(cases_module)
CASES = cases_module.CASES
LANES = cases_module.LANES

FD_STEP = 1e-3  # relative step of the 5-point stencil: truncation ~h^4, round-off ~eps/h, both << 1e-6
FD_RTOL = 1e-6
FD_ATOL_SCALE = 1e-9
TORCH_RTOL = 1e-10
TORCH_ATOL_SCALE = 1e-12

_programs: dict[str, object] = {}


def program(case):
    if case.name not in _programs:
        _programs[case.name] = ndvm.compile(case.source)
    return _programs[case.name]


def lane_points(case) -> np.ndarray:
    """The [16, P] parameter points of the lanes (explicit ones, or a seeded spread around the base point)."""
    if case.lanes is not None:
        return np.array(case.lanes, dtype=np.float64)
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    point = np.array(case.point, dtype=np.float64)
    return point + case.spread * rng.uniform(-1.0, 1.0, size=(LANES, point.size))


def lane_inputs_for(case, rows: slice | None = None, repeat: int = 1):
    """The case's per-lane inputs, optionally one slice of lanes, optionally repeated `repeat` times along lanes."""
    if not case.lane_inputs:
        return None
    out = {}
    for name, values in case.lane_inputs.items():
        values = np.asarray(values, dtype=np.float64)
        if rows is not None:
            values = values[rows]
        out[name] = np.concatenate([values] * repeat, axis=0) if repeat > 1 else values
    return out


def inputs_for(case):
    return dict(case.inputs) if case.inputs else None


def central_differences(evaluate, theta: np.ndarray) -> np.ndarray:
    """5-point central differences of all lanes at once: evaluate(thetas [4*P*B, P], repeat) -> values."""
    lanes, n_params = theta.shape
    h = FD_STEP * np.maximum(1.0, np.abs(theta))
    blocks = []
    for j in range(n_params):
        for factor in (1.0, -1.0, 2.0, -2.0):
            shifted = theta.copy()
            shifted[:, j] += factor * h[:, j]
            blocks.append(shifted)
    values = np.asarray(evaluate(np.concatenate(blocks, axis=0), len(blocks)), dtype=np.float64)
    values = values.reshape(n_params, 4, lanes)
    fd = (8.0 * (values[:, 0] - values[:, 1]) - (values[:, 2] - values[:, 3])) / (12.0 * h.T)
    return fd.T  # [B, P]


def assert_close_to_fd(name, theta, values, grads, fd):
    scale = np.maximum(1.0, np.maximum(np.abs(values), np.abs(fd).max(axis=1)))[:, None]
    tol = FD_RTOL * np.abs(fd) + FD_ATOL_SCALE * scale
    bad = np.argwhere(~(np.abs(grads - fd) <= tol))
    if bad.size:
        lane, j = bad[0]
        raise AssertionError(
            f"{name}: {len(bad)} gradient entries disagree with finite differences; first: lane {lane} "
            f"theta={theta[lane].tolist()} param {j}: grad={grads[lane, j]!r} fd={fd[lane, j]!r} "
            f"(|diff|={abs(grads[lane, j] - fd[lane, j]):.3e}, tol={tol[lane, j]:.3e})"
        )


def test_suite_size_and_coverage():
    assert len(CASES) >= 110
    assert len({c.name for c in CASES}) == len(CASES)
    assert sum(c.torch_fn is not None for c in CASES) >= 60
    assert sum(c.lanes is not None for c in CASES) >= 15  # divergent control flow across lanes
    for prefix in ("closure", "recursion", "list", "vec", "mat", "diverge"):
        assert sum(c.name.startswith(prefix) for c in CASES) >= 8, prefix


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_finite_differences(case):
    prog = program(case)
    theta = lane_points(case)
    assert len(prog.param_names) == theta.shape[1], f"declared params {prog.param_names}"
    values, grads = prog.value_and_grad(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case))
    values, grads = np.asarray(values), np.asarray(grads)
    assert values.shape == (LANES,) and grads.shape == theta.shape
    assert np.all(np.isfinite(values)) and np.all(np.isfinite(grads))

    def evaluate(thetas, repeat):
        return prog.evaluate(thetas, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case, repeat=repeat))

    assert_close_to_fd(case.name, theta, values, grads, central_differences(evaluate, theta))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lanes_equal_single_lane_runs_bit_for_bit(case):
    prog = program(case)
    theta = lane_points(case)
    values, grads = prog.value_and_grad(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case))
    again_values, again_grads = prog.value_and_grad(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case))
    assert np.array_equal(values, again_values) and np.array_equal(grads, again_grads), "not deterministic"
    forward = np.asarray(prog.evaluate(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case)))
    assert np.array_equal(forward, values), f"evaluate {forward} != value_and_grad values {values}"
    for lane in range(LANES):
        one_values, one_grads = prog.value_and_grad(
            theta[lane : lane + 1], inputs=inputs_for(case), lane_inputs=lane_inputs_for(case, slice(lane, lane + 1))
        )
        assert np.array_equal(np.asarray(one_values)[0], values[lane]), (
            f"lane {lane} theta={theta[lane].tolist()}: alone {one_values[0]!r}, in batch {values[lane]!r}"
        )
        assert np.array_equal(np.asarray(one_grads)[0], grads[lane]), (
            f"lane {lane} theta={theta[lane].tolist()}: alone {one_grads[0]!r}, in batch {grads[lane]!r}"
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_odd_lane_count_equals_single_lane_runs(case):
    """37 lanes (not a multiple of any vector width), spread wider than the FD points: every lane
    equals its own one-lane run bit for bit. Kinks do not matter here, only lane independence."""
    if case.lane_inputs:
        pytest.skip("per-lane inputs are fixed at 16 lanes")
    theta16 = lane_points(case)
    rng = np.random.default_rng(zlib.crc32(case.name.encode()) + 37)
    lo, hi = theta16.min(axis=0), theta16.max(axis=0)
    theta = lo + (hi - lo) * rng.uniform(size=(37, theta16.shape[1]))
    values, grads = program(case).value_and_grad(theta, inputs=inputs_for(case))
    for lane in range(theta.shape[0]):
        one_values, one_grads = program(case).value_and_grad(theta[lane : lane + 1], inputs=inputs_for(case))
        assert np.array_equal(one_values[0], values[lane], equal_nan=True) and np.array_equal(
            one_grads[0], grads[lane], equal_nan=True
        ), (
            f"lane {lane} theta={theta[lane].tolist()}: alone {one_values[0]!r} {one_grads[0].tolist()}, "
            f"in batch {values[lane]!r} {grads[lane].tolist()}"
        )


def torch_value_and_grad(case, theta: np.ndarray):
    """Value and autograd gradient of the torch twin, lane by lane."""
    values, grads = np.empty(theta.shape[0]), np.empty_like(theta)
    for lane in range(theta.shape[0]):
        t = torch.tensor(theta[lane], dtype=torch.float64, requires_grad=True)
        feeds = {k: torch.as_tensor(np.asarray(v, dtype=np.float64)) for k, v in case.inputs.items()}
        feeds.update({k: torch.as_tensor(np.asarray(v, dtype=np.float64)[lane]) for k, v in case.lane_inputs.items()})
        y = case.torch_fn(t, feeds)
        y = y if torch.is_tensor(y) else torch.as_tensor(y, dtype=torch.float64)
        (g,) = torch.autograd.grad(y, t, allow_unused=True)
        values[lane] = float(y.detach())
        grads[lane] = 0.0 if g is None else g.detach().numpy()
    return values, grads


TORCH_CASES = [c for c in CASES if c.torch_fn is not None]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.name for c in TORCH_CASES])
def test_torch_twin_matches_finite_differences(case):
    """The torch reference itself is right (runs without the runtime)."""
    theta = lane_points(case)
    values, grads = torch_value_and_grad(case, theta)

    def evaluate(thetas, repeat):
        big = type(case)(**{**case.__dict__, "lane_inputs": lane_inputs_for(case, repeat=repeat) or {}})
        return torch_value_and_grad(big, thetas)[0]

    assert_close_to_fd(case.name + " (torch twin)", theta, values, grads, central_differences(evaluate, theta))


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.name for c in TORCH_CASES])
def test_gradient_matches_torch_autograd(case):
    prog = program(case)
    theta = lane_points(case)
    values, grads = prog.value_and_grad(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case))
    t_values, t_grads = torch_value_and_grad(case, theta)
    scale = np.maximum(1.0, np.abs(t_values))
    assert np.all(np.abs(values - t_values) <= TORCH_RTOL * np.abs(t_values) + TORCH_ATOL_SCALE * scale), (
        f"{case.name}: values NDVM {values} torch {t_values}"
    )
    gscale = np.maximum(scale, np.abs(t_grads).max(axis=1))[:, None]
    ok = np.abs(grads - t_grads) <= TORCH_RTOL * np.abs(t_grads) + TORCH_ATOL_SCALE * gscale
    bad = np.argwhere(~ok)
    assert not bad.size, (
        f"{case.name}: lane {bad[0][0]} theta={theta[bad[0][0]].tolist()} grad NDVM "
        f"{grads[bad[0][0]].tolist()} torch {t_grads[bad[0][0]].tolist()}"
    )


# ------------------------------------------------------------------------------------------------
# Through the torch boundary: ndvm.torch.apply inside a torch graph, vector outputs, input gradients.

VECTOR_MODELS = [
    ("linear", "(param a 1.0) (param b 0.0) (+ (* a x) b)", lambda t, x: t[0] * x + t[1]),
    ("exp-decay", "(param A 1.5) (param k 0.5) (* A (exp (* (- k) x)))", lambda t, x: t[0] * torch.exp(-t[1] * x)),
    (
        "logistic-curve",
        "(param K 2.0) (param r 1.1) (param t0 0.3) (/ K (+ 1 (exp (* (- r) (- x t0)))))",
        lambda t, x: t[0] / (1 + torch.exp(-t[1] * (x - t[2]))),
    ),
    (
        "quadratic",
        "(param a 0.1) (param b -0.4) (param c 0.25) (+ a (* b x) (* c (square x)))",
        lambda t, x: t[0] + t[1] * x + t[2] * x**2,
    ),
    (
        "divergent-vector",
        "(param a 0.5) (param b 0.2) (if (> a 0) (* a (sin (* b x))) (square (- x a)))",
        lambda t, x: t[0] * torch.sin(t[1] * x) if t[0] > 0 else (x - t[0]) ** 2,
    ),
    (
        "scalar-output",
        "(param a 0.5) (param b 0.2) (vsum (square (- x (* a (exp (* b x))))))",
        lambda t, x: torch.sum((x - t[0] * torch.exp(t[1] * x)) ** 2),
    ),
]


@pytest.mark.parametrize("name,source,twin", VECTOR_MODELS, ids=[m[0] for m in VECTOR_MODELS])
def test_torch_boundary_matches_torch_twin(name, source, twin):
    import ndvm.torch as ndvm_torch

    prog = ndvm.compile(source)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    n_params = len(prog.param_names)
    theta0 = np.array([p.init for p in prog.params]) + 0.3 * rng.uniform(-1, 1, size=(5, n_params))
    theta0[:, 0] = [0.8, -0.6, 0.4, -0.3, 1.2] if name == "divergent-vector" else theta0[:, 0]
    x0 = np.linspace(-1.0, 2.0, 7)

    theta = torch.tensor(theta0, requires_grad=True)
    x = torch.tensor(x0, requires_grad=True)
    out = ndvm_torch.apply(prog, theta, {"x": x})
    weights = torch.tensor(rng.normal(size=tuple(out.shape)))
    (weights * out).sum().backward()

    ref_theta = torch.tensor(theta0, requires_grad=True)
    ref_x = torch.tensor(x0, requires_grad=True)
    ref_out = torch.stack([twin(ref_theta[i], ref_x) for i in range(5)])
    (weights * ref_out.reshape(out.shape)).sum().backward()

    np.testing.assert_allclose(
        out.detach().numpy(), ref_out.detach().numpy().reshape(out.shape), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(theta.grad.numpy(), ref_theta.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), ref_x.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_torch_boundary_gradcheck():
    import ndvm.torch as ndvm_torch

    prog = ndvm.compile("(param a 0.5) (param k 0.7) (* a (exp (* (- k) x)) (+ 1 (square x)))")
    theta = torch.tensor([[0.5, 0.7], [1.1, 0.2], [-0.4, 1.3]], dtype=torch.float64, requires_grad=True)
    x = torch.linspace(0.0, 2.0, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda th, xx: ndvm_torch.apply(prog, th, {"x": xx}), (theta, x), eps=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("name,source,twin", VECTOR_MODELS, ids=[m[0] for m in VECTOR_MODELS])
def test_vector_outputs_equal_single_lane_runs(name, source, twin):
    """evaluate() of a vector-valued program at 16 lanes (mixed signs, so some programs diverge)
    equals 16 one-lane evaluations bit for bit, and the twin to 1e-12."""
    prog = ndvm.compile(source)
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 16)
    theta = np.array([p.init for p in prog.params]) + rng.uniform(-1.0, 1.0, size=(16, len(prog.params)))
    x = np.linspace(-1.0, 2.0, 9)
    out = np.asarray(prog.evaluate(theta, inputs={"x": x}))
    assert out.shape[0] == 16
    for lane in range(16):
        alone = np.asarray(prog.evaluate(theta[lane : lane + 1], inputs={"x": x}))
        assert np.array_equal(alone[0], out[lane]), f"lane {lane}: alone {alone[0]}, in batch {out[lane]}"
        ref = twin(torch.tensor(theta[lane]), torch.tensor(x)).detach().numpy()
        np.testing.assert_allclose(out[lane], np.broadcast_to(ref, out[lane].shape), rtol=1e-12, atol=1e-12)


def test_torch_boundary_matrix_input_gradient_kalman():
    """Gradients through ndvm.torch.apply into theta and into a matrix input (the Kalman series)."""
    import ndvm.torch as ndvm_torch

    case = next(c for c in CASES if c.name == "mat-kalman-benchmark")
    prog = program(case)
    theta0 = np.array([[0.3, 0.3], [0.5, 0.2], [0.25, 0.6]])
    ys0 = case.inputs["ys"]
    theta = torch.tensor(theta0, requires_grad=True)
    ys = torch.tensor(ys0, requires_grad=True)
    out = ndvm_torch.apply(prog, theta, {"ys": ys})
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    (weights * out.reshape(-1)).sum().backward()

    ref_theta = torch.tensor(theta0, requires_grad=True)
    ref_ys = torch.tensor(ys0, requires_grad=True)
    ref = torch.stack([cases_module.kalman_torch(ref_theta[i, 0], ref_theta[i, 1], ref_ys) for i in range(3)])
    (weights * ref).sum().backward()
    np.testing.assert_allclose(out.detach().numpy().reshape(-1), ref.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(theta.grad.numpy(), ref_theta.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ys.grad.numpy(), ref_ys.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_many_divergent_lanes_each_take_their_own_path():
    """200 lanes, nearly each with its own loop length: batch == one-lane runs bit for bit, == the twin."""
    prog = ndvm.compile(
        "(param a 0.5) (param b 0.1)\n"
        "(let loop ((x a) (n 0)) (if (> x 10.0) (+ n (* x b)) (loop (+ x (* a 0.37) b) (+ n 1))))"
    )
    theta = np.stack([np.linspace(0.05, 3.0, 200), np.linspace(0.02, 0.3, 200)[::-1]], axis=1)
    values, grads = prog.value_and_grad(theta)
    for lane in range(theta.shape[0]):
        one_values, one_grads = prog.value_and_grad(theta[lane : lane + 1])
        assert np.array_equal(one_values[0], values[lane]) and np.array_equal(one_grads[0], grads[lane]), lane
        t = torch.tensor(theta[lane], requires_grad=True)
        x, n = t[0], 0
        while not x > 10.0:
            x, n = x + t[0] * 0.37 + t[1], n + 1
        y = n + x * t[1]
        (g,) = torch.autograd.grad(y, t)
        np.testing.assert_allclose(values[lane], float(y.detach()), rtol=1e-12)
        np.testing.assert_allclose(grads[lane], g.numpy(), rtol=1e-10, atol=1e-12)


def test_one_program_shared_by_threads_gives_serial_bits():
    """A Program is shareable across threads: concurrent value_and_grad calls give the serial bits."""
    import threading

    names = ["mat-kalman-benchmark", "diverge-recursion-depth", "vec-lane-input", "list-sort-by-param"]
    jobs = []
    for name in names:
        case = next(c for c in CASES if c.name == name)
        theta = lane_points(case)
        serial = program(case).value_and_grad(theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case))
        jobs.append((case, theta, serial))
    failures = []

    def work(case, theta, serial):
        for _ in range(20):
            values, grads = program(case).value_and_grad(
                theta, inputs=inputs_for(case), lane_inputs=lane_inputs_for(case)
            )
            if not (np.array_equal(values, serial[0]) and np.array_equal(grads, serial[1])):
                failures.append(case.name)
                return

    threads = [threading.Thread(target=work, args=job) for job in jobs * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def test_float32_programs_lanes_and_accuracy():
    """dtype="float32": every lane equals its one-lane run bit for bit, and values and gradients stay
    within float32 accuracy of the float64 run (relative 2e-3 of the lane's scale)."""
    mismatched, inaccurate = [], []
    for case in CASES:
        if case.lane_inputs or case.name in ("deep-recursion-gradient", "tail-loop-long"):
            continue  # long float32 accumulations drift by design; lane equality is covered elsewhere
        theta = lane_points(case)
        prog32 = ndvm.compile(case.source, dtype="float32")
        values, grads = prog32.value_and_grad(theta, inputs=inputs_for(case))
        for lane in (0, 7, 15):
            one_values, one_grads = prog32.value_and_grad(theta[lane : lane + 1], inputs=inputs_for(case))
            if not (np.array_equal(one_values[0], values[lane]) and np.array_equal(one_grads[0], grads[lane])):
                mismatched.append(case.name)
                break
        values64, grads64 = program(case).value_and_grad(theta, inputs=inputs_for(case))
        scale = np.maximum(1.0, np.maximum(np.abs(values64), np.abs(grads64).max(axis=1)))
        if (np.abs(values - values64) > 2e-3 * scale).any() or (np.abs(grads - grads64) > 2e-3 * scale[:, None]).any():
            inaccurate.append(case.name)
    assert not mismatched, f"float32 lanes differ from one-lane runs: {mismatched}"
    assert not inaccurate, f"float32 far from float64: {inaccurate}"


def test_non_finite_lanes_do_not_leak_into_other_lanes():
    """A NaN or infinite parameter in one lane leaves every other lane's bits untouched."""
    prog = ndvm.compile(
        "(param a 0.5) (param b 1.0)\n"
        "(let loop ((i 0) (s 0.0)) (if (= i 5) (if (> s 1.0) (* s b) (- s)) (loop (+ i 1) (+ s (* a i)))))"
    )
    theta = np.array([[0.5, 1.0], [np.nan, 1.0], [1.5, np.inf], [-0.3, 2.0], [0.7, np.nan]])
    values, grads = prog.value_and_grad(theta)
    for lane in range(theta.shape[0]):
        one_values, one_grads = prog.value_and_grad(theta[lane : lane + 1])
        assert np.array_equal(one_values[0], values[lane], equal_nan=True)
        assert np.array_equal(one_grads[0], grads[lane], equal_nan=True)
    assert values[0] == 5.0 and values[3] == 3.0 and np.array_equal(grads[0], [10.0, 5.0])


# ------------------------------------------------------------------------------------------------
# Random models (tests/gradprogs/random_models.py): NDVM vs the same tree written in torch.

_rm_spec = importlib.util.spec_from_file_location(
    "ndvm_random_models", Path(__file__).parent / "gradprogs" / "random_models.py"
)
random_models = importlib.util.module_from_spec(_rm_spec)
sys.modules[_rm_spec.name] = random_models
_rm_spec.loader.exec_module(random_models)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_models_match_torch_and_single_lanes(seed):
    x = np.linspace(-1.0, 1.5, 6)
    rng = np.random.default_rng(seed)
    theta = np.stack([rng.uniform(-1.5, 1.5, LANES), rng.uniform(-1.5, 1.5, LANES)], axis=1)
    failures = []
    for index, model in enumerate(random_models.generate(seed, 150)):
        prog = ndvm.compile(model.source)
        values, grads = prog.value_and_grad(theta, inputs={"x": x})
        for lane in range(LANES):
            t = torch.tensor(theta[lane], requires_grad=True)
            y = model.torch_fn(t, torch.tensor(x))
            g = torch.autograd.grad(y, t, allow_unused=True)[0] if y.requires_grad else None
            g = np.zeros(2) if g is None else g.numpy()
            scale = max(1.0, abs(float(y.detach())), float(np.abs(g).max()))
            if (
                abs(values[lane] - float(y.detach())) > TORCH_RTOL * scale
                or np.abs(grads[lane] - g).max() > TORCH_RTOL * scale
            ):
                failures.append(
                    (index, lane, model.source, values[lane], float(y.detach()), grads[lane].tolist(), g.tolist())
                )
                break
        for lane in (0, 5, 11):
            one_values, one_grads = prog.value_and_grad(theta[lane : lane + 1], inputs={"x": x})
            if not (np.array_equal(one_values[0], values[lane]) and np.array_equal(one_grads[0], grads[lane])):
                failures.append((index, lane, model.source, "lane differs from its one-lane run"))
                break
    assert not failures, f"{len(failures)} of 150 models disagree; first: {failures[0]}"


# ------------------------------------------------------------------------------------------------
# The published candidate corpora (ndvm_corpora of the shared data): every program as a calibration
# objective (training MSE), value and gradient against a torch interpreter of the same source.

_ct_spec = importlib.util.spec_from_file_location(
    "ndvm_corpus_torch", Path(__file__).parent / "gradprogs" / "corpus_torch.py"
)
corpus_torch = importlib.util.module_from_spec(_ct_spec)
_ct_spec.loader.exec_module(corpus_torch)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("corpus", ["cosearch_candidates_valid", "cosearch_rec_candidates_valid"])
def test_corpus_objectives_match_torch(corpus):
    import json

    from conftest import shared_file

    path = shared_file(f"ndvm_corpora/{corpus}.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    rng = np.random.default_rng(zlib.crc32(corpus.encode()))
    failures, checked = [], 0
    for row in rows:
        names = row["params"]
        source = (
            " ".join(f"(param {p} 0.3)" for p in names)
            + f"\n(define pred {row['src']})\n(/ (vsum (square (- y pred))) (size x))"
        )
        theta = 0.3 * rng.normal(size=(LANES, len(names)))  # the corpus protocol's initialisation
        try:
            expr = corpus_torch.read(row["src"])
            corpus_torch.evaluate(
                expr, {**{p: torch.tensor(0.3, dtype=torch.float64) for p in names}, "x": torch.tensor(x)}
            )
        except TypeError:
            # not valid Scheme (e.g. "(-1.0)" calls a number): NDVM must reject it with a typed error
            with pytest.raises(ndvm.NDVMError):
                ndvm.compile(source).value_and_grad(theta, inputs={"x": x, "y": y})
            continue
        values, grads = ndvm.compile(source).value_and_grad(theta, inputs={"x": x, "y": y})
        for lane in range(LANES):
            t = torch.tensor(theta[lane], requires_grad=True)
            env = {p: t[i] for i, p in enumerate(names)}
            env["x"] = torch.tensor(x)
            pred = corpus_torch.evaluate(expr, env)
            pred = pred if isinstance(pred, torch.Tensor) else torch.tensor(float(pred), dtype=torch.float64)
            loss = torch.sum((torch.tensor(y) - pred) ** 2) / x.size
            g = torch.autograd.grad(loss, t, allow_unused=True)[0] if loss.requires_grad else None
            g = np.zeros(len(names)) if g is None else g.numpy()
            want = float(loss.detach())
            if not (np.isfinite(want) and np.all(np.isfinite(g))):
                if not np.array_equal(values[lane], want, equal_nan=True):  # NaN (log of a negative) must stay NaN
                    failures.append((row["src"], lane, values[lane], want))
                continue
            checked += 1
            scale = max(1.0, abs(want), float(np.abs(g).max()))
            if abs(values[lane] - want) > TORCH_RTOL * scale or np.abs(grads[lane] - g).max() > TORCH_RTOL * scale:
                failures.append((row["src"], lane, values[lane], want, grads[lane].tolist(), g.tolist()))
                break
    assert checked > 10 * len(rows) // 2, f"only {checked} finite lanes checked"
    assert not failures, f"{len(failures)} disagreements; first: {failures[0]}"


def test_run_equals_evaluate_bit_for_bit():
    """run(params=...) (one lane, Python value) and evaluate(theta) give the same bits."""
    differ = []
    for case in CASES:
        if case.lane_inputs:
            continue
        prog = program(case)
        theta = lane_points(case)
        forward = np.asarray(prog.evaluate(theta[:3], inputs=inputs_for(case)))
        for lane in range(3):
            value = prog.run(params=dict(zip(prog.param_names, theta[lane])), inputs=inputs_for(case))
            if not np.array_equal(np.asarray(value, dtype=np.float64), forward[lane]):
                differ.append((case.name, lane, value, forward[lane]))
    assert not differ, differ[:5]


_DETERMINISM_CHILD = """
import json, sys
import numpy as np
import ndvm
jobs = json.loads(sys.stdin.read())
out = []
for job in jobs:
    prog = ndvm.compile(job["source"])
    inputs = {k: np.array(v) for k, v in job["inputs"].items()} or None
    values, grads = prog.value_and_grad(np.array(job["theta"]), inputs=inputs)
    out.append([float(v).hex() for v in values] + [float(g).hex() for g in np.ravel(grads)])
print(json.dumps(out))
"""


def test_same_bits_in_another_process():
    """Determinism across processes (allocation addresses, thread pools): a fresh interpreter gives the same bits."""
    import json
    import subprocess

    chosen = [c for c in CASES if not c.lane_inputs][::10]
    jobs = [
        {
            "source": c.source,
            "theta": lane_points(c).tolist(),
            "inputs": {k: np.asarray(v).tolist() for k, v in c.inputs.items()},
        }
        for c in chosen
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _DETERMINISM_CHILD], input=json.dumps(jobs), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, other in zip(chosen, theirs):
        values, grads = program(case).value_and_grad(lane_points(case), inputs=inputs_for(case))
        mine = [float(v).hex() for v in values] + [float(g).hex() for g in np.ravel(grads)]
        assert mine == other, case.name
