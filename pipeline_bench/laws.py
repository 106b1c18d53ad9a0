"""``ndvm bench --suite laws``: do the searches find known laws, and do the laws hold beyond the data?
(issue 37 part 5)

Equations: every ``EVERY``-th row (``--quick``: every ``QUICK_EVERY``-th) of the Feynman equations
in ``../shared/data/feynman/FeynmanEquations.csv`` (AI Feynman, Udrescu and Tegmark 2020; the
ground-truth track of SRBench), a rule rather than a hand-picked list. For each equation, noise
level (``NOISES``: 0 and 1%; ``--quick``: 0) and seed (``SEEDS``; ``--quick``: one):

- data: ``TRAIN_ROWS`` training rows with every variable uniform on its published range, the
  target with Gaussian noise of sd ``noise`` x the target's root mean square (SRBench's
  convention); an in-domain test of ``TEST_ROWS`` rows from the same ranges; an out-of-domain
  test of ``TEST_ROWS`` rows from each range widened by half its width above the top, every row
  outside the training box in at least one variable (rows where the law is not finite are
  drawn again);
- methods at equal wall clock ``SECONDS`` (``--quick``: ``QUICK_SECONDS``): NDVM (``ndvm
  discover``, offline mutation proposer, the seed), Operon and gplearn in their own
  environments, with the seed (as ``--suite symreg-discovery`` runs them);
- scores: NMSE (MSE / var(y)) on both tests, noise-free targets; the model's complexity (each
  method's own measure: NDVM the champion's node count); and **recovery**: the model equals the
  law up to constants within 1% (``recovered``: each constant of the model rounded to the simplest
  number within 1% of it, sympy then finds that the model minus the law, or the model over the
  law, or the model minus a constant times the law, is a constant: SRBench's definition of a
  symbolic solution, with rounding).

Table: per method, equations recovered (of those run), median NMSE in and out of domain, median
complexity; every run's row in the JSON (``--json``).
"""

from __future__ import annotations

import csv
import math
import signal
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

EVERY = 4  # every fourth equation of the file: 20 of 80
QUICK_EVERY = 8
NOISES = (0.0, 0.01)
SEEDS = (0, 1, 2)
SECONDS = 60.0
QUICK_SECONDS = 30.0
TRAIN_ROWS = 2000
TEST_ROWS = 1000
OOD_WIDEN = 0.5  # of each range's width, above its top
TOLERANCE = 0.01  # constants within 1%
SYMPY_SECONDS = 20  # a recovery check that takes longer counts as not recovered (and says so)


# ---------------------------------------------------------------------------- the equations
class Law:
    """One row of the Feynman file: its variables with their ranges, the formula as sympy and numpy."""

    def __init__(self, row: dict[str, str]):
        import sympy

        self.name = row["Filename"]
        self.output = row["Output"]
        # every named variable (III.10.19's row says 3 variables and names 4: its formula reads 4)
        self.ranges = {
            row[f"v{i}_name"]: (float(row[f"v{i}_low"]), float(row[f"v{i}_high"]))
            for i in range(1, 11)
            if row.get(f"v{i}_name")
        }
        # every variable a plain symbol (names like gamma, beta, I1 are not sympy's functions here),
        # positive where its range is (they all are): simplification may then use it
        self.symbols = {v: sympy.Symbol(v, positive=lo > 0) for v, (lo, _) in self.ranges.items()}
        names = {**self.symbols, "pi": sympy.pi, "exp": sympy.exp, "sqrt": sympy.sqrt, "ln": sympy.log}
        names.update(arcsin=sympy.asin, arccos=sympy.acos, arctan=sympy.atan, sin=sympy.sin, cos=sympy.cos)
        names.update(tanh=sympy.tanh, log=sympy.log)
        self.formula = row["Formula"]
        self.expr = sympy.sympify(row["Formula"].replace("~", "-"), locals=names)
        unknown = sorted(str(s) for s in self.expr.free_symbols if str(s) not in self.ranges)
        if unknown:
            raise ValueError(f"{self.name}: the formula reads {unknown}, which the row gives no range for")
        self._numeric = sympy.lambdify(list(self.symbols.values()), self.expr, modules="numpy")

    def __call__(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(self._numeric(*(columns[v] for v in self.ranges)), dtype=float) * np.ones(
                len(next(iter(columns.values())))
            )

    def tables(self, noise: float, seed: int) -> dict[str, dict[str, list[float]]]:
        """train (noisy target), test_id and test_ood (noise-free targets), as column lists."""
        rng = np.random.default_rng(seed)

        def draw(rows: int, outside: bool) -> dict[str, np.ndarray]:
            got: dict[str, list[np.ndarray]] = {v: [] for v in self.ranges}
            have = 0
            for _ in range(100):
                cols = {}
                for v, (lo, hi) in self.ranges.items():
                    cols[v] = rng.uniform(lo, hi + (OOD_WIDEN * (hi - lo) if outside else 0.0), rows)
                y = self(cols)
                keep = np.isfinite(y)
                if outside:
                    keep &= np.any(np.column_stack([cols[v] > hi for v, (_, hi) in self.ranges.items()]), axis=1)
                for v in cols:
                    got[v].append(cols[v][keep])
                have += int(keep.sum())
                if have >= rows:
                    break
            return {v: np.concatenate(parts)[:rows] for v, parts in got.items()}

        out = {}
        for part, rows, outside in (
            ("train", TRAIN_ROWS, False),
            ("test_id", TEST_ROWS, False),
            ("test_ood", TEST_ROWS, True),
        ):
            cols = draw(rows, outside)
            y = self(cols)
            if part == "train" and noise > 0:
                y = y + noise * math.sqrt(float(np.mean(y**2))) * rng.normal(size=y.size)
            out[part] = {**{v: c.tolist() for v, c in cols.items()}, self.output_column: y.tolist()}
        return out

    @property
    def output_column(self) -> str:
        # the target's column must not be one of the inputs' names (the file's Output may be "f")
        return self.output if self.output not in self.ranges else f"{self.output}_out"


def laws(data: Path | None, every: int) -> tuple[list[Law], list[str]]:
    path = data / "feynman" / "FeynmanEquations.csv" if data else None
    if path is None or not path.is_file():
        return [], [f"laws suite skipped: feynman/FeynmanEquations.csv not under {data}"]
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("Filename")]
    out, notes = [], []
    for row in rows[::every]:
        try:
            out.append(Law(row))
        except ValueError as exc:
            notes.append(f"left out: {exc}")
    return out, notes


