"""The candidate store: every candidate once, every evaluation, the leaderboard, resumable runs.

One DuckDB file holds it all. DuckDB lets only one process open a file for writing, so the store
has exactly one writer: the discovery flow's main process. Calibration workers (threads, processes
or Dask workers) never open the store; they return their results to that process, which calls
``record``. Threads of the writer process may share one ``CandidateStore``: every public method
takes the store's lock.

Deduplication in ``add`` has two stages, both scoped to one run (a new run on other data must
calibrate its candidates again; the candidate rows themselves are stored once for all runs):

1. the canonical hash of ``ndvm.compile(source)`` (alpha-renamed, literals abstracted,
   commutative arguments ordered) catches rewrites of the same structure;
2. a semantic fingerprint (outputs at fixed probe parameters and the run's probe inputs, see
   ``storage.fingerprint``) catches different structures that compute the same function.

Across runs, the program library (``storage.library``) takes over: a candidate that an earlier
run on the same dataset fingerprint already evaluated gets that evaluation copied into the new run
(``evaluations.reused_from``) instead of a calibration, and a new run starts from the earlier
runs' best programs. ``runs.dataset_fingerprint`` and ``runs.seed`` record what it matches by.

Sources that do not compile are recorded as ``invalid`` with their typed error and position.
Every proposal is logged with its outcome, so a run's counters are derived from the tables and a
reopened store reports exactly what the crashed process had committed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

from storage.fingerprint import fingerprint
from storage.parsimony import candidate_complexity

# store_error: the proposal could not be stored (a DuckDB write error); recorded with the error
OUTCOMES = ("new", "duplicate_hash", "duplicate_semantic", "invalid", "store_error")
# The origin of a program a run started from out of the program library (storage/library.py).
LIBRARY_ORIGIN = "library"
# The origin of a task's reference programs (``Task.reference_programs``), added to every new run.
REFERENCE_ORIGIN = "reference"
# What a calibrated candidate became: ok -> calibrated; crashed (killed its worker twice, the
# second time alone) and timeout (over --candidate-seconds alone) are final like failed.
FINAL_STATES = {"ok": "calibrated", "crashed": "crashed", "timeout": "timeout"}

# Metric direction by name (any "_"-separated word of it, e.g. "mean_rmse" -> "rmse").
LOWER_IS_BETTER = {"mse", "rmse", "mae", "mape", "nll", "loss", "aic", "bic", "crps", "error", "seconds"}
HIGHER_IS_BETTER = {"r2", "acc", "corr", "correlation", "skill", "loglik", "likelihood", "accuracy"}


class StoreError(Exception):
    """A misuse of the store: an unknown run or candidate, a malformed proposal or result."""


class StoreLockedError(StoreError):
    """Another process holds the DuckDB file (a discovery run is writing to it)."""


class StoreCorruptError(StoreError):
    """The DuckDB file is damaged (a checksum that does not match, a file cut short, a header that
    is not DuckDB's). ``ndvm store check`` says what is readable, ``ndvm store repair`` keeps it."""


# DuckDB's words for a lock held by another process (2.x: "Could not set lock on file ...:
# Conflicting lock is held in ... (PID n)"). Any other refusal to open is damage (storage/health.py).
_LOCK_WORDS = ("could not set lock", "conflicting lock")


def recovery_hint(path: Path) -> str:
    folder = path.parent
    return (
        f"`ndvm store check --folder {folder}` lists what is readable; `ndvm store repair --folder {folder}` keeps it"
    )


def open_error(path: Path, error: BaseException) -> StoreError:
    """The typed error for a store file DuckDB refused to open: the lock message only for a lock."""
    text = str(error)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    first = lines[0][:300] if lines else type(error).__name__
    if any(w in text.lower() for w in _LOCK_WORDS):
        return StoreLockedError(
            f"cannot open the candidate store {path}: another process holds it (DuckDB allows one writer; "
            f"is a discovery run still writing to it? Wait for it, or stop it): {first}"
        )
    if "no space left on device" in text.lower():
        return StoreError(f"cannot open the candidate store {path}: the disk is full ({first})")
    return StoreCorruptError(
        f"the candidate store {path} is damaged and cannot be opened ({first}); {recovery_hint(path)}"
    )


class MetricDirectionError(StoreError):
    """A metric whose direction (higher or lower is better) is not known and was not given."""


def metric_higher_is_better(metric: str) -> bool:
    """Whether larger values of ``metric`` are better, from its name: the first known word of it
    ("heldout.rmse", "mean_rmse", "rmse_lead3" -> False; "r2", "acc_lead6" -> True)."""
    base = metric.split(".")[-1].lower()
    for word in [base, *base.split("_")]:
        if word in LOWER_IS_BETTER:
            return False
        if word in HIGHER_IS_BETTER:
            return True
    raise MetricDirectionError(
        f"metric {metric!r}: direction unknown; pass higher_is_better=True or False "
        f"(known lower-is-better: {sorted(LOWER_IS_BETTER)}; higher-is-better: {sorted(HIGHER_IS_BETTER)})"
    )


@dataclass
class Candidate:
    """A candidate a run must calibrate: returned by ``add`` (the new ones) and ``pending``."""

    hash: str
    source: str
    canonical_form: str
    origin: str | None
    parents: list[str]
    fingerprint: str | None
    program: Any  # ndvm.Program, compiled once here so the caller need not compile again
    program_source: str | None = None  # what was compiled, when a wrapper made it differ from source
    # The proposal's own text when it differs from ``source``: a candidate the store already had
    # from an earlier run is calibrated as stored (see ``add``); None: the proposal is ``source``.
    proposed_source: str | None = None


@dataclass
class EvaluationResult:
    """One calibration and held-out scoring of a candidate, as handed to ``record``.

    ``train_metrics`` / ``heldout_metrics`` map metric names to floats (e.g. {"rmse": 0.41}). The
    held-out metrics are those of the VALIDATION split (the search ranks and selects by them; the
    test split is scored once at the end of a run into ``test_scores``, see ``record_test_scores``).
    The run's ranking metric must be among the held-out metrics when ``status == "ok"``.
    ``loss_history`` (the best restart's loss per step) is kept for the loss-curve plot.
    """

    candidate: str
    run_id: str
    dataset: str
    task: str
    split: str
    parameters: dict[str, float]
    train_metrics: dict[str, float]
    heldout_metrics: dict[str, float]
    seconds: float
    status: str = "ok"
    error: str | None = None
    loss_history: list[float] | None = None

    @classmethod
    def from_fit(
        cls,
        fit: Any,
        *,
        candidate: str,
        run_id: str,
        dataset: str,
        task: str,
        split: str,
        train_metrics: Mapping[str, float],
        heldout_metrics: Mapping[str, float],
    ) -> EvaluationResult:
        """Build a result from an ``ndvm.Fit`` and the task's metrics."""
        history = getattr(fit, "history", None)
        return cls(
            candidate=candidate,
            run_id=run_id,
            dataset=dataset,
            task=task,
            split=split,
            parameters={k: float(v) for k, v in (fit.params or {}).items()},
            train_metrics=dict(train_metrics),
            heldout_metrics=dict(heldout_metrics),
            seconds=float(fit.seconds),
            status="ok" if fit.error is None else "error",
            error=fit.error,
            loss_history=None if history is None else [float(v) for v in np.asarray(history).ravel()],
        )


@dataclass
class FinalTestScore:
    """A test-split score of a leaderboard entry or of a reference model (see ``record_test_scores``).

    ``entry``: the candidate hash (``entry_kind="candidate"``) or the reference's name
    (``entry_kind="reference"``). ``validation_metrics`` / ``test_metrics`` are flat name -> float.
    """

    entry: str
    entry_kind: str
    test_metrics: dict[str, float]
    validation_metrics: dict[str, float] = field(default_factory=dict)
    parameters: Any = None
    validation_rank: int | None = None
    status: str = "ok"
    error: str | None = None


@dataclass
class RunStatus:
    """A run's state as the store knows it (the counters are computed from the tables)."""

    run_id: str
    status: str
    created: _dt.datetime
    updated: _dt.datetime
    dataset: str | None
    task: str | None
    proposer: str | None
    model: str | None
    metric: str
    higher_is_better: bool
    config: dict[str, Any]
    budget: dict[str, Any]
    semantic_dedup: bool
    mlflow_run_id: str | None
    proposed: int = 0
    new: int = 0
    duplicate_hash: int = 0
    duplicate_semantic: int = 0
    invalid: int = 0
    calibrated: int = 0
    failed: int = 0
    pending: int = 0
    crashed: int = 0  # killed its worker process, then again alone: never retried
    timeout: int = 0  # over the run's per-candidate time limit alone
    store_errors: int = 0  # proposals the store could not write (recorded with the error)
    best_score: float | None = None
    best_hash: str | None = None
    llm_cost_usd: float | None = None  # all sessions of the run together (None: no LLM cost recorded)
    llm_tokens_in: int | None = None
    llm_tokens_out: int | None = None
    llm_tokens_cached: int | None = None  # of llm_tokens_in, served from the provider's prompt cache
    seed: int | None = None  # the run's seed (drawn unless given), None before it was recorded
    dataset_fingerprint: str | None = None  # storage/fingerprint.dataset_fingerprint, None: not recorded
    reused: int = 0  # evaluations copied from earlier runs on the same fingerprint (storage/library.py)
    seeded: int = (
        0  # programs the run started from: earlier runs' best (origin "library"), the task's references ("reference")
    )

    @property
    def duplicates(self) -> int:
        return self.duplicate_hash + self.duplicate_semantic

    @property
    def elapsed_seconds(self) -> float:
        return (self.updated - self.created).total_seconds()


_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential", "auth")
# Names that look secret but are not, and that a resume needs back as they were: the NAME of the
# variable holding the key, and the prices (redacted, a resumed priced run could not start).
_NOT_SECRET = frozenset({"api_key_env", "price_per_token"})


def redact(config: Any) -> Any:
    """A copy of ``config`` with the values of secret-looking keys (api_key, token, ...) replaced by
    "***": configurations are stored and logged, secrets must never be."""
    if isinstance(config, Mapping):
        return {
            k: "***"
            if k not in _NOT_SECRET and any(w in str(k).lower() for w in _SECRET_WORDS) and v not in (None, "")
            else redact(v)
            for k, v in config.items()
        }
    if isinstance(config, (list, tuple)):
        return [redact(v) for v in config]
    return config


def default_store_path(run_folder: str | Path = "runs") -> Path:
    """Where the flow and ``ndvm leaderboard`` keep the store unless told otherwise."""
    return Path(run_folder) / "candidates.duckdb"


def snapshot_path(store_path: str | Path) -> Path:
    """The read-only copy a writing run keeps of its store (``runs/candidates.snapshot.duckdb``):
    DuckDB lets no other process open the store while the run writes, so readers open this."""
    path = Path(store_path)
    return path.with_name(f"{path.stem}.snapshot{path.suffix or '.duckdb'}")


# How often (seconds) a discovery run refreshes its snapshot when the store changed; at most
# once per 20 times the last copy took (CandidateStore._keep_snapshot).
SNAPSHOT_SECONDS = 10.0
_SNAPSHOT_WAIT_FACTOR = 20.0

# A cheap token of what readers see: it changes whenever a proposal, evaluation, test score, run
# state or logged MLflow run is written, so an idle run does not copy its store again.
_CHANGE_TOKEN = """
SELECT (SELECT count(*) FROM proposals), (SELECT count(*) FROM evaluations),
       (SELECT count(*) FROM test_scores), (SELECT count(*) FROM run_candidates WHERE state = 'pending'),
       (SELECT count(mlflow_run_id) FROM run_candidates),
       (SELECT md5(coalesce(string_agg(run_id || status || updated || coalesce(mlflow_run_id, ''), ','), ''))
        FROM runs)
"""


def open_for_reading(store_path: str | Path) -> tuple[CandidateStore, str | None]:
    """The store, read-only, for a command that reads while a run may write (leaderboard, report).

    Returns ``(store, note)``: the store itself when no process holds it (``note`` None), else the
    snapshot the writing run keeps current (``snapshot_path``) and a note saying how old it is.
    Raises ``StoreLockedError`` when the store is held and there is no snapshot (a run started by
    an older version), ``StoreError`` when there is no store."""
    try:
        return CandidateStore(store_path, read_only=True), None
    except StoreLockedError:
        snap = snapshot_path(store_path)
        if not snap.is_file():
            raise
    # the writer replaces the snapshot atomically (os.replace): this opens one whole copy
    store = CandidateStore(snap, read_only=True)
    age = _dt.datetime.now().timestamp() - snap.stat().st_mtime
    note = (
        f"a run is writing to {store_path}: read from its snapshot {snap}, taken {age:.0f} s ago "
        f"(refreshed every {SNAPSHOT_SECONDS:g} s or more while the store changes)"
    )
    return store, note


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC).replace(tzinfo=None)


