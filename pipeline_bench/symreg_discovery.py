"""``ndvm bench --suite symreg-discovery``: ``ndvm discover`` against Operon and gplearn at equal
wall clock, on tables with several inputs (issue 27).

Problems (each a training table, an in-domain test and an out-of-domain test):

- ``oscillator1`` and ``stressstrain``: the LLM-SR problems in ``../shared/data/llmsr`` (their
  README: train.csv, test_id.csv, test_ood.csv; the last column is the target); skipped with the
  reason when the folder is absent;
- ``gravity``: F = m1 m2 / r^2 with 1% multiplicative noise, 2,000 training rows with m1, m2 in
  [1, 5] and r in [1, 3]; out of domain r in [3, 5] and the masses in [5, 8];
- ``damped-wave``: y = exp(-0.5 t) cos(3 t) + 0.2 u, noise sd 0.01, t in [0, 2] and u in [-1, 1];
  out of domain t in [2, 3].

Each method gets the same wall clock ``SECONDS`` (``--quick``: ``QUICK_SECONDS``) per problem:

- NDVM: ``ndvm discover`` (offline mutation proposer, seed 0) with ``--minutes SECONDS/60`` on the
  training table split 80/20 into train and validation (a seeded ``split`` column; the in-domain
  test rows are its test part); the champion (the report card's) is evaluated on both tests;
- Operon (pyoperon 0.6.2) and gplearn (0.4.3), each installed by this suite into its own virtual
  environment under ``<cache>/bench-envs/`` (``NDVM_CACHE_DIR``; pip from the package index)
  and run there with the training table: Operon with ``max_time=SECONDS`` (other settings at
  their defaults, 2 threads), gplearn (population 1,000) one generation at a time
  (``warm_start``) until the time is spent. A method whose environment cannot
  be made is skipped with the pip error.

Table: NMSE (mean squared error over the variance of the target) in domain and out of domain,
complexity (each method's own measure: NDVM the champion's node count, Operon its model length,
gplearn its program length) and the seconds each method took (NDVM: the whole command, start-up
and the drain after the deadline included).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SECONDS = 180.0
QUICK_SECONDS = 30.0
PEERS = {"operon": ("pyoperon==0.6.2", "numpy", "scikit-learn"), "gplearn": ("gplearn==0.4.3",)}

OPERON_DRIVER = """
import json, sys, time
import numpy as np
from pyoperon.sklearn import SymbolicRegressor
spec = json.load(open(sys.argv[1]))
load = lambda p: np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2)
train, tid, tood = (load(spec[k]) for k in ("train", "test_id", "test_ood"))
start = time.time()
model = SymbolicRegressor(max_time=int(spec["seconds"]), random_state=spec.get("seed", 0), n_threads=2,
                          generations=10**6, max_evaluations=10**9)
model.fit(train[:, :-1], train[:, -1])
out = {"seconds": time.time() - start,
       "pred_id": model.predict(tid[:, :-1]).tolist(), "pred_ood": model.predict(tood[:, :-1]).tolist()}
try:
    out["complexity"] = int(model.stats_["model_length"])
    out["model"] = model.get_model_string(model.model_, 6)
except Exception as exc:
    out["complexity"], out["model"] = None, repr(exc)
json.dump(out, open(spec["out"], "w"))
"""

GPLEARN_DRIVER = """
import json, sys, time
import numpy as np
from gplearn.genetic import SymbolicRegressor
spec = json.load(open(sys.argv[1]))
load = lambda p: np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2)
train, tid, tood = (load(spec[k]) for k in ("train", "test_id", "test_ood"))
start = time.time()
model = SymbolicRegressor(population_size=1000, generations=1, warm_start=True, random_state=spec.get("seed", 0),
                          n_jobs=1,
                          function_set=("add", "sub", "mul", "div", "sqrt", "log", "sin", "cos"))
g = 1
while True:
    model.set_params(generations=g)
    model.fit(train[:, :-1], train[:, -1])
    if time.time() - start > spec["seconds"] * (g + 1) / g:
        break
    g += 1
out = {"seconds": time.time() - start, "generations": g,
       "pred_id": model.predict(tid[:, :-1]).tolist(), "pred_ood": model.predict(tood[:, :-1]).tolist(),
       "complexity": int(model._program.length_), "model": str(model._program)}
