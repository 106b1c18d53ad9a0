"""Reading a store while a run writes it (issue 30, part 1): DuckDB lets no other process open the
file then, so the writer keeps a snapshot (``CandidateStore(snapshot_seconds=...)``) and
``ndvm leaderboard``, ``--pareto`` and ``ndvm report`` read that, in another process, with no
traceback. The writer here is this test process holding a real store; the readers are the real
``ndvm`` command line in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from storage import CandidateStore, EvaluationResult, open_for_reading, snapshot_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
AB = "(param a 0.5) (param b 1.5) "
PROGRAMS = [AB + "(+ a (* b x))", AB + "(* a (exp (* b x)))", "(param a 0.5) (* a x)"]


def ndvm_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "DO_NOT_TRACK": "true"}
    return subprocess.run(
        [sys.executable, "-m", "ndvm.cli", *args], capture_output=True, text=True, timeout=180, env=env, cwd=REPO
    )


def _result(candidate: str, run_id: str, rmse: float) -> EvaluationResult:
    return EvaluationResult(
        candidate=candidate,
        run_id=run_id,
        dataset="toy",
        task="curve",
        split="validation",
        parameters={"a": 1.0, "b": 2.0},
        train_metrics={"loss": rmse**2},
        heldout_metrics={"rmse": rmse},
        seconds=0.01,
    )


def _fill(store: CandidateStore, run_id: str) -> list[str]:
    store.start_run(run_id, dataset="toy", task="curve", probe_inputs={"x": np.linspace(0.1, 3.0, 5)})
    new = store.add(PROGRAMS, run_id)
    store.record([_result(c.hash, run_id, 0.5 + i) for i, c in enumerate(new)])
    return [c.hash for c in new]


def _wait_for_snapshot_with(path: Path, run_id: str, timeout: float = 30.0) -> None:
    """Until the snapshot holds ``run_id`` with a calibrated candidate (the keeper thread's copy)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if snapshot_path(path).is_file():
            with CandidateStore(snapshot_path(path), read_only=True) as snap:
                if run_id in snap.runs()["run_id"].to_list() and snap.run_status(run_id).calibrated:
                    return
        time.sleep(0.1)
    raise AssertionError(f"no snapshot with {run_id} after {timeout} s")


def test_leaderboard_pareto_and_report_read_the_snapshot_while_a_run_writes(tmp_path):
    path = tmp_path / "candidates.duckdb"
    with CandidateStore(path, snapshot_seconds=0.2) as writer:
        hashes = _fill(writer, "night")
        _wait_for_snapshot_with(path, "night")
        board = ndvm_cli("leaderboard", "--folder", str(tmp_path))
        assert board.returncode == 0, board.stderr
        assert "Traceback" not in board.stdout + board.stderr
        assert hashes[0][:10] in board.stdout and "snapshot" in board.stdout
        front = ndvm_cli("leaderboard", "--pareto", "--folder", str(tmp_path))
        assert front.returncode == 0 and "Traceback" not in front.stderr, front.stderr
        assert "Pareto front" in front.stdout
        report = ndvm_cli("report", "--folder", str(tmp_path))
        assert report.returncode == 0, report.stderr
        assert "still running" in report.stdout and hashes[0] in report.stdout
        assert "snapshot" in report.stderr  # where it read from, on stderr (stdout stays the card)
        # the snapshot follows the run: a better candidate recorded now shows in the next read
        [better] = writer.add([AB + "(- a (* b x x))"], "night")
        writer.record([_result(better.hash, "night", 0.01)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with CandidateStore(snapshot_path(path), read_only=True) as snap:
                if snap.run_status("night").best_hash == better.hash:
                    break
            time.sleep(0.1)
        else:
            raise AssertionError("the snapshot never showed the new best candidate")
    # the writer closed: readers open the store itself again, no note
    store, note = open_for_reading(path)
    with store:
        assert note is None and store.path == path


def test_a_finished_runs_report_reads_while_another_run_writes(tmp_path):
    path = tmp_path / "candidates.duckdb"
    with CandidateStore(path) as first:
        _fill(first, "yesterday")
        first.set_run_status("yesterday", "finished")
    card = tmp_path / "reports" / "yesterday" / "report.md"
    card.parent.mkdir(parents=True)
    card.write_text("# Report card: yesterday\n\nThe champion does not beat persistence.\n")
    with CandidateStore(path, snapshot_seconds=0.2) as writer:
        _fill(writer, "tonight")
        _wait_for_snapshot_with(path, "tonight")
        out = ndvm_cli("report", "--run", "yesterday", "--folder", str(tmp_path))
        assert out.returncode == 0, out.stderr
        assert "does not beat persistence" in out.stdout
        board = ndvm_cli("leaderboard", "--run", "yesterday", "--folder", str(tmp_path))
        assert board.returncode == 0 and "yesterday" in board.stdout, board.stderr


def test_without_a_snapshot_a_held_store_is_a_clear_error(tmp_path):
    """A writer that keeps no snapshot (an older run, a test store): the lock error, not a traceback."""
    path = tmp_path / "candidates.duckdb"
    with CandidateStore(path) as writer:
        _fill(writer, "old")
        out = ndvm_cli("leaderboard", "--folder", str(tmp_path))
        from flows.cli_failures import EXIT_STORE

        assert out.returncode == EXIT_STORE and "Traceback" not in out.stderr, out.stderr
        assert "another process holds it" in out.stderr
