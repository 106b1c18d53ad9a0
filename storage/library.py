"""The program library: what earlier runs on the same data already know, for the next run.

Every run records its dataset fingerprint (``storage.fingerprint.dataset_fingerprint``: the data's
content with its split column, the task's settings, the calibration settings that change a fit,
the runtime's version). All runs of one store with the same fingerprint form that dataset's
library, and a new run uses it twice:

- **reuse**: a candidate (by canonical hash) that an earlier run on the fingerprint already
  evaluated is not calibrated again. Its evaluation (parameters, losses, validation metrics,
  status) is copied into the new run with ``reused_from`` naming the run that calibrated it, so it
  is on the new run's leaderboard like any other. Failed, crashed and timed-out evaluations are
  reused too: a program that killed a worker last night is not retried every night (a timeout only
  from a run that gave each candidate at least as much time as this one). When several
  earlier evaluations exist, the best ``ok`` one is taken (else the latest).
- **seeds**: the run starts from the best validated programs of earlier runs (ranked by the
  validation score the runs rank by; the test split is never read). They are added to the run as
  proposals with origin ``library`` and reuse their evaluations, so they sit on the run's
  leaderboard from the start, and the proposers' context (the run's best programs) hands them to
  the mutation proposer as parents and to the LLM proposer as the first prompt's examples.

A run with ``fresh`` (``ndvm discover --fresh``) does neither; its own results still join the
library for later runs. The queries work on the store's own connection under its lock: this
module is part of the store, split out because the store itself knows nothing of datasets.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from storage.store import FINAL_STATES, LIBRARY_ORIGIN, REFERENCE_ORIGIN, Candidate, CandidateStore, StoreError

# How many of the earlier runs' best programs a run starts from (the proposers' context shows five).
DEFAULT_SEEDS = 5
LIBRARY_LOOKAHEAD = 4  # candidates read per seed wanted (twins of better programs are dropped)


@dataclass(frozen=True)
class LibraryProgram:
    """One of the best validated programs of the library: its best ``ok`` evaluation."""

    hash: str
    source: str
    score: float
    parameters: dict[str, float]
    run_id: str  # the run that calibrated it


@dataclass
class ProgramLibrary:
    """The library as one run uses it. ``enabled=False`` (a ``--fresh`` run): nothing is reused
    and no seed is given, but the run's fingerprint is still recorded for later runs."""

    store: CandidateStore
    run_id: str
    fingerprint: str
    enabled: bool = True
    seeds: list[str] = field(default_factory=list)  # hashes of the library programs the run started from
    references: list[str] = field(default_factory=list)  # hashes of the task's reference programs it started from

    def best_programs(self, k: int = DEFAULT_SEEDS) -> list[LibraryProgram]:
        """The ``k`` best validated programs of earlier runs on the fingerprint, best first."""
        return best_programs(self.store, self.fingerprint, k, exclude_run=self.run_id)

    def reuse(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """Copy earlier evaluations of ``candidates`` (just added to the run) into the run; return
        those left to calibrate, in their order."""
        candidates = list(candidates)
        if not self.enabled or not candidates:
            return candidates
        reused = reuse_evaluations(self.store, self.run_id, self.fingerprint, [c.hash for c in candidates])
        return [c for c in candidates if c.hash not in reused]

    def seed_run(self, program_source: Callable[[str], str] | None = None, k: int = DEFAULT_SEEDS) -> list[Candidate]:
        """Add the library's ``k`` best programs to the run (origin ``library``) and reuse their
        evaluations. Returns the candidates still to calibrate (normally none: only a program whose
        evaluation could not be matched again, e.g. after the task's wrapper changed its hash)."""
        if not self.enabled:
            return []
        # More than k, added best first until k are in: each earlier run deduplicated only within
        # itself, so a program can compute the same function as a better one of another run (a
        # semantic twin), and the store drops it here as a duplicate.
        added: list[Candidate] = []
        for program in self.best_programs(LIBRARY_LOOKAHEAD * k):
            if len(added) == k:
                break
            added += self.store.add(
                [{"source": program.source, "origin": LIBRARY_ORIGIN, "parents": []}],
                self.run_id,
                program_source=program_source,
            )
        self.seeds = [c.hash for c in added]
        return self.reuse(added)

    def seed_references(
        self, programs: Iterable[tuple[str, str]], program_source: Callable[[str], str] | None = None
    ) -> list[Candidate]:
        """Add the task's reference programs (``Task.reference_programs``: (name, source) pairs) to
        the run, origin ``reference``, so the search starts from the best model the task knows and
        its best score is never worse than theirs. Added to every new run, ``fresh`` ones too (they
        are the task's, not earlier runs'); an earlier evaluation on the same data is reused as for
        any candidate. A reference the run already holds (a library seed of the same program) is
        a duplicate and not added twice. Returns the candidates still to calibrate."""
        proposals = [{"source": source, "origin": REFERENCE_ORIGIN, "parents": []} for _, source in programs]
        if not proposals:
            return []
        added = self.store.add(proposals, self.run_id, program_source=program_source)
        self.references = [c.hash for c in added]
        return self.reuse(added)


def open_library(
    store: CandidateStore,
    run_id: str,
    *,
    fingerprint: str,
    parts: dict[str, Any] | None,
    seed: int | None,
    enabled: bool,
    new_run: bool,
) -> ProgramLibrary:
    """The library of ``run_id``. A new run records its seed and fingerprint; a resumed run keeps
    the fingerprint it started with (a store written before the library existed gets it now) and
    the seeds it started from."""
    if new_run:
        store.set_run_library(run_id, seed=seed, dataset_fingerprint=fingerprint, fingerprint_parts=parts)
        return ProgramLibrary(store, run_id, fingerprint, enabled)
    status = store.run_status(run_id)
    if status.dataset_fingerprint is None:
        store.set_run_library(
            run_id,
            seed=status.seed if status.seed is not None else seed,
            dataset_fingerprint=fingerprint,
            fingerprint_parts=parts,
        )
    else:
        fingerprint = status.dataset_fingerprint
    return ProgramLibrary(
        store,
        run_id,
        fingerprint,
        enabled,
        seeds=seeded_hashes(store, run_id),
        references=seeded_hashes(store, run_id, REFERENCE_ORIGIN),
    )


# ---------------------------------------------------------------------------- queries
# The earlier evaluation a candidate reuses: the best ok one by the run's direction, else the latest.
# A timeout depends on the time each candidate was allowed (--candidate-seconds, in the runs'
# config; absent: no limit), which the fingerprint leaves out: it is reused only from a run that
# allowed at least as much time as this one, so raising the allowance retries the slow programs.
_SOURCE_EVALUATIONS = """
    SELECT e.* EXCLUDE (id, run_id, dataset, task, created, reused_from),
           COALESCE(e.reused_from, e.run_id) AS origin_run
    FROM evaluations e JOIN runs r ON r.run_id = e.run_id, (SELECT config FROM runs WHERE run_id = $run_id) AS cur
    WHERE r.dataset_fingerprint = $fingerprint AND e.run_id <> $run_id AND list_contains($hashes, e.candidate)
      AND (e.status <> 'timeout'
           OR COALESCE(TRY_CAST(json_extract(r.config, '$.candidate_seconds') AS DOUBLE), 'inf'::DOUBLE)
              >= COALESCE(TRY_CAST(json_extract(cur.config, '$.candidate_seconds') AS DOUBLE), 'inf'::DOUBLE))
    QUALIFY row_number() OVER (
        PARTITION BY e.candidate
        ORDER BY (e.status = 'ok' AND e.score IS NOT NULL AND isfinite(e.score)) DESC,
                 CASE WHEN r.higher_is_better THEN -e.score ELSE e.score END ASC NULLS LAST,
                 e.id DESC) = 1
"""


def reuse_evaluations(store: CandidateStore, run_id: str, fingerprint: str, hashes: list[str]) -> dict[str, str]:
    """Copy into ``run_id`` the earlier evaluations (same fingerprint, other runs) of the given
    candidates of the run and set their state as ``record`` would. One transaction. Returns
    hash -> status of the reused evaluations."""
    if not hashes:
        return {}
    with store._lock:
        run = store._require_run(run_id)
        unknown = [h for h in hashes if h not in store._run_index(run_id).hashes]
        if unknown:
            raise StoreError(f"candidate {unknown[0]!r} was not added to run {run_id!r}")
        now = _dt.datetime.now(_dt.UTC).replace(tzinfo=None)
        states = " ".join(f"WHEN '{status}' THEN '{state}'" for status, state in FINAL_STATES.items())
        params = {"fingerprint": fingerprint, "run_id": run_id, "hashes": list(hashes)}
        with store._transaction():
            rows = store._con.execute(
                f"""
                INSERT INTO evaluations (candidate, run_id, dataset, task, split, parameters, train_metrics,
                                         heldout_metrics, score, loss_history, seconds, status, error, created,
                                         reused_from)
                SELECT candidate, $run_id, $dataset, $task, split, parameters, train_metrics, heldout_metrics,
                       score, loss_history, seconds, status, error, $now, origin_run
                FROM ({_SOURCE_EVALUATIONS}) AS source
                RETURNING candidate, status
                """,
                {**params, "dataset": run["dataset"], "task": run["task"], "now": now},
            ).fetchall()
            reused = dict(rows)
            if reused:
                store._con.execute(
                    f"""
                    UPDATE run_candidates SET state = CASE e.status {states} ELSE 'failed' END
                    FROM evaluations e
                    WHERE e.run_id = run_candidates.run_id AND e.candidate = run_candidates.hash
                      AND e.reused_from IS NOT NULL AND run_candidates.run_id = $run_id
                      AND list_contains($hashes, run_candidates.hash)
                    """,
                    {"run_id": run_id, "hashes": list(reused)},
                )
                store._touch(run_id, now)
    return reused


def best_programs(
    store: CandidateStore, fingerprint: str, k: int = DEFAULT_SEEDS, exclude_run: str | None = None
) -> list[LibraryProgram]:
    """The ``k`` best validated programs on ``fingerprint`` over every run of the store (but
    ``exclude_run``): each program's best ``ok`` validation score, best first (ties by hash)."""
    with store._lock:
        rows = store._con.execute(
            """
            WITH ranked AS (
                SELECT e.candidate AS hash, e.score, e.parameters, COALESCE(e.reused_from, e.run_id) AS origin_run,
                       CASE WHEN r.higher_is_better THEN -e.score ELSE e.score END AS sort_key
                FROM evaluations e JOIN runs r ON r.run_id = e.run_id
                WHERE r.dataset_fingerprint = $fingerprint AND e.run_id IS DISTINCT FROM $exclude
                  AND e.status = 'ok' AND e.score IS NOT NULL AND isfinite(e.score)
                QUALIFY row_number() OVER (PARTITION BY e.candidate ORDER BY sort_key, e.id) = 1
            )
            SELECT ranked.hash, c.source, ranked.score, ranked.parameters, ranked.origin_run
            FROM ranked JOIN candidates c ON c.hash = ranked.hash
            ORDER BY ranked.sort_key, ranked.hash LIMIT $k
            """,
            {"fingerprint": fingerprint, "exclude": exclude_run, "k": int(k)},
        ).fetchall()
    return [
        LibraryProgram(h, source, float(score), json.loads(parameters or "{}"), origin)
        for h, source, score, parameters, origin in rows
    ]


def seeded_hashes(store: CandidateStore, run_id: str, origin: str = LIBRARY_ORIGIN) -> list[str]:
    """The programs ``run_id`` started from (library seeds, or ``origin`` ``reference``: the task's
    reference programs), in the order they were added."""
    with store._lock:
        rows = store._con.execute(
            "SELECT hash FROM proposals WHERE run_id = $1 AND origin = $2 AND outcome = 'new' ORDER BY id",
            [run_id, origin],
        ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True)
class ReferenceResult:
    """A reference program of a run (origin ``reference``) and its validation result so far."""

    hash: str
    source: str  # the text the task gave (the store may keep another text of the same hash)
    status: str | None  # the evaluation's status (ok, failed, ...); None: not evaluated yet
    score: float | None  # its validation score (None unless ok with a finite score)


def reference_results(store: CandidateStore, run_id: str) -> list[ReferenceResult]:
    """The task's reference programs ``run_id`` started from, in the order they were added, each
    with its best ``ok`` evaluation of the run (else its latest one; none while pending)."""
    with store._lock:
        rows = store._con.execute(
            """
            SELECT p.hash, p.source, e.status, e.score
            FROM proposals p JOIN runs r ON r.run_id = p.run_id
                 LEFT JOIN evaluations e ON e.candidate = p.hash AND e.run_id = p.run_id
            WHERE p.run_id = $1 AND p.origin = $2 AND p.outcome = 'new'
            QUALIFY row_number() OVER (
                PARTITION BY p.hash
                ORDER BY (e.status = 'ok' AND e.score IS NOT NULL AND isfinite(e.score)) DESC NULLS LAST,
                         CASE WHEN r.higher_is_better THEN -e.score ELSE e.score END ASC NULLS LAST,
                         e.id DESC NULLS LAST) = 1
            ORDER BY p.id
            """,
            [run_id, REFERENCE_ORIGIN],
        ).fetchall()
    return [
        ReferenceResult(h, source, status, float(score) if status == "ok" and _finite(score) else None)
        for h, source, status, score in rows
    ]


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(float(value))


def library_runs(store: CandidateStore, fingerprint: str) -> list[str]:
    """The runs of the store on ``fingerprint``, oldest first."""
    with store._lock:
        rows = store._con.execute(
            "SELECT run_id FROM runs WHERE dataset_fingerprint = $1 ORDER BY created, run_id", [fingerprint]
        ).fetchall()
    return [r[0] for r in rows]


__all__ = [
    "DEFAULT_SEEDS",
    "LIBRARY_ORIGIN",
    "REFERENCE_ORIGIN",
    "LibraryProgram",
    "ProgramLibrary",
    "ReferenceResult",
    "best_programs",
    "library_runs",
    "open_library",
    "reference_results",
    "reuse_evaluations",
    "seeded_hashes",
]