json.dump(out, open(spec["out"], "w"))
"""


# ---------------------------------------------------------------------------- problems
def _law_tables(
    law: Callable[..., np.ndarray],
    names: tuple[str, ...],
    target: str,
    domain: dict[str, tuple[float, float]],
    outside: dict[str, tuple[float, float]],
    noise: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    seed: int,
    n: int = 2000,
) -> dict[str, Any]:
    """Train, in-domain test and out-of-domain test tables of a known law (name -> column array)."""
    rng = np.random.default_rng(seed)

    def table(ranges: dict[str, tuple[float, float]], rows: int) -> dict[str, np.ndarray]:
        cols = {k: rng.uniform(*ranges[k], rows) for k in names}
        y = law(*(cols[k] for k in names))
        return {**cols, target: y + noise(y, rng)}

    return {"train": table(domain, n), "test_id": table(domain, n // 2), "test_ood": table(outside, n // 2)}


def synthetic_problems() -> dict[str, dict[str, Any]]:
    gravity = _law_tables(
        lambda m1, m2, r: m1 * m2 / r**2,
        ("m1", "m2", "r"),
        "F",
        {"m1": (1, 5), "m2": (1, 5), "r": (1, 3)},
        {"m1": (5, 8), "m2": (5, 8), "r": (3, 5)},
        lambda y, rng: 0.01 * y * rng.normal(size=y.size),
        seed=11,
    )
    wave = _law_tables(
        lambda t, u: np.exp(-0.5 * t) * np.cos(3 * t) + 0.2 * u,
        ("t", "u"),
        "y",
        {"t": (0, 2), "u": (-1, 1)},
        {"t": (2, 3), "u": (-1, 1)},
        lambda y, rng: 0.01 * rng.normal(size=y.size),
        seed=12,
    )
    return {"gravity": gravity, "damped-wave": wave}


def llmsr_problems(data: Path | None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    import polars as pl

    out, notes = {}, []
    for name in ("oscillator1", "stressstrain"):
        folder = data / "llmsr" / name if data else None
        if folder is None or not all((folder / f"{p}.csv").is_file() for p in ("train", "test_id", "test_ood")):
            notes.append(f"{name} skipped: llmsr/{name}/{{train,test_id,test_ood}}.csv not under {data}")
            continue
        out[name] = {
            p: pl.read_csv(folder / f"{p}.csv").to_dict(as_series=False) for p in ("train", "test_id", "test_ood")
        }
    return out, notes


def _write(table: dict[str, Any], path: Path, extra: dict[str, Any] | None = None) -> None:
    import polars as pl

    pl.DataFrame({**table, **(extra or {})}).write_csv(path)


def nmse(prediction: Any, y: Any) -> float:
    p, y = np.asarray(prediction, float), np.asarray(y, float)
    if p.shape != y.shape or not np.all(np.isfinite(p)):
        return math.inf
    return float(np.mean((p - y) ** 2) / np.var(y))


# ---------------------------------------------------------------------------- NDVM
def run_ndvm(
    name: str,
    tables: dict[str, Any],
    seconds: float,
    folder: Path,
    *,
    seed: int = 0,
    extra_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``ndvm discover`` on the training table (seeded 80/20 train/validation) for ``seconds``, with
    the run's ``seed`` and ``extra_args`` (an ablation: ``("--edge-fraction", "0")``)."""
    import ndvm

    folder.mkdir(parents=True, exist_ok=True)
    columns = list(tables["train"])
    inputs, target = columns[:-1], columns[-1]
    n_train, n_test = len(tables["train"][target]), len(tables["test_id"][target])
    part = np.where(np.random.default_rng(0).random(n_train) < 0.8, "train", "validation")
    combined = {c: list(tables["train"][c]) + list(tables["test_id"][c]) for c in columns}
    data = folder / f"{name}.csv"
    _write(combined, data, {"split": list(part) + ["test"] * n_test})
    script = Path(sys.executable).with_name("ndvm")
    command = [str(script) if script.is_file() else "ndvm", "discover", "--data", str(data), "--y", target]
    command += ["--name", name]
    for column in inputs:
        command += ["--x", column]
    command += ["--minutes", f"{seconds / 60:.4f}", "--seed", str(seed), "--folder", str(folder / "runs")]
    command += list(extra_args)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 4 + 300)
    took = time.perf_counter() - start
    reports = sorted((folder / "runs" / "reports").glob("*/report.json"))
    if done.returncode != 0 or not reports:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no report"], "seconds": took}
    card = json.loads(reports[-1].read_text())
    champion = card["champion"]
    program = ndvm.compile(champion["source"])
    theta = np.array([[float(champion["parameters"][p]) for p in program.param_names]]) if program.param_names else None
    from storage.columns import program_names

    names = program_names(inputs)

    def predict(table: dict[str, Any]) -> np.ndarray:
        rows = len(table[target])
        values = {names[c]: np.asarray(table[c], float) for c in inputs if names[c] in program.inputs}
        out = np.asarray(program.evaluate(theta, values), float).reshape(-1)
        return np.full(rows, out[0]) if out.size == 1 else out

    return {
        "seconds": took,
        "pred_id": predict(tables["test_id"]),
        "pred_ood": predict(tables["test_ood"]),
        "complexity": champion.get("complexity"),
        "model": (champion.get("formula") or {}).get("text", champion["source"]),
        "source": champion["source"],
        "parameters": champion["parameters"],
        "validation_parts": champion.get("validation_parts"),
        "calibrated": card.get("counts", {}).get("calibrated"),
    }