def _encode_inputs(inputs: Mapping[str, Any] | None) -> str | None:
    """Probe inputs as JSON (name -> {"shape", "data"}) so a resumed run probes exactly the same."""
    if inputs is None:
        return None
    encoded = {}
    for name, value in inputs.items():
        array = np.asarray(value, dtype=np.float64)
        encoded[name] = {"shape": list(array.shape), "data": array.ravel().tolist()}
    return json.dumps(encoded)


def _decode_inputs(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    decoded = {}
    for name, item in json.loads(text).items():
        array = np.asarray(item["data"], dtype=np.float64).reshape(item["shape"])
        decoded[name] = float(array) if array.ndim == 0 else array
    return decoded


def _normalize_proposal(proposal: Any) -> tuple[str, str | None, list[str]]:
    """(source, origin label, parent hashes) from a str, a mapping or a Proposal-like object.

    A proposal's origin may be a plain label or a structure with ``proposer``, ``model`` and
    ``parents`` (the proposers' ``Origin``); the label is "proposer" or "proposer:model".
    """
    if isinstance(proposal, str):
        return proposal, None, []

    def get(obj: Any, name: str) -> Any:
        if isinstance(obj, Mapping):
            return obj.get(name)
        return getattr(obj, name, None)

    source = get(proposal, "source")
    if source is None:
        source = get(proposal, "src")
    if not isinstance(source, str):
        raise StoreError(f"proposal {proposal!r} has no source text (expected a str, or a 'source' field)")
    origin = get(proposal, "origin")
    parents = get(proposal, "parents") or get(proposal, "parent_hashes")
    label: str | None
    if origin is None or isinstance(origin, str):
        label = origin
    else:
        proposer, model = get(origin, "proposer"), get(origin, "model")
        label = str(proposer) if proposer is not None else type(origin).__name__
        if model:
            label += f":{model}"
        parents = parents or get(origin, "parents") or get(origin, "parent_hashes")
    return source, label, [str(p) for p in (parents or [])]


def _simplified_from(proposal: Any) -> str | None:
    """The text as proposed of a proposal that was simplified before it was stored, else None."""
    value = (
        proposal.get("simplified_from") if isinstance(proposal, Mapping) else getattr(proposal, "simplified_from", None)
    )
    return value if isinstance(value, str) else None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id            VARCHAR PRIMARY KEY,
    status            VARCHAR NOT NULL,     -- running | finished | failed | interrupted
    created           TIMESTAMP NOT NULL,
    updated           TIMESTAMP NOT NULL,
    dataset           VARCHAR,
    task              VARCHAR,
    proposer          VARCHAR,
    model             VARCHAR,
    config            JSON,
    budget            JSON,
    metric            VARCHAR NOT NULL,     -- held-out metric the leaderboard ranks by
    higher_is_better  BOOLEAN NOT NULL,
    probe_inputs      JSON,                 -- NULL: semantic dedup off for this run
    mlflow_run_id     VARCHAR
);
CREATE TABLE IF NOT EXISTS candidates (
    hash            VARCHAR PRIMARY KEY,    -- ndvm canonical_hash
    canonical_form  VARCHAR NOT NULL,
    source          VARCHAR NOT NULL,       -- the first source seen with this hash
    program_source  VARCHAR,                -- the text compiled, when add(program_source=...) wrapped it
    origin          VARCHAR,
    parents         JSON,                   -- list of parent candidate hashes
    param_names     JSON,
    inputs          JSON,
    created         TIMESTAMP NOT NULL
);
-- atoms of the candidate's canonical form (storage/parsimony.py); added after the first release
ALTER TABLE candidates ADD COLUMN IF NOT EXISTS complexity INTEGER;
-- what the run's LLM calls cost so far, kept across resumes so --max-cost bounds the whole run
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_cost_usd DOUBLE;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_tokens_in BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_tokens_out BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS llm_tokens_cached BIGINT;
CREATE SEQUENCE IF NOT EXISTS proposal_ids;
CREATE TABLE IF NOT EXISTS proposals (      -- every proposal of every run, with what became of it
    id            BIGINT PRIMARY KEY DEFAULT nextval('proposal_ids'),
    run_id        VARCHAR NOT NULL,
    created       TIMESTAMP NOT NULL,
    source        VARCHAR NOT NULL,
    origin        VARCHAR,
    parents       JSON,
    outcome       VARCHAR NOT NULL,         -- new | duplicate_hash | duplicate_semantic | invalid
    hash          VARCHAR,
    duplicate_of  VARCHAR,                  -- the run's candidate it duplicates
    error_kind    VARCHAR,                  -- ParseError | CheckError | ...
    error         VARCHAR,
    error_line    INTEGER,
    error_column  INTEGER
);
CREATE TABLE IF NOT EXISTS run_candidates ( -- the candidates a run accepted, and their state
    run_id          VARCHAR NOT NULL,
    hash            VARCHAR NOT NULL,
    fingerprint     VARCHAR,
    probe_note      VARCHAR,                -- why no fingerprint was taken, if none was
    state           VARCHAR NOT NULL,       -- pending | calibrated | failed | crashed | timeout
    added           TIMESTAMP NOT NULL,
    mlflow_run_id   VARCHAR,                -- nested MLflow run, once logged
    PRIMARY KEY (run_id, hash)
);
CREATE SEQUENCE IF NOT EXISTS evaluation_ids;
CREATE TABLE IF NOT EXISTS evaluations (
    id               BIGINT PRIMARY KEY DEFAULT nextval('evaluation_ids'),
    candidate        VARCHAR NOT NULL,
    run_id           VARCHAR NOT NULL,
    dataset          VARCHAR,
    task             VARCHAR,
    split            VARCHAR,
    parameters       JSON,
    train_metrics    JSON,
    heldout_metrics  JSON,
    score            DOUBLE,                -- heldout_metrics[run.metric], for ranking
    loss_history     JSON,
    seconds          DOUBLE,
    status           VARCHAR NOT NULL,      -- ok | error | ...
    error            VARCHAR,
    created          TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS test_scores (  -- test-split metrics, computed once at the END of a run
    run_id              VARCHAR NOT NULL,
    entry               VARCHAR NOT NULL,   -- candidate hash, or the reference model's name
    entry_kind          VARCHAR NOT NULL,   -- candidate | reference
    validation_rank     INTEGER,            -- the candidate's leaderboard rank when it was scored
    parameters          JSON,               -- what was scored (candidates: the stored fit)
    validation_metrics  JSON,               -- the same entry's validation metrics (references: fitted here)
    validation_score    DOUBLE,             -- validation_metrics[run.metric]
    test_metrics        JSON,
    test_score          DOUBLE,             -- test_metrics[run.metric]; never used to rank or select
    status              VARCHAR NOT NULL,   -- ok | error
    error               VARCHAR,
    created             TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, entry_kind, entry)
);
-- the program library (storage/library.py): a run's dataset fingerprint (storage/fingerprint.py),
-- what went into it, and the run's seed; an evaluation copied from an earlier run on the same
-- fingerprint names the run that calibrated it (NULL: calibrated in its own run)
ALTER TABLE runs ADD COLUMN IF NOT EXISTS dataset_fingerprint VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS fingerprint_parts JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS seed BIGINT;
ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS reused_from VARCHAR;
-- a proposal the admit stage simplified (proposers/simplify.py) keeps the text as proposed
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS simplified_from VARCHAR;
CREATE OR REPLACE VIEW leaderboard AS
WITH ranked AS (
    SELECT e.run_id, e.candidate AS hash, c.source, c.origin, e.dataset, e.task, e.split,
           r.metric, e.score, e.parameters, e.train_metrics, e.heldout_metrics, e.seconds,
           e.created, e.id AS evaluation_id,
           CASE WHEN r.higher_is_better THEN -e.score ELSE e.score END AS sort_key
    FROM evaluations e
    JOIN runs r ON r.run_id = e.run_id
    JOIN candidates c ON c.hash = e.candidate
    WHERE e.status = 'ok' AND e.score IS NOT NULL AND isfinite(e.score)
), best_per_candidate AS (
    SELECT * FROM ranked
    QUALIFY row_number() OVER (PARTITION BY run_id, hash ORDER BY sort_key, evaluation_id) = 1
)
SELECT rank() OVER (PARTITION BY b.run_id ORDER BY b.sort_key) AS rank, b.* EXCLUDE (sort_key),
       t.test_score, t.test_metrics  -- NULL until the run's end scores its top k; never in the ORDER BY
