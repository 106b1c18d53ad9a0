"""Fingerprints: of programs (the second deduplication stage of the candidate store) and of
a run's dataset (what the program library, storage/library.py, matches earlier runs by; at the end).

Two programs can differ in structure yet compute the same function: ``(* 2 (+ a x))`` and
``(+ (* 2 a) (* 2 x))``, or ``(+ a (* b x))`` and ``(+ b (* a x))`` (the same model with its
parameters' roles swapped). The canonical hash cannot see that; their outputs can. A fingerprint
evaluates a program at a few fixed probe parameter rows and the task's probe inputs, rounds the
outputs to a fixed number of significant digits and hashes them.

Parameter roles: the probe value a parameter receives depends on its position, so swapping roles
would change the outputs. To make the fingerprint independent of how parameters are named and
ordered, parameters are grouped by constraint (a permutation can only exchange parameters that
accept the same values) and the program is evaluated under every permutation within the groups
(all of them as lanes of a single ``prog.evaluate`` call); the fingerprint hashes the smallest of
the resulting output vectors, a choice that does not depend on the declaration order. Above
``MAX_PERMUTATIONS`` permutations only the declaration order is used (documented limitation: such
programs are still deduplicated by their canonical hash, and semantically only when their
parameters are declared in the same roles).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# Outputs are compared at this many significant digits: far coarser than the float64 noise of
# reordered arithmetic (1e-16 relative), far finer than any real difference between models.
SIGNIFICANT_DIGITS = 8
# Magnitudes below this are treated as zero, so that (- (* 2 a) (* 2 a)) and 0 agree.
ZERO_TOLERANCE = 1e-12
# Number of probe parameter rows; each row gives every parameter a different generic value.
PROBE_ROWS = 3
# Above this many within-group permutations, only the declaration order is probed.
MAX_PERMUTATIONS = 720
# The probe values come from a fixed generator so fingerprints are stable across runs and machines.
_PROBE_SEED = 20261130


@dataclass(frozen=True)
class Fingerprint:
    """Result of probing one program: ``value`` is None when no fingerprint could be taken, and
    ``note`` then says why (the candidate is kept; only the semantic stage is skipped for it)."""

    value: str | None
    note: str | None = None


def _constraint_key(constraint: Any) -> tuple:
    if constraint is None:
        return ("free",)
    if constraint == "positive":
        return ("positive",)
    if isinstance(constraint, (tuple, list)) and len(constraint) == 3 and constraint[0] == "between":
        return ("between", float(constraint[1]), float(constraint[2]))
    raise ValueError(f"unknown parameter constraint {constraint!r}")


def _probe_value(key: tuple, u: float) -> float:
    """Map a fraction u in (0.15, 0.85) to a generic value that satisfies the constraint."""
    if key[0] == "free":
        return (u - 0.5) * 3.0 + (0.37 if u >= 0.5 else -0.37)  # never near 0: |v| >= 0.37
    if key[0] == "positive":
        return 0.2 + 1.6 * u
    lo, hi = key[1], key[2]
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"parameter interval ({lo}, {hi}) cannot be probed")
    return lo + (hi - lo) * u


def probe_theta(params: list[Any]) -> tuple[np.ndarray, int]:
    """The probe parameter matrix [rows * permutations, P] for a program's declared parameters,
    and the number of permutations per row. ``params`` are ``ndvm.Param`` (name, init, constraint,
    shared). A parameter shared across groups is its own class: a law with a shared exponent and the
    same law with a per-group one compute the same function at any one parameter vector, yet they
    are different models (fitted jointly vs per group), so they must not fingerprint alike."""
    return _probe_theta(tuple(_param_key(p) for p in params))


def _param_key(param: Any) -> tuple:
    key = _constraint_key(param.constraint)
    return key + ("shared",) if getattr(param, "shared", False) else key


@functools.lru_cache(maxsize=256)  # a run's programs share a handful of constraint signatures
def _probe_theta(keys: tuple[tuple, ...]) -> tuple[np.ndarray, int]:
    groups: dict[tuple, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    group_list = sorted(groups.items())  # sorted by key: the same for any declaration order

    rng = np.random.default_rng(_PROBE_SEED)
    # values[row][group] = the values handed out to that group's members, in slot order
    values = []
    for _ in range(PROBE_ROWS):
        row = []
        for key, members in group_list:
            fractions = rng.uniform(0.15, 0.85, size=max(len(members), 1))
            row.append([_probe_value(key, float(f)) for f in fractions[: len(members)]])
        values.append(row)

    n_perm = math.prod(math.factorial(len(m)) for _, m in group_list)
    if n_perm > MAX_PERMUTATIONS:
        per_group = [[tuple(range(len(m)))] for _, m in group_list]
    else:
        per_group = [list(itertools.permutations(range(len(m)))) for _, m in group_list]
    combos = list(itertools.product(*per_group)) if group_list else [()]

    rows = []
    for row_values in values:
        for combo in combos:
            theta = np.empty(len(keys))
            for (_key, members), perm, group_values in zip(group_list, combo, row_values):
                for slot, member in enumerate(members):
                    theta[member] = group_values[perm[slot]]
            rows.append(theta)
    matrix = np.array(rows, dtype=np.float64).reshape(len(rows), len(keys))
    matrix.setflags(write=False)  # shared by every caller through the cache
    return matrix, len(combos)


def round_significant(values: np.ndarray, digits: int = SIGNIFICANT_DIGITS) -> np.ndarray:
    """Round to ``digits`` significant digits; tiny magnitudes become 0, NaN/inf stay, -0 is 0."""
    v = np.asarray(values, dtype=np.float64)
    out = np.array(v, copy=True)
    finite = np.isfinite(v) & (np.abs(v) >= ZERO_TOLERANCE)
    exponent = np.floor(np.log10(np.abs(v[finite])))
    scale = 10.0 ** (digits - 1 - exponent)
    out[finite] = np.round(v[finite] * scale) / scale
    out[np.isfinite(v) & (np.abs(v) < ZERO_TOLERANCE)] = 0.0
    out[np.isnan(v)] = np.nan  # one NaN bit pattern
    return out + 0.0  # -0.0 -> 0.0


def fingerprint(program: Any, probe_inputs: Mapping[str, Any] | None) -> Fingerprint:
    """Fingerprint ``program`` (an ``ndvm.Program``) at the probe parameters and ``probe_inputs``."""
    import ndvm  # imported here so the store module loads before the runtime is installed

    if probe_inputs is None:
        return Fingerprint(None, "semantic stage off for this run (no probe inputs)")
    missing = [name for name in program.inputs if name not in probe_inputs]
    if missing:
        return Fingerprint(None, f"no probe value for input {missing[0]!r}")
    try:
        theta, n_perm = probe_theta(list(program.params))
    except ValueError as error:
        return Fingerprint(None, str(error))
    inputs = {name: probe_inputs[name] for name in program.inputs}
    try:
        if theta.shape[1] == 0:
            out = np.asarray(program.evaluate(None, inputs), dtype=np.float64)
            out = np.repeat(out, theta.shape[0], axis=0)
        else:
            out = np.asarray(program.evaluate(theta, inputs), dtype=np.float64)
    except ndvm.NDVMError as error:
        return Fingerprint(None, f"probe evaluation failed: {type(error).__name__}: {error}")
    except (TypeError, ValueError) as error:  # a non-numeric result (a symbol, a list of lists)
        return Fingerprint(None, f"probe result is not numeric: {error}")
    if out.ndim == 0 or out.shape[0] != theta.shape[0]:
        return Fingerprint(None, f"probe result has shape {out.shape}, expected {theta.shape[0]} lanes")
    if not np.isfinite(out).any():
        return Fingerprint(None, "probe outputs are all non-finite")

    rounded = round_significant(out.reshape(theta.shape[0], -1))
    # lanes are ordered row-major (probe row, permutation): gather each permutation's outputs over all rows
    per_row = rounded.reshape(-1, n_perm, rounded.shape[1])  # [rows, perms, n]
    candidates = [per_row[:, k, :].tobytes() for k in range(n_perm)]
    digest = hashlib.sha256()
    digest.update(repr(out.shape[1:]).encode())
    shared = sorted(_param_key(p) for p in program.params if getattr(p, "shared", False))
    if shared:  # the same outputs from a shared and a per-group parameter are still two models
        digest.update(repr(shared).encode())
    digest.update(min(candidates))
    return Fingerprint(digest.hexdigest()[:16])


# ---------------------------------------------------------------------------- dataset fingerprints
# The program library (storage/library.py) reuses an evaluation only on the same dataset
# fingerprint: a hash of everything that decides what a candidate's evaluation comes out as.
# Bump the version when what goes in changes meaning, so old runs stop matching new ones. The
# runtime's numbers are covered by ndvm's own version (pyproject.toml): bump it whenever a fit of
# the same program on the same data can come out different (an optimizer's rules, the kernels'
# arithmetic), so that no evaluation of the older runtime is reused as if it were a new one.
DATASET_FINGERPRINT_VERSION = 1
# Calibration settings that change a fit (and so the stored losses, parameters, scores). Left out
# on purpose: the seed (restart starting points; each night draws its own, and an evaluation from
# another seed is as valid a fit), threads (the same fits on any core count) and the per-candidate
# time limit (a limit, not a setting of the fit).
RESULT_SETTINGS = ("optimizer", "steps", "lr", "restarts", "solve_linear")
# What a per-group model (storage/pyfunc_model.py) calibrates a new group with, as the run did: the
# settings that change a fit, and the seed (the same starting points as the run's fits).
GROUP_FIT_SETTINGS = (*RESULT_SETTINGS, "seed")


@dataclass(frozen=True)
class DatasetFingerprint:
    """``value``: the hash a run is stored under. ``parts``: what was hashed (digests and settings,
    plain JSON), stored with the run so a run that reuses nothing can be explained."""

    value: str
    parts: dict[str, Any]


DIGEST_ROWS = 200_000


def data_digest(frame: Any) -> str:
    """SHA-256 of a polars frame's content: column names, dtypes and every value (the ``split``
    column included, so the split definition is part of it), via its CSV text."""
    digest = hashlib.sha256()
    digest.update(repr([(name, str(dtype)) for name, dtype in frame.schema.items()]).encode())
    # CSV text of DIGEST_ROWS rows at a time: the same bytes as the whole frame's CSV (the header
    # once), without holding a ten-million-row table's text (gigabytes) at once
    for start in range(0, max(frame.height, 1), DIGEST_ROWS):
        digest.update(frame.slice(start, DIGEST_ROWS).write_csv(include_header=start == 0).encode())
    return digest.hexdigest()


def task_settings(task: Any) -> dict[str, Any]:
    """The task's identity and its plain settings (kind, metric, loss, leads, x_scale, split sizes...):
    every public attribute holding a bool, number or string. Arrays (the data itself) are covered
    by :func:`data_digest`; reference models do not change a candidate's evaluation."""
    settings: dict[str, Any] = {"class": f"{type(task).__module__}.{type(task).__qualname__}"}
    for name in ("kind", "name", "primary_metric", "calibration_loss"):
        settings[name] = getattr(task, name, None)
    for name, value in sorted(vars(task).items()):
        if not name.startswith("_") and (value is None or isinstance(value, (bool, int, float, str))):
            settings[name] = value
    return settings


def dataset_fingerprint(dataset: Any, task: Any, calibration: Mapping[str, Any]) -> DatasetFingerprint:
    """The fingerprint of a run's problem: the data's content (split column included), the column
    roles, the task's settings and split, the calibration settings in :data:`RESULT_SETTINGS` and
    the runtime's version. ``calibration``: the run's calibration options as a mapping."""
    import json

    import ndvm

    missing = [name for name in RESULT_SETTINGS if name not in calibration]
    if missing:
        raise ValueError(
            f"dataset fingerprint: calibration settings lack {missing} "
            f"(needs {list(RESULT_SETTINGS)}, got {sorted(calibration)})"
        )
    parts = {
        "version": DATASET_FINGERPRINT_VERSION,
        "data": data_digest(dataset.frame),
        "rows": int(dataset.frame.height),
        "columns": {"x": dataset.x, "y": dataset.y, "group": dataset.group},
        "split": task.split_label(),
        "task": task_settings(task),
        "calibration": {name: calibration[name] for name in RESULT_SETTINGS},
        "ndvm": getattr(ndvm, "__version__", None),
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return DatasetFingerprint(hashlib.sha256(text.encode()).hexdigest()[:16], json.loads(text))