# ---------------------------------------------------------------------------- peers
def peer_python(peer: str) -> tuple[Path | None, str]:
    """The python of ``peer``'s own environment (made and filled on first use), or None and why."""
    from datasets.cache import cache_dir

    env = cache_dir() / "bench-envs" / peer
    python = env / "bin" / "python"
    module = "pyoperon" if peer == "operon" else "gplearn"
    if python.is_file() and subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0:
        return python, ""
    made = subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], capture_output=True, text=True)
    if made.returncode != 0:
        return None, f"{peer} skipped: python -m venv failed: {made.stderr.strip()[-300:]}"
    pip = subprocess.run([python, "-m", "pip", "install", "-q", *PEERS[peer]], capture_output=True, text=True)
    if pip.returncode != 0:
        return None, f"{peer} skipped: pip install {' '.join(PEERS[peer])} failed: {pip.stderr.strip()[-300:]}"
    return python, ""


def run_peer(
    peer: str, python: Path, tables: dict[str, Any], seconds: float, folder: Path, *, seed: int = 0
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"seconds": seconds, "out": str(folder / "out.json"), "seed": seed}
    for part in ("train", "test_id", "test_ood"):
        _write(tables[part], folder / f"{part}.csv")
        spec[part] = str(folder / f"{part}.csv")
    (folder / "spec.json").write_text(json.dumps(spec))
    (folder / "driver.py").write_text(OPERON_DRIVER if peer == "operon" else GPLEARN_DRIVER)
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [python, str(folder / "driver.py"), str(folder / "spec.json")],
        capture_output=True,
        text=True,
        timeout=seconds * 4 + 120,
        env=env,
    )
    took = time.perf_counter() - start
    if done.returncode != 0 or not (folder / "out.json").is_file():
        return {"error": done.stderr.strip().splitlines()[-1:] or ["no output"], "seconds": took}
    return json.loads((folder / "out.json").read_text())


# ---------------------------------------------------------------------------- the suite
def run_symreg_discovery_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``)."""
    from ndvm_bench.common import SuiteResult, find_data_dir
    from pipeline_bench.discovery import _quiet

    _quiet()
    seconds = QUICK_SECONDS if config.quick else SECONDS
    problems, notes = llmsr_problems(find_data_dir(config))
    problems.update(synthetic_problems())
    pythons: dict[str, Path] = {}
    for peer in PEERS:
        python, why = peer_python(peer)
        if python is None:
            notes.append(why)
        else:
            pythons[peer] = python
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-symreg-") as tmp:
        for name, tables in problems.items():
            target = list(tables["train"])[-1]
            runs = {"ndvm": run_ndvm(name, tables, seconds, Path(tmp) / name / "ndvm")}
            for peer, python in pythons.items():
                runs[peer] = run_peer(peer, python, tables, seconds, Path(tmp) / name / peer)
            for method, r in runs.items():
                if "error" in r:
                    rows.append([name, method, "-", "-", "-", f"{r['seconds']:.0f}", f"error: {r['error']}"])
                    continue
                r["nmse_id"] = nmse(r["pred_id"], tables["test_id"][target])
                r["nmse_ood"] = nmse(r["pred_ood"], tables["test_ood"][target])
                rows.append(
                    [
                        name,
                        method,
                        f"{r['nmse_id']:.3g}",
                        f"{r['nmse_ood']:.3g}",
                        r.get("complexity"),
                        f"{r['seconds']:.0f}",
                        str(r.get("model", ""))[:80],
                    ]
                )
                r.pop("pred_id"), r.pop("pred_ood")
            results[name] = runs
    notes.append(
        f"equal wall clock: {seconds:.0f} s per method and problem (NDVM: --minutes {seconds / 60:.2f}, its seconds "
        "include start-up and the drain); NMSE = MSE / var(y) on the test file; complexity is each method's own measure"
    )
    return SuiteResult(
        name="symreg-discovery",
        title=f"symbolic regression at equal wall clock ({seconds:.0f} s): NDVM discover vs Operon vs gplearn",
        columns=["problem", "method", "NMSE in-domain", "NMSE out-of-domain", "complexity", "seconds", "model"],
        rows=rows,
        notes=notes,
        data={"results": results},
    )


__all__ = ["run_symreg_discovery_suite", "synthetic_problems", "llmsr_problems", "nmse", "run_ndvm", "run_peer"]