FROM best_per_candidate b
LEFT JOIN test_scores t ON t.run_id = b.run_id AND t.entry_kind = 'candidate' AND t.entry = b.hash;
"""


_PROPOSAL_COLUMNS = (
    "run_id",
    "created",
    "source",
    "origin",
    "parents",
    "outcome",
    "hash",
    "duplicate_of",
    "error_kind",
    "error",
    "error_line",
    "error_column",
    "simplified_from",
)
_CANDIDATE_COLUMNS = (
    "hash",
    "canonical_form",
    "source",
    "program_source",
    "origin",
    "parents",
    "param_names",
    "inputs",
    "created",
    "complexity",
)
_MEMBER_COLUMNS = ("run_id", "hash", "fingerprint", "probe_note", "state", "added", "mlflow_run_id")
_TEST_SCORE_COLUMNS = (
    "run_id",
    "entry",
    "entry_kind",
    "validation_rank",
    "parameters",
    "validation_metrics",
    "validation_score",
    "test_metrics",
    "test_score",
    "status",
    "error",
    "created",
)
_EVALUATION_COLUMNS = (
    "candidate",
    "run_id",
    "dataset",
    "task",
    "split",
    "parameters",
    "train_metrics",
    "heldout_metrics",
    "score",
    "loss_history",
    "seconds",
    "status",
    "error",
    "created",
)


@dataclass
class _RunIndex:
    hashes: set[str]
    fingerprints: dict[str, str]  # fingerprint -> the first candidate hash that had it


class CandidateStore:
    """One DuckDB file: runs, candidates, proposals, evaluations and the leaderboard view.

    Open it in the single writer process only (see the module docstring). Use it as a context
    manager or call ``close()``; every public method commits before it returns. ``read_only=True``
    is for readers such as ``ndvm leaderboard``: DuckDB refuses it while a writer holds the file.
    """

    def __init__(self, path: str | Path, read_only: bool = False, snapshot_seconds: float | None = None):
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.is_file():
            raise StoreError(f"no candidate store at {self.path}")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as error:
            raise open_error(self.path, error) from error
        self._lock = threading.RLock()
        self._probe_cache: dict[str, dict[str, Any] | None] = {}
        self._indexes: dict[str, _RunIndex] = {}
        self._metric_cache: dict[str, str] = {}
        self._columns: dict[tuple[str, str], bool] = {}
        if not read_only:
            with self._lock:
                self._con.sql(_SCHEMA)
        # A writer may keep a snapshot for readers (``open_for_reading``): a thread refreshes it
        # every ``snapshot_seconds`` when the store changed, and close() takes a last one.
        self._snapshot_token: Any = None
        self._snapshot_stop = threading.Event()
        self._snapshot_thread: threading.Thread | None = None
        if snapshot_seconds is not None and not read_only:
            self.snapshot()
            self._snapshot_thread = threading.Thread(
                target=self._keep_snapshot, args=(float(snapshot_seconds),), name="store-snapshot", daemon=True
            )
            self._snapshot_thread.start()

    # ---- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        try:
            if self._snapshot_thread is not None:
                self._snapshot_stop.set()
                self._snapshot_thread.join()
                self._snapshot_thread = None
                self.snapshot()
        except Exception as exc:  # a full disk, a store DuckDB gave up on: readers keep the older copy,
            import logging  # and the store is closed all the same (the error that stopped the run stays the one reported)

            logging.getLogger(__name__).warning("store snapshot at close failed: %s: %s", type(exc).__name__, exc)
        finally:
            with self._lock:
                self._con.close()

    def snapshot(self, force: bool = False) -> bool:
        """Copy the store to ``snapshot_path(self.path)`` when it changed since the last copy (or
        ``force``); the copy is written aside and renamed over the old one, so a reader opens either
        the old or the new snapshot, never a half-written one. Returns whether it copied."""
        with self._lock:
            token = self._con.sql(_CHANGE_TOKEN).fetchall()
            if not force and token == self._snapshot_token:
                return False
            target = snapshot_path(self.path)
            partial = target.with_name(target.name + ".partial")
            for stale in (partial, partial.with_name(partial.name + ".wal")):
                stale.unlink(missing_ok=True)
            [(name,)] = self._con.sql("SELECT current_database()").fetchall()
            quoted = str(partial).replace("'", "''")
            self._con.execute(f"ATTACH '{quoted}' AS ndvm_snapshot")
            try:
                self._con.execute(f'COPY FROM DATABASE "{name}" TO ndvm_snapshot')
            finally:
                self._con.execute("DETACH ndvm_snapshot")
            partial.replace(target)
            self._snapshot_token = token
            return True

    def _keep_snapshot(self, seconds: float) -> None:
        # The copy holds the store's lock (0.6 s for a 4.5 MB store of one 2-minute run on a busy
        # 2-core machine): waiting 20 copies' time between copies keeps the writer's stall under 5%
        # however large the library grows.
        wait = seconds
        while not self._snapshot_stop.wait(wait):
            started = time.monotonic()
            try:
                self.snapshot()
            except Exception as exc:  # a failed copy must not stop the run; readers see an older one
                import logging

                logging.getLogger(__name__).warning("store snapshot failed: %s: %s", type(exc).__name__, exc)
            wait = max(seconds, _SNAPSHOT_WAIT_FACTOR * (time.monotonic() - started))

    def __enter__(self) -> CandidateStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """Commit on success, roll back on any error: a batch is stored whole or not at all."""
        self._con.begin()
        try:
            yield
        except BaseException:
            self._con.rollback()
            raise
        self._con.commit()

    # ---- runs ------------------------------------------------------------------------------
    def start_run(
        self,
        run_id: str | None = None,
        *,
        dataset: str | None = None,
        task: str | None = None,
        proposer: str | None = None,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        budget: Mapping[str, Any] | None = None,
        metric: str = "rmse",
        higher_is_better: bool | None = None,
        probe_inputs: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a run and return its id (a new uuid-based id when none is given).

        ``metric`` is the held-out metric the leaderboard ranks by; its direction comes from its
        name unless ``higher_is_better`` is given. ``probe_inputs`` (name -> scalar or array) are
        the inputs of the semantic fingerprint; without them the run deduplicates by canonical
        hash only.
        """
        if higher_is_better is None:
            higher_is_better = metric_higher_is_better(metric)
        run_id = run_id or f"run-{_now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
        now = _now()
        with self._lock:
            if self._run_row(run_id) is not None:
                raise StoreError(f"run {run_id!r} already exists in {self.path}; use resume({run_id!r})")
            self._con.sql(
                "INSERT INTO runs (run_id, status, created, updated, dataset, task, proposer, model, config, budget, "
                "metric, higher_is_better, probe_inputs, mlflow_run_id) "
                "VALUES ($1, 'running', $2, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)",
                params=[
                    run_id,
                    now,
                    dataset,
                    task,
                    proposer,
                    model,
                    json.dumps(redact(dict(config or {})), default=str),
                    json.dumps(redact(dict(budget or {})), default=str),
                    metric,
                    higher_is_better,
                    _encode_inputs(probe_inputs),
                ],
            )
        return run_id

    def resume(self, run_id: str) -> RunStatus:
        """Mark an existing run as running again and return its restored state; ``pending(run_id)``
        then lists the candidates it accepted but never calibrated."""
        with self._lock:
            self._require_run(run_id)
            self._con.sql("UPDATE runs SET status = 'running', updated = $2 WHERE run_id = $1", params=[run_id, _now()])
            return self.run_status(run_id)

    def set_run_status(self, run_id: str, status: str) -> None:
        """Set a run's status: running, finished, failed or interrupted."""
        if status not in ("running", "finished", "failed", "interrupted"):
            raise StoreError(f"unknown run status {status!r}")
        with self._lock:
            self._require_run(run_id)
            self._con.sql(
                "UPDATE runs SET status = $2, updated = $3 WHERE run_id = $1", params=[run_id, status, _now()]
            )

    def set_llm_usage(
        self,
        run_id: str,
        cost_usd: float | None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        tokens_cached: int | None = None,
    ) -> None:
        """Store the run's LLM spend so far (totals over all its sessions, not increments);
        ``tokens_cached``: the prompt tokens the provider served from its prompt cache."""
        with self._lock:
            self._require_run(run_id)
            self._con.sql(
                "UPDATE runs SET llm_cost_usd = $2, llm_tokens_in = $3, llm_tokens_out = $4, "
                "llm_tokens_cached = $5 WHERE run_id = $1",
                params=[run_id, cost_usd, tokens_in, tokens_out, tokens_cached],
            )

    def set_run_library(
        self,
        run_id: str,
        *,
        seed: int | None,
        dataset_fingerprint: str | None,
        fingerprint_parts: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the run's seed and its dataset fingerprint (what storage/library.py matches
        earlier runs by; ``fingerprint_parts``: what went into it, kept to explain a non-match)."""
        with self._lock:
            self._require_run(run_id)
            self._con.sql(
                "UPDATE runs SET seed = $2, dataset_fingerprint = $3, fingerprint_parts = $4 WHERE run_id = $1",
                params=[
                    run_id,
                    seed,
                    dataset_fingerprint,
                    None if fingerprint_parts is None else json.dumps(dict(fingerprint_parts), default=str),
                ],
            )

    def set_mlflow_run(self, run_id: str, mlflow_run_id: str) -> None:
        """Remember the run's MLflow parent run, so a resumed run keeps logging into it."""
        with self._lock:
            self._require_run(run_id)
            self._con.sql("UPDATE runs SET mlflow_run_id = $2 WHERE run_id = $1", params=[run_id, mlflow_run_id])

    def mark_logged(self, run_id: str, candidate: str, mlflow_run_id: str) -> None:
        """Remember that a leaderboard entry was logged as a nested MLflow run."""
        with self._lock:
            self._con.sql(
                "UPDATE run_candidates SET mlflow_run_id = $3 WHERE run_id = $1 AND hash = $2",
                params=[run_id, candidate, mlflow_run_id],
            )

    def logged(self, run_id: str) -> dict[str, str]:
        """candidate hash -> nested MLflow run id, for the run's entries already logged."""
        with self._lock:
            rows = self._con.sql(
                "SELECT hash, mlflow_run_id FROM run_candidates WHERE run_id = $1 AND mlflow_run_id IS NOT NULL",
                params=[run_id],
            ).fetchall()
        return dict(rows)

    def runs(self) -> pl.DataFrame:
        """All runs, newest first."""
        with self._lock:
            return self._con.sql(
                "SELECT run_id, status, created, updated, dataset, task, proposer, model, "
                "metric FROM runs ORDER BY created DESC"
            ).pl()

    def latest_run(self) -> str | None:
        with self._lock:
            rows = self._con.sql("SELECT run_id FROM runs ORDER BY created DESC LIMIT 1").fetchall()
        return rows[0][0] if rows else None

    def _run_row(self, run_id: str) -> dict[str, Any] | None:
        rel = self._con.sql("SELECT * FROM runs WHERE run_id = $1", params=[run_id])
        names = rel.columns
        rows = rel.fetchall()
        return dict(zip(names, rows[0])) if rows else None

    def _require_run(self, run_id: str) -> dict[str, Any]:
        row = self._run_row(run_id)
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return row

    def _run_metric(self, run_id: str) -> str:
        if run_id not in self._metric_cache:
            self._metric_cache[run_id] = self._require_run(run_id)["metric"]
        return self._metric_cache[run_id]

    def probe_inputs(self, run_id: str) -> dict[str, Any] | None:
        """The run's probe inputs, as stored (None: semantic dedup off)."""
        with self._lock:
            if run_id not in self._probe_cache:
                self._probe_cache[run_id] = _decode_inputs(self._require_run(run_id)["probe_inputs"])
            return self._probe_cache[run_id]

    def run_status(self, run_id: str) -> RunStatus:
        """The run's configuration and its counters, computed from what was committed."""
        with self._lock:
            row = self._require_run(run_id)
            outcomes = dict(
                self._con.sql(
                    "SELECT outcome, count(*) FROM proposals WHERE run_id = $1 GROUP BY outcome", params=[run_id]
                ).fetchall()
            )
            states = dict(
                self._con.sql(
                    "SELECT state, count(*) FROM run_candidates WHERE run_id = $1 GROUP BY state", params=[run_id]
                ).fetchall()
            )
            best = self._con.sql(
                "SELECT score, hash FROM leaderboard WHERE run_id = $1 ORDER BY rank, hash LIMIT 1", params=[run_id]
            ).fetchall()
            reused = (
                self._con.sql(
                    "SELECT count(*) FROM evaluations WHERE run_id = $1 AND reused_from IS NOT NULL", params=[run_id]
                ).fetchall()[0][0]
                if self._has_column("evaluations", "reused_from")
                else 0
            )
            seeded = self._con.sql(
                "SELECT count(*) FROM proposals WHERE run_id = $1 AND outcome = 'new' AND origin IN ($2, $3)",
                params=[run_id, LIBRARY_ORIGIN, REFERENCE_ORIGIN],
            ).fetchall()[0][0]
        return RunStatus(
            run_id=run_id,
            status=row["status"],
            created=row["created"],
            updated=row["updated"],
            dataset=row["dataset"],
            task=row["task"],
            proposer=row["proposer"],
            model=row["model"],
            metric=row["metric"],
            higher_is_better=row["higher_is_better"],
            config=json.loads(row["config"] or "{}"),
            budget=json.loads(row["budget"] or "{}"),
            semantic_dedup=row["probe_inputs"] is not None,
            mlflow_run_id=row["mlflow_run_id"],
            proposed=sum(outcomes.values()),
            new=outcomes.get("new", 0),
            duplicate_hash=outcomes.get("duplicate_hash", 0),
            duplicate_semantic=outcomes.get("duplicate_semantic", 0),
            invalid=outcomes.get("invalid", 0),
            calibrated=states.get("calibrated", 0),
            failed=states.get("failed", 0),
            pending=states.get("pending", 0),
            crashed=states.get("crashed", 0),
            timeout=states.get("timeout", 0),
            store_errors=outcomes.get("store_error", 0),
            best_score=best[0][0] if best else None,
            best_hash=best[0][1] if best else None,
            # .get: a store opened read-only may predate these columns
            llm_cost_usd=row.get("llm_cost_usd"),
            llm_tokens_in=row.get("llm_tokens_in"),
            llm_tokens_out=row.get("llm_tokens_out"),
            llm_tokens_cached=row.get("llm_tokens_cached"),
            seed=row.get("seed"),
            dataset_fingerprint=row.get("dataset_fingerprint"),
            reused=reused,
            seeded=seeded,
        )

    def _has_column(self, table: str, column: str) -> bool:
        """Whether the file has this column (a store opened read-only may predate a migration)."""
        key = (table, column)
        if key not in self._columns:
            self._columns[key] = bool(
                self._con.sql(
                    "SELECT count(*) FROM duckdb_columns() WHERE table_name = $1 AND column_name = $2",
                    params=[table, column],
                ).fetchall()[0][0]
            )
        return self._columns[key]

    # ---- candidates ------------------------------------------------------------------------
    def record_store_error(self, run_id: str, proposal: Any, error: BaseException) -> None:
        """Record a proposal that ``add`` could not store (outcome ``store_error``) with its error.
        The source is kept with characters DuckDB cannot hold (lone surrogates from a JSON reply)
        escaped, so the row itself can be written."""
        try:
            source, origin, parents = _normalize_proposal(proposal)
        except StoreError:
            source, origin, parents = repr(proposal), None, []
        safe = source.encode("utf-8", "backslashreplace").decode("utf-8")
        message = f"{type(error).__name__}: {error}".encode("utf-8", "backslashreplace").decode("utf-8")[:2000]
        now = _now()
        with self._lock, self._transaction():
            self._touch(run_id, now)
            self._insert(
                "proposals",
                _PROPOSAL_COLUMNS,
                [
                    [
                        run_id,
                        now,
                        safe,
                        origin,
                        json.dumps(parents),
                        "store_error",
                        None,
                        None,
                        type(error).__name__,
                        message,
                        None,
                        None,
                        _simplified_from(proposal),
                    ]
                ],
            )

    def add(
        self, proposals: Iterable[Any], run_id: str, program_source: Callable[[str], str] | None = None
    ) -> list[Candidate]:
        """Record proposals for a run; return only the new candidates, in proposal order.

        A proposal is a source string, a mapping with ``source`` (and optional ``origin``,
        ``parents``), or an object with those attributes. Invalid sources are recorded with their
        error; duplicates (by canonical hash, then by semantic fingerprint) are counted. The whole
        batch is one transaction.

        ``program_source`` turns a candidate into the program to compile when the task wraps
        candidates (the forecast task appends its driver: pass ``task.program_source``); the text
        compiled is stored too, so ``pending`` works after a restart without the wrapper. A
        ``ValueError`` from it (the tasks' ``CandidateError``) marks the proposal invalid.
        """
        import ndvm

        proposals = list(proposals)
        items = [_normalize_proposal(p) for p in proposals]
        simplified_from = [_simplified_from(p) for p in proposals]
        probes = self.probe_inputs(run_id)
        compiled: list[tuple[str, str | None, list[str], Any, Exception | None]] = []
        for source, origin, parents in items:  # compiling needs no lock: it touches no table
            try:
                text = source if program_source is None else program_source(source)
                compiled.append((source, origin, parents, ndvm.compile(text), None))
            except (ndvm.NDVMError, ValueError, TypeError) as error:  # TypeError: text the runtime cannot
                compiled.append((source, origin, parents, None, error))  # take (lone surrogates): invalid

        new: list[Candidate] = []
        now = _now()
        with self._lock:
            index = self._run_index(run_id)
            hashes, fingerprints = set(index.hashes), dict(index.fingerprints)  # committed on success only
            proposal_rows, candidate_rows, member_rows = [], [], []
            for (source, origin, parents, program, error), before in zip(compiled, simplified_from):
                row = [run_id, now, source, origin, json.dumps(parents)]
                if program is None:
                    proposal_rows.append(
                        row
                        + [
                            "invalid",
                            None,
                            None,
                            type(error).__name__,
                            getattr(error, "message", str(error)),
                            getattr(error, "line", None),
                            getattr(error, "column", None),
                            before,
                        ]
                    )
                    continue
                digest = program.canonical_hash
                if digest in hashes:
                    proposal_rows.append(row + ["duplicate_hash", digest, digest, None, None, None, None, before])
                    continue
                fp = fingerprint(program, probes)
                twin = fingerprints.get(fp.value) if fp.value is not None else None
                if twin is not None:
                    proposal_rows.append(row + ["duplicate_semantic", digest, twin, None, None, None, None, before])
                    continue
                proposal_rows.append(row + ["new", digest, None, None, None, None, None, before])
                wrapped = None if program_source is None else program.source
                candidate_rows.append(
                    [
                        digest,
                        program.canonical_form,
                        source,
                        wrapped,
                        origin,
                        json.dumps(parents),
                        json.dumps(list(program.param_names)),
                        json.dumps(list(program.inputs)),
                        now,
                        candidate_complexity(source, program, wrapped is not None),
                    ]
                )
                member_rows.append([run_id, digest, fp.value, fp.note, "pending", now, None])
                hashes.add(digest)
                if fp.value is not None:
                    fingerprints[fp.value] = digest
                new.append(
                    Candidate(digest, source, program.canonical_form, origin, parents, fp.value, program, wrapped)
                )
            with self._transaction():
                self._touch(run_id, now)
                self._insert("proposals", _PROPOSAL_COLUMNS, proposal_rows)
                self._insert("candidates", _CANDIDATE_COLUMNS, candidate_rows, on_conflict="(hash) DO NOTHING")
                self._insert("run_candidates", _MEMBER_COLUMNS, member_rows)
            index.hashes, index.fingerprints = hashes, fingerprints
            return self._as_stored(new, program_source)

    def _as_stored(self, new: list[Candidate], program_source: Callable[[str], str] | None) -> list[Candidate]:
        """``new`` with each candidate an earlier run stored under another text (other parameter
        names or literals, the same canonical hash) replaced by the stored text: every evaluation
        of a hash then fits ``candidates.source``, whose parameter names the leaderboard, MLflow,
        the report card and the program library read its parameters by."""
        import ndvm

        if not new:
            return new
        stored = {
            h: (src, wrapped)
            for h, src, wrapped in self._con.sql(
                "SELECT hash, source, program_source FROM candidates WHERE list_contains($1, hash)",
                params=[[c.hash for c in new]],
            ).fetchall()
        }
        out = []
        for c in new:
            source, wrapped = stored.get(c.hash, (c.source, c.program_source))
            if source != c.source:
                try:
                    if wrapped is None and program_source is not None:
                        wrapped = program_source(source)
                    program = ndvm.compile(wrapped or source)
                except (ndvm.NDVMError, ValueError, TypeError):  # a runtime or wrapper that no longer takes it
                    program = None
                if program is not None and program.canonical_hash == c.hash:
                    c = Candidate(
                        c.hash,
                        source,
                        c.canonical_form,
                        c.origin,
                        c.parents,
                        c.fingerprint,
                        program,
                        wrapped,
                        proposed_source=c.source,
                    )
            out.append(c)
        return out

    def _insert(
        self,
        table: str,
        columns: tuple[str, ...],
        rows: list[list[Any]],
        on_conflict: str | None = None,
        chunk: int = 500,
    ) -> None:
        """Insert rows with one multi-row VALUES statement per chunk (far faster than one per row)."""
        placeholders = "(" + ", ".join("?" * len(columns)) + ")"
        conflict = f" ON CONFLICT {on_conflict}" if on_conflict else ""
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            self._con.sql(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                + ", ".join([placeholders] * len(part))
                + conflict,
                params=[value for row in part for value in row],
            )

    def _run_index(self, run_id: str) -> _RunIndex:
        """The run's accepted hashes and fingerprints, loaded once: this process is the only writer,
        so the copy in memory stays exact (and is only updated after a commit)."""
        index = self._indexes.get(run_id)
        if index is None:
            self._require_run(run_id)
            rows = self._con.sql(
                "SELECT hash, fingerprint FROM run_candidates WHERE run_id = $1 ORDER BY added", params=[run_id]
            ).fetchall()
            index = _RunIndex({h for h, _ in rows}, {})
            for digest, value in rows:
                if value is not None:
                    index.fingerprints.setdefault(value, digest)
            self._indexes[run_id] = index
        return index

    def _touch(self, run_id: str, now: _dt.datetime) -> None:
        self._con.sql("UPDATE runs SET updated = $2 WHERE run_id = $1", params=[run_id, now])

    def pending(self, run_id: str) -> list[Candidate]:
        """Candidates the run accepted but has not calibrated yet (what a resumed run does first)."""
        import ndvm

        with self._lock:
            self._require_run(run_id)
            rows = self._con.sql(
                "SELECT c.hash, c.source, c.canonical_form, c.origin, c.parents, rc.fingerprint, c.program_source "
                "FROM run_candidates rc JOIN candidates c ON c.hash = rc.hash "
                "WHERE rc.run_id = $1 AND rc.state = 'pending' ORDER BY rc.added, c.hash",
                params=[run_id],
            ).fetchall()
        return [
            Candidate(h, src, form, origin, json.loads(parents or "[]"), fp, ndvm.compile(wrapped or src), wrapped)
            for h, src, form, origin, parents, fp, wrapped in rows
        ]

    def candidate(self, digest: str) -> dict[str, Any]:
        """One candidate row as a dict."""
        with self._lock:
            rel = self._con.sql("SELECT * FROM candidates WHERE hash = $1", params=[digest])
            names, rows = rel.columns, rel.fetchall()
        if not rows:
            raise StoreError(f"no candidate {digest!r} in {self.path}")
        row = dict(zip(names, rows[0]))
        for key in ("parents", "param_names", "inputs"):
            row[key] = json.loads(row[key] or "[]")
        return row

    # ---- results ---------------------------------------------------------------------------
    def record(self, results: Iterable[EvaluationResult | Mapping[str, Any]]) -> int:
        """Store evaluations (one transaction) and mark their candidates calibrated or failed.

        Returns the number recorded. Each result must name a candidate the run accepted; an ``ok``
        result must carry the run's ranking metric among its held-out metrics.
        """
        items = [r if isinstance(r, EvaluationResult) else EvaluationResult(**dict(r)) for r in results]
        now = _now()
        with self._lock:
            rows, states = [], []
            for item in items:
                if item.candidate not in self._run_index(item.run_id).hashes:  # (an unknown run raises here)
                    raise StoreError(f"candidate {item.candidate!r} was not added to run {item.run_id!r}")
                metric = self._run_metric(item.run_id)
                score = None
                if item.status == "ok":
                    if metric not in item.heldout_metrics:
                        raise StoreError(
                            f"result for {item.candidate!r} lacks held-out metric {metric!r}, which run "
                            f"{item.run_id!r} ranks by (it has {sorted(item.heldout_metrics)})"
                        )
                    score = float(item.heldout_metrics[metric])
                rows.append(
                    [
                        item.candidate,
                        item.run_id,
                        item.dataset,
                        item.task,
                        item.split,
                        json.dumps(item.parameters),
                        json.dumps(item.train_metrics),
                        json.dumps(item.heldout_metrics),
                        score,
                        None if item.loss_history is None else json.dumps(item.loss_history),
                        float(item.seconds),
                        item.status,
                        item.error,
                        now,
                    ]
                )
                states.append([item.run_id, item.candidate, FINAL_STATES.get(item.status, "failed")])
            with self._transaction():
                self._insert("evaluations", _EVALUATION_COLUMNS, rows)
                for start in range(0, len(states), 500):
                    part = states[start : start + 500]
                    self._con.sql(
                        "UPDATE run_candidates SET state = v.state FROM (VALUES "
                        + ", ".join(["(?, ?, ?)"] * len(part))
                        + ") AS v(run_id, hash, state) WHERE run_candidates.run_id = v.run_id "
                        "AND run_candidates.hash = v.hash",
                        params=[x for row in part for x in row],
                    )
                for run_id in {item.run_id for item in items}:
                    self._con.sql("UPDATE runs SET updated = $2 WHERE run_id = $1", params=[run_id, now])
        return len(items)

    # ---- test scores (once, at the end of a run) ------------------------------------------
    def record_test_scores(self, run_id: str, scores: Iterable[FinalTestScore]) -> int:
        """Replace the run's test scores with ``scores`` (one transaction). Called once at the end
        of a run (again at the end of a resumed run, which re-scores its final top k): nothing the
        search reads (``top``'s order, ``run_status().best_*``, the proposers' context) looks at them."""
        items = list(scores)
        now = _now()
        with self._lock:
            metric = self._run_metric(run_id)  # (an unknown run raises here)
            rows = []
            for item in items:
                if item.entry_kind not in ("candidate", "reference"):
                    raise StoreError(
                        f"test score {item.entry!r}: entry_kind must be 'candidate' or 'reference', "
                        f"got {item.entry_kind!r}"
                    )
                if item.entry_kind == "candidate" and item.entry not in self._run_index(run_id).hashes:
                    raise StoreError(f"test score for {item.entry!r}: not a candidate of run {run_id!r}")
                test_score = item.test_metrics.get(metric) if item.status == "ok" else None
                if item.status == "ok" and test_score is None:
                    raise StoreError(
                        f"test score for {item.entry!r} lacks {metric!r}, which run {run_id!r} "
                        f"ranks by (it has {sorted(item.test_metrics)})"
                    )
                rows.append(
                    [
                        run_id,
                        item.entry,
                        item.entry_kind,
                        item.validation_rank,
                        json.dumps(item.parameters, default=str),
                        json.dumps(item.validation_metrics),
                        item.validation_metrics.get(metric),
                        json.dumps(item.test_metrics),
                        None if test_score is None else float(test_score),
                        item.status,
                        item.error,
                        now,
                    ]
                )
            with self._transaction():
                self._con.sql("DELETE FROM test_scores WHERE run_id = $1", params=[run_id])
                self._insert("test_scores", _TEST_SCORE_COLUMNS, rows)
                self._touch(run_id, now)
        return len(rows)

    def test_scores(self, run_id: str) -> pl.DataFrame:
        """The run's test scores: candidates in validation-rank order, then references by name.
        JSON columns (parameters, validation_metrics, test_metrics) stay JSON text."""
        with self._lock:
            self._require_run(run_id)
            return self._con.sql(
                "SELECT * FROM test_scores WHERE run_id = $1 "
                "ORDER BY entry_kind = 'reference', validation_rank NULLS LAST, entry",
                params=[run_id],
            ).pl()

    # ---- queries ---------------------------------------------------------------------------
    def top(
        self, k: int = 10, metric: str | None = None, run_id: str | None = None, higher_is_better: bool | None = None
    ) -> pl.DataFrame:
        """The k best candidates: of one run (default: the latest run), by its ranking metric or
        by ``metric`` ("rmse", "heldout.r2" or "train.mse"; held-out when no prefix is given)."""
        with self._lock:
            run_id = run_id or self.latest_run()
            if run_id is None:
                return self._con.sql("SELECT * FROM leaderboard LIMIT 0").pl()
            run = self._require_run(run_id)
            if metric is None or metric in (run["metric"], f"heldout.{run['metric']}"):
                return self._con.sql(
                    "SELECT * FROM leaderboard WHERE run_id = $1 ORDER BY rank, hash LIMIT $2", params=[run_id, int(k)]
                ).pl()
            split, _, name = metric.rpartition(".")
            if split == "test":
                raise StoreError(
                    f"metric {metric!r}: the leaderboard never ranks by the test split "
                    "(selection uses validation only); rank by 'validation.' or 'train.' metrics"
                )
            column = {
                "": "heldout_metrics",
                "heldout": "heldout_metrics",
                "validation": "heldout_metrics",
                "train": "train_metrics",
            }.get(split)
            if column is None:
                raise StoreError(f"metric {metric!r}: prefix must be 'train.', 'validation.' or 'heldout.'")
            if higher_is_better is None:
                higher_is_better = metric_higher_is_better(name)
            order = "DESC" if higher_is_better else "ASC"
            # The same "best evaluation per candidate" rule as the view, on the requested metric.
            query = f"""
                WITH m AS (
                    SELECT e.run_id, e.candidate AS hash, c.source, c.origin, e.dataset, e.task, e.split,
                           TRY_CAST(json_extract({column}, '$."' || $3 || '"') AS DOUBLE) AS value,
                           e.parameters, e.train_metrics, e.heldout_metrics, e.seconds, e.created, e.id
                    FROM evaluations e JOIN candidates c ON c.hash = e.candidate
                    WHERE e.run_id = $1 AND e.status = 'ok'
                ), best AS (
                    SELECT * FROM m WHERE value IS NOT NULL AND isfinite(value)
                    QUALIFY row_number() OVER (PARTITION BY hash ORDER BY value {order}, id) = 1
                )
                SELECT rank() OVER (ORDER BY value {order}) AS rank, b.run_id, hash, source, origin, dataset, task,
                       split, $4 AS metric, value AS score, b.parameters, train_metrics, heldout_metrics, seconds,
                       b.created, t.test_score, t.test_metrics
                FROM best b LEFT JOIN test_scores t
                     ON t.run_id = b.run_id AND t.entry_kind = 'candidate' AND t.entry = b.hash
                ORDER BY rank, hash LIMIT $2
            """
            return self._con.sql(query, params=[run_id, int(k), name, metric]).pl()

    def history(self, run_id: str) -> pl.DataFrame:
        """Every proposal of the run in arrival order, with its outcome and, once calibrated, its
        latest evaluation (status, score, seconds)."""
        with self._lock:
            self._require_run(run_id)
            return self._con.sql(
                """
                WITH latest AS (
                    SELECT * FROM evaluations WHERE run_id = $1
                    QUALIFY row_number() OVER (PARTITION BY candidate ORDER BY id DESC) = 1
                )
                SELECT p.id AS seq, p.created, p.outcome, p.hash, p.duplicate_of, p.origin, p.source,
                       p.error_kind, p.error, p.error_line, p.error_column,
                       CASE WHEN p.outcome = 'new' THEN l.status END AS eval_status,
                       CASE WHEN p.outcome = 'new' THEN l.score END AS score,
                       CASE WHEN p.outcome = 'new' THEN l.seconds END AS seconds
                FROM proposals p LEFT JOIN latest l ON l.candidate = p.hash
                WHERE p.run_id = $1 ORDER BY p.id
                """,
                params=[run_id],
            ).pl()

    def duplicates_of(self, run_id: str, sources: Iterable[str]) -> dict[str, tuple[str, str, float | None]]:
        """source -> (outcome, the stored candidate it duplicates, that candidate's validation score
        or None) for those of ``sources`` whose latest proposal in the run was a duplicate (hash or
        semantic); invalid and new proposals are left out. One query for a whole round."""
        sources = list(dict.fromkeys(sources))
        if not sources:
            return {}
        with self._lock:
            rows = self._con.sql(
                """
                WITH latest AS (
                    SELECT source, outcome, duplicate_of FROM proposals
                    WHERE run_id = $1 AND list_contains($2, source)
                    QUALIFY row_number() OVER (PARTITION BY source ORDER BY id DESC) = 1
                )
                SELECT l.source, l.outcome, l.duplicate_of, b.score
                FROM latest l LEFT JOIN leaderboard b ON b.run_id = $1 AND b.hash = l.duplicate_of
                WHERE l.outcome LIKE 'duplicate%' AND l.duplicate_of IS NOT NULL
                """,
                params=[run_id, sources],
            ).fetchall()
        return {src: (outcome, of, None if score is None else float(score)) for src, outcome, of, score in rows}

    def complexities(self, hashes: Iterable[str]) -> dict[str, int | None]:
        """hash -> complexity (storage/parsimony.py) of the given candidates."""
        hashes = list(dict.fromkeys(hashes))
        if not hashes:
            return {}
        with self._lock:
            rows = self._con.sql(
                "SELECT hash, complexity FROM candidates WHERE list_contains($1, hash)", params=[hashes]
            ).fetchall()
        return dict(rows)

    def evaluation(self, run_id: str, candidate: str) -> dict[str, Any]:
        """The best ``ok`` evaluation of a candidate in a run (as on the leaderboard), decoded."""
        with self._lock:
            rel = self._con.sql(
                "SELECT e.* FROM evaluations e JOIN leaderboard l ON l.evaluation_id = e.id "
                "WHERE l.run_id = $1 AND l.hash = $2",
                params=[run_id, candidate],
            )
            names, rows = rel.columns, rel.fetchall()
        if not rows:
            raise StoreError(f"candidate {candidate!r} has no successful evaluation in run {run_id!r}")
        row = dict(zip(names, rows[0]))
        for key in ("parameters", "train_metrics", "heldout_metrics"):
            row[key] = json.loads(row[key] or "{}")
        row["loss_history"] = json.loads(row["loss_history"]) if row["loss_history"] else None
        return row

    def common_errors(self, run_id: str, k: int = 3) -> list[tuple[str, int]]:
        """The ``k`` most frequent errors of the run's failed evaluations: (error, count)."""
        with self._lock:
            return self._con.sql(
                "SELECT error, count(*) AS n FROM evaluations WHERE run_id = $1 AND status <> 'ok' "
                "AND error IS NOT NULL GROUP BY error ORDER BY n DESC, error LIMIT $2",
                params=[run_id, k],
            ).fetchall()


__all__ = [
    "CandidateStore",
    "Candidate",
    "EvaluationResult",
    "RunStatus",
    "FinalTestScore",
    "StoreError",
    "StoreCorruptError",
    "StoreLockedError",
    "MetricDirectionError",
    "metric_higher_is_better",
    "redact",
    "default_store_path",
    "open_for_reading",
    "snapshot_path",
    "OUTCOMES",
]
