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

FD_STEP = 1e-3      # relative step of the 5-point stencil: truncation ~h^4, round-off ~eps/h, both << 1e-6
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
            f"(|diff|={abs(grads[lane, j] - fd[lane, j]):.3e}, tol={tol[lane, j]:.3e})")


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
            theta[lane:lane + 1], inputs=inputs_for(case), lane_inputs=lane_inputs_for(case, slice(lane, lane + 1)))
        assert np.array_equal(np.asarray(one_values)[0], values[lane]), (
            f"lane {lane} theta={theta[lane].tolist()}: alone {one_values[0]!r}, in batch {values[lane]!r}")
        assert np.array_equal(np.asarray(one_grads)[0], grads[lane]), (
            f"lane {lane} theta={theta[lane].tolist()}: alone {one_grads[0]!r}, in batch {grads[lane]!r}")


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
        f"{case.name}: values NDVM {values} torch {t_values}")
    gscale = np.maximum(scale, np.abs(t_grads).max(axis=1))[:, None]
    ok = np.abs(grads - t_grads) <= TORCH_RTOL * np.abs(t_grads) + TORCH_ATOL_SCALE * gscale
    bad = np.argwhere(~ok)
    assert not bad.size, (f"{case.name}: lane {bad[0][0]} theta={theta[bad[0][0]].tolist()} grad NDVM "
                          f"{grads[bad[0][0]].tolist()} torch {t_grads[bad[0][0]].tolist()}")
