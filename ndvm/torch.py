"""The torch boundary: ``ndvm.torch.apply(prog, theta, inputs)`` is an ``autograd.Function``.

The forward pass evaluates every row of ``theta`` in one native walk; gradients are computed only
when torch asks for them (backward re-runs the program with the tape on), so a torch optimizer can
drive NDVM like any other differentiable module:

    theta = torch.tensor([[1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.05)
    for _ in range(200):
        opt.zero_grad()
        loss = ((ndvm.torch.apply(prog, theta, {"x": x}) - y) ** 2).mean()
        loss.backward()
        opt.step()
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import torch

from .errors import EvalError
from .program import Program, _inputs, _lane_inputs


class _ProgramFunction(torch.autograd.Function):
    # ctx is torch's FunctionCtx, typed Any as torch types it: forward stores its own fields on it.
    @staticmethod
    def forward(
        ctx: Any,
        theta: torch.Tensor,
        prog: Program,
        inputs: dict[str, np.ndarray],
        lane_inputs: dict[str, np.ndarray],
        names: list[str],
        *tensor_inputs: torch.Tensor,
    ) -> torch.Tensor:
        th = theta.detach().to(torch.float64).cpu().numpy()
        th = np.ascontiguousarray(th if th.ndim == 2 else th[None, :])
        shared = dict(inputs)
        for name, t in zip(names, tensor_inputs):
            shared[name] = np.ascontiguousarray(t.detach().to(torch.float64).cpu().numpy())
        values = prog._native.evaluate(th, shared, lane_inputs, prog.limits.native())
        ctx.prog, ctx.th, ctx.shared, ctx.lane, ctx.names = prog, th, shared, lane_inputs, names
        ctx.theta_shape, ctx.theta_dtype = theta.shape, theta.dtype
        ctx.input_meta = [(t.shape, t.dtype) for t in tensor_inputs]
        out = torch.from_numpy(values)
        return out.to(theta.dtype) if theta.dtype != torch.float64 else out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        prog: Program = ctx.prog
        g = grad_out.detach().to(torch.float64).cpu().numpy()
        B = ctx.th.shape[0]
        want_inputs = [n for n, need in zip(ctx.names, ctx.needs_input_grad[5:]) if need]
        g = g.reshape(B, -1)
        grads = np.zeros_like(ctx.th)
        input_grads = {n: np.zeros_like(ctx.shared[n]) for n in want_inputs}
        if g.shape[1] == 1:
            _, _, gth, gin = prog._native.value_and_grad(
                ctx.th, ctx.shared, ctx.lane, prog.limits.native(), want_inputs, "value", None
            )
            grads = gth * g
            if want_inputs:  # input grads are summed over lanes: weight each lane by its cotangent
                if np.allclose(g, g[0]):
                    for n, gi in zip(want_inputs, gin):
                        input_grads[n] = gi * g[0, 0]
                else:
                    for lane in range(B):
                        _, _, _, gl = prog._native.value_and_grad(
                            ctx.th[lane : lane + 1],
                            ctx.shared,
                            {k: v[lane : lane + 1] for k, v in ctx.lane.items()},
                            prog.limits.native(),
                            want_inputs,
                            "value",
                            None,
                        )
                        for n, gi in zip(want_inputs, gl):
                            input_grads[n] += gi * g[lane, 0]
        else:
            # vector output: vector-Jacobian product per lane through the loss "mse" identity:
            # d/dtheta sum_e g_e y_e  ==  gradient of mse against target t = y - g*n/2
            values = prog._native.evaluate(ctx.th, ctx.shared, ctx.lane, prog.limits.native()).reshape(B, -1)
            n = values.shape[1]
            for lane in range(B):
                target = values[lane] - g[lane] * n / 2.0
                _, _, gth, gin = prog._native.value_and_grad(
                    ctx.th[lane : lane + 1],
                    ctx.shared,
                    {k: v[lane : lane + 1] for k, v in ctx.lane.items()},
                    prog.limits.native(),
                    want_inputs,
                    "mse",
                    np.ascontiguousarray(target),
                )
                grads[lane] = gth[0]
                for name, gi in zip(want_inputs, gin):
                    input_grads[name] += gi
        theta_grad = torch.from_numpy(grads).to(ctx.theta_dtype).reshape(ctx.theta_shape)
        in_grads = []
        for name, (shape, dtype), need in zip(ctx.names, ctx.input_meta, ctx.needs_input_grad[5:]):
            in_grads.append(torch.from_numpy(np.asarray(input_grads[name])).to(dtype).reshape(shape) if need else None)
        return (theta_grad, None, None, None, None, *in_grads)


def apply(
    prog: Program,
    theta: torch.Tensor,
    inputs: Mapping[str, Any] | None = None,
    lane_inputs: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """Evaluates ``prog`` at ``theta`` [B, P] (a tensor); differentiable in ``theta`` and in any
    tensor-valued shared input that requires grad."""
    if not isinstance(theta, torch.Tensor):
        raise EvalError("ndvm.torch.apply expects theta as a torch tensor [B, P]")
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    plain: dict[str, Any] = {}
    for k, v in (inputs or {}).items():
        if isinstance(v, torch.Tensor):
            names.append(str(k))
            tensors.append(v)
        else:
            plain[str(k)] = v
    # torch declares Function.apply without annotations (it returns what forward returns: a tensor)
    out = _ProgramFunction.apply(  # type: ignore[no-untyped-call]
        theta, prog, _inputs(plain), _lane_inputs(lane_inputs), names, *tensors
    )
    return cast(torch.Tensor, out)