# ---------------------------------------------------------------------------- recovery
@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError after ``seconds`` (sympy's simplify can take minutes on a long model)."""

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def rounded(expr: Any) -> Any:
    """``expr`` with each floating constant replaced by the simplest number within ``TOLERANCE``
    of it (an integer, a small fraction, a multiple of pi), where sympy finds one."""
    import sympy

    def simplest(c: Any) -> Any:
        value = float(c)
        if value == 0.0:
            return sympy.Integer(0)
        near = sympy.nsimplify(value, [sympy.pi], tolerance=TOLERANCE * abs(value), rational=False)
        return near if abs(float(near) - value) <= TOLERANCE * abs(value) else c

    return expr.xreplace({f: simplest(f) for f in expr.atoms(sympy.Float)})


def recovered(model: Any, law: Any) -> tuple[bool, str]:
    """(whether ``model`` equals ``law`` up to constants within 1%, how it was decided)."""
    import sympy

    try:
        with _time_limit(SYMPY_SECONDS):
            m = rounded(model)
            difference = sympy.simplify(m - law)
            if not difference.free_symbols:
                return True, f"model - law = {difference}"
            ratio = sympy.simplify(m / law)
            if not ratio.free_symbols and ratio != 0:
                return True, f"model / law = {ratio}"
            # both: model = a law + b, a scale read off the derivatives along one variable
            x = sorted(law.free_symbols, key=str)[0] if law.free_symbols else None
            if x is not None:
                scale = sympy.simplify(sympy.diff(m, x) / sympy.diff(law, x))
                if not scale.free_symbols and scale != 0:
                    offset = sympy.simplify(m - scale * law)
                    if not offset.free_symbols:
                        return True, f"model = {scale} law + {offset}"
            return False, "not a constant apart"
    except TimeoutError:
        return False, f"sympy took more than {SYMPY_SECONDS} s"
    except Exception as exc:  # a model sympy cannot read: not recovered, with why
        return False, f"{type(exc).__name__}: {exc}"[:200]


def ndvm_expression(source: str, parameters: dict[str, float], law: Law) -> Any:
    """The NDVM champion as sympy over the law's symbols (program names mapped back to columns)."""
    from storage.columns import program_names
    from storage.formula import expressions

    expr = expressions(source, {k: float(v) for k, v in parameters.items() if "/" not in k})["y"]
    names = program_names(list(law.ranges))
    by_name = {s.name: s for s in expr.free_symbols}
    return expr.xreplace({by_name[names[v]]: law.symbols[v] for v in law.ranges if names[v] in by_name})


def peer_expression(method: str, text: str, law: Law) -> Any:
    """An Operon (X1, X2, ...) or gplearn (X0, X1, ...) model string as sympy over the law's symbols."""
    import sympy

    variables = list(law.symbols.values())
    if method == "operon":
        names: dict[str, Any] = {f"X{i + 1}": s for i, s in enumerate(variables)}
        names.update(exp=sympy.exp, log=sympy.log, sqrt=sympy.sqrt, sin=sympy.sin, cos=sympy.cos, abs=sympy.Abs)
        return sympy.sympify(text, locals=names)
    names = {f"X{i}": s for i, s in enumerate(variables)}
    names.update(
        add=lambda a, b: a + b,
        sub=lambda a, b: a - b,
        mul=lambda a, b: a * b,
        div=lambda a, b: a / b,  # gplearn's protected division equals a / b away from b ~ 0
        sqrt=lambda a: sympy.sqrt(sympy.Abs(a)),
        log=lambda a: sympy.log(sympy.Abs(a)),
        sin=sympy.sin,
        cos=sympy.cos,
        neg=lambda a: -a,
        inv=lambda a: 1 / a,
        abs=sympy.Abs,
    )
    return sympy.sympify(text, locals=names)


# ---------------------------------------------------------------------------- the suite
def _median(values: list[float]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else math.inf


def run_laws_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``)."""
    from ndvm_bench.common import SuiteResult, find_data_dir
    from pipeline_bench.discovery import _quiet
    from pipeline_bench.symreg_discovery import PEERS, nmse, peer_python, run_ndvm, run_peer

    _quiet()
    seconds = QUICK_SECONDS if config.quick else SECONDS
    noises = (0.0,) if config.quick else NOISES
    seeds = (config.seed,) if config.quick else SEEDS
    equations, notes = laws(find_data_dir(config), QUICK_EVERY if config.quick else EVERY)
    pythons: dict[str, Path] = {}
    for peer in PEERS if equations else ():
        python, why = peer_python(peer)
        if python is None:
            notes.append(why)
        else:
            pythons[peer] = python
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-laws-") as tmp:
        for law in equations:
            for noise in noises:
                for seed in seeds:
                    tables = law.tables(noise, seed)
                    target = law.output_column
                    where = Path(tmp) / law.name / f"{noise}-{seed}"
                    results = {"ndvm": run_ndvm(law.name, tables, seconds, where / "ndvm", seed=seed)}
                    for peer, python in pythons.items():
                        results[peer] = run_peer(peer, python, tables, seconds, where / peer, seed=seed)
                    for method, r in results.items():
                        row = {"law": law.name, "formula": law.formula, "noise": noise, "seed": seed, "method": method}
                        row["seconds"] = r.get("seconds")
                        if "error" in r:
                            runs.append({**row, "error": " ".join(map(str, r["error"]))[:300], "recovered": False})
                            continue
                        row["nmse_id"] = nmse(r["pred_id"], tables["test_id"][target])
                        row["nmse_ood"] = nmse(r["pred_ood"], tables["test_ood"][target])
                        row["complexity"] = r.get("complexity")
                        row["model"] = str(r.get("model", ""))[:300]
                        try:
                            expr = (
                                ndvm_expression(r["source"], r["parameters"], law)
                                if method == "ndvm"
                                else peer_expression(method, str(r.get("model", "")), law)
                            )
                            row["recovered"], row["how"] = recovered(expr, law.expr)
                        except Exception as exc:
                            row["recovered"], row["how"] = False, f"{type(exc).__name__}: {exc}"[:200]
                        runs.append(row)
    rows = []
    for method in ["ndvm", *pythons]:
        mine = [r for r in runs if r["method"] == method]
        if not mine:
            continue
        rows.append(
            [
                method,
                f"{sum(bool(r['recovered']) for r in mine)} / {len(mine)}",
                f"{_median([r.get('nmse_id', math.inf) for r in mine]):.3g}",
                f"{_median([r.get('nmse_ood', math.inf) for r in mine]):.3g}",
                f"{_median([r['complexity'] for r in mine if r.get('complexity') is not None]):.0f}",
                sum("error" in r for r in mine),
            ]
        )
    notes.append(
        f"{len(equations)} equations (every {QUICK_EVERY if config.quick else EVERY}th row of FeynmanEquations.csv) x "
        f"noise {', '.join(f'{n:.0%}' for n in noises)} x seeds {', '.join(map(str, seeds))}; {seconds:.0f} s per "
        "method and run (NDVM's seconds include start-up and the drain); recovered = equal to the law up to "
        "constants within 1% (sympy); NMSE on noise-free test targets"
    )
    return SuiteResult(
        name="laws",
        title=f"known laws (Feynman equations) at equal wall clock ({seconds:.0f} s): NDVM vs Operon vs gplearn",
        columns=[
            "method",
            "recovered",
            "median NMSE in-domain",
            "median NMSE out-of-domain",
            "median complexity",
            "errors",
        ],
        rows=rows,
        notes=notes,
        data={"runs": runs},
    )


__all__ = ["Law", "laws", "recovered", "rounded", "run_laws_suite"]
