"""The compiled ceiling: builds ``native/bench/kalman_compiled.cc`` and runs it as a subprocess.

The hand-written C++ value-and-gradient of ``kalman2d_T80`` is compiled with the system C++
compiler (``$CXX`` or ``c++``) and the runtime's own flags (``-O3``, no ``-ffast-math``) into
``build/bench/kalman_compiled``; it is rebuilt when the source is newer than the binary. The
program reads the observations and the lanes' parameters on stdin and prints one JSON object
(timing, values, gradients), so no Python binding is needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE = REPO_ROOT / "native" / "bench" / "kalman_compiled.cc"
BUILD_DIR = REPO_ROOT / "build" / "bench"
BINARY = BUILD_DIR / "kalman_compiled"
CXXFLAGS = ["-O3", "-std=c++17"]


class CompiledUnavailable(RuntimeError):
    """The compiled baseline cannot be built here (no source checkout or no C++ compiler)."""


def build(force: bool = False) -> Path:
    """Compile the ceiling if needed; returns the binary's path."""
    if not SOURCE.exists():
        raise CompiledUnavailable(f"{SOURCE} not found (the compiled baseline needs a source checkout)")
    if not force and BINARY.exists() and BINARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return BINARY
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise CompiledUnavailable("no C++ compiler found (set $CXX)")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    tmp = BINARY.with_suffix(".tmp")
    proc = subprocess.run([cxx, *CXXFLAGS, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise CompiledUnavailable(f"building {SOURCE.name} failed:\n{proc.stderr.strip()}")
    tmp.replace(BINARY)
    return BINARY


def run_kalman(ys: np.ndarray, theta: np.ndarray, min_seconds: float = 0.2, reps: int | None = None) -> dict:
    """Value and gradient of the 2-D Kalman NLL for every row ``(q, r)`` of ``theta`` [B, 2].

    Returns the program's JSON: ``seconds_per_call`` (all B lanes), ``ns_per_lane``, ``reps``,
    ``values`` [B] and ``grads`` [B, 2] (numpy arrays).
    """
    binary = build()
    ys = np.asarray(ys, dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64).reshape(-1, 2)
    lines = [f"{ys.shape[0]} {theta.shape[0]}"]
    lines += [f"{float(a)!r} {float(b)!r}" for a, b in ys]
    lines += [f"{float(a)!r} {float(b)!r}" for a, b in theta]
    args = [str(binary)] + (["--reps", str(reps)] if reps else ["--min-seconds", str(min_seconds)])
    proc = subprocess.run(args, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kalman_compiled failed: {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    out["values"] = np.asarray(out["values"], dtype=np.float64)
    out["grads"] = np.asarray(out["grads"], dtype=np.float64).reshape(-1, 2)
    return out


__all__ = ["BINARY", "CompiledUnavailable", "build", "run_kalman"]
