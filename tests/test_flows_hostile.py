"""The pipeline against hostile input (issue 28): every bad file, option, store or disk is one line
naming what is wrong and what to do, with a documented exit code (docs/reliability.md, "Exit
codes"), before any work when it can be known up front, and nothing stored is lost.

- bad data files: checked before Prefect, the store or MLflow start (the child process never
  imports Prefect, and no store file is created);
- damaged stores: corruption reported as corruption with the file's name, never as a lock;
  ``ndvm store check`` / ``ndvm store repair`` keep every readable row;
- a lock: the lock message, once, without a traceback;
- a disk that fills during a run (a real small tmpfs): the run stops, says so, keeps what it
  stored, and ``--resume`` finishes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_flows_support import REPO, subprocess_env

PY = sys.executable


def _cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    """``python -m flows.cli ARGS`` in a child; prints, last, whether Prefect was ever imported."""
    code = textwrap.dedent(
        f"""
        import sys
        from flows.cli import main
        rc = main({args!r})
        sys.stdout.flush()
        print("PREFECT-IMPORTED" if "prefect" in sys.modules else "PREFECT-NOT-IMPORTED", file=sys.stderr)
        sys.exit(rc)
        """
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    environment.pop("NDVM_DEBUG", None)
    environment.update(env or {})
    return subprocess.run([PY, "-c", code], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


def _message_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("PREFECT-")]


# ---------------------------------------------------------------------------- bad input, up front
BAD_FILES = {
    "missing": (None, ["--x", "x", "--y", "y"], "is neither a registered dataset"),
    "zero-byte": (b"", ["--x", "x", "--y", "y"], "the file is empty (0 bytes)"),
    "header-only": (b"x,y\n", ["--x", "x", "--y", "y"], "a header (x, y) but no data rows"),
    "unknown-column": (b"x,y\n1,2\n2,3\n3,4\n4,5\n5,6\n", ["--x", "t", "--y", "y"], "no column(s) ['t']"),
    "unknown-second-input": (  # several inputs (a table) are parsed as the loader parses them
        b"x,v,y\n1,2,3\n2,3,4\n3,4,5\n4,5,6\n5,6,7\n",
        ["--x", "x,w", "--y", "y"],
        "no column(s) ['w']",
    ),
    "non-numeric-second-input": (
        b"x,v,y\n1,2,3\n2,fast,4\n3,4,5\n4,5,6\n5,6,7\n",
        ["--x", "x", "--x", "v", "--y", "y"],
        "the input (x) column 'v' is not numeric: row 2 holds 'fast'",
    ),
    "no-roles": (b"x,y\n1,2\n2,3\n3,4\n4,5\n5,6\n", [], "say which columns are x and y"),
    "non-numeric-target": (
        b"x,y\n1,2\n2,3\n3,three\n4,5\n5,6\n",
        ["--x", "x", "--y", "y"],
        "the target (y) column 'y' is not numeric: row 3 holds 'three'",
    ),
    "non-numeric-input": (b"x,y\n1,2\nb,3\n3,4\n4,5\n5,6\n", ["--x", "x", "--y", "y"], "column 'x' is not numeric"),
    "overflowing-target": (
        "x,y\n" + "".join(f"{i},{1e300 * (1 + i / 50)!r}\n" for i in range(50)),
        ["--x", "x", "--y", "y"],
        "their squares overflow float64",
    ),
    "unsupported-type": (b"\x00\x01\x02 binary", ["--x", "x", "--y", "y"], "data.bin"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_data_is_one_line_before_prefect_starts(tmp_path, case):
    content, options, expected = BAD_FILES[case]
    name = "data.bin" if case == "unsupported-type" else "data.csv"
    if content is not None:
        (tmp_path / name).write_bytes(content.encode() if isinstance(content, str) else content)
    folder = tmp_path / "runs"
    started = time.monotonic()
    done = _cli(["discover", "--data", name, *options, "--folder", str(folder)], cwd=tmp_path)
    seconds = time.monotonic() - started
    lines = _message_lines(done.stderr)
    assert done.returncode == 1, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("ndvm discover: ") and expected in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "PREFECT-NOT-IMPORTED" in done.stderr  # before Prefect
    assert not (folder / "candidates.duckdb").exists()  # before the store
    assert seconds < 30, seconds  # the check itself is well under a second (docs/reliability.md); a loaded CI box


def test_bad_manifest_is_one_line(tmp_path):
    (tmp_path / "data.csv").write_text("x,y\n1,2\n2,3\n3,4\n4,5\n5,6\n")
    (tmp_path / "data.toml").write_text('x = "x"\ny = "y"\ncolour = "red"\n')
    done = _cli(["discover", "--data", "data.csv", "--folder", str(tmp_path / "runs")], cwd=tmp_path)
    lines = _message_lines(done.stderr)
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "data.toml: unknown key(s) ['colour']" in lines[0] and "PREFECT-NOT-IMPORTED" in done.stderr
    (tmp_path / "data.toml").write_text('x = "x"\ny = [broken\n')
    done = _cli(["discover", "--data", "data.csv", "--folder", str(tmp_path / "runs")], cwd=tmp_path)
    assert done.returncode == 1 and "data.toml: invalid TOML" in done.stderr and "Traceback" not in done.stderr


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "data.csv").write_bytes(b"")
    args = ["discover", "--data", "data.csv", "--x", "x", "--y", "y", "--folder", str(tmp_path / "runs")]
    quiet = _cli(args, cwd=tmp_path)
    assert "Traceback" not in quiet.stderr
    for extra, env in ((["--debug"], {}), ([], {"NDVM_DEBUG": "1"})):
        loud = _cli(args + extra, cwd=tmp_path, env=env)
        assert loud.returncode == 1 and "Traceback" in loud.stderr and "DataFormatError" in loud.stderr
        assert _message_lines(loud.stderr)[-1].startswith("ndvm discover: data.csv: the file is empty")


def test_failure_classes_and_exit_codes(tmp_path):
    """classify_failure: data/configuration 1, store 3, disk 4, a bug 70 (with the --debug hint)."""
    import errno

    import duckdb

    from datasets.errors import DataFormatError
    from flows.cli_failures import EXIT_DISK, EXIT_INPUT, EXIT_INTERNAL, EXIT_STORE, classify_failure
    from flows.config import DiscoveryError
    from storage import StoreLockedError
    from storage.health import DiskFullError

    assert classify_failure(DataFormatError("f.csv: bad"))[0] == EXIT_INPUT
    assert classify_failure(DiscoveryError("batch_size must be >= 1"))[0] == EXIT_INPUT
    assert classify_failure(StoreLockedError("held"))[0] == EXIT_STORE
    code, message = classify_failure(duckdb.IOException("Corrupt database file: computed checksum 1"), str(tmp_path))
    assert code == EXIT_STORE and "is damaged" in message and str(tmp_path / "candidates.duckdb") in message
    assert "ndvm store repair" in message and "another process" not in message
    full = OSError(errno.ENOSPC, "No space left on device", "runs/status/x.tmp")
    code, message = classify_failure(full, str(tmp_path))
    assert code == EXIT_DISK and message.startswith("the disk is full") and "--resume" in message
    wal = duckdb.TransactionException("Failed to commit: could not write .wal: No space left on device")
    assert classify_failure(wal)[0] == EXIT_DISK
    assert classify_failure(DiskFullError("only 1.0 MiB free"))[1] == "only 1.0 MiB free"
    code, message = classify_failure(ZeroDivisionError("division by zero"))
    assert code == EXIT_INTERNAL and "internal error: ZeroDivisionError" in message and "NDVM_DEBUG=1" in message


def test_no_free_space_refused_up_front(tmp_path):
    from storage.health import DiskFullError, check_free_space

    check_free_space(tmp_path, need=1)  # plenty
    with pytest.raises(DiskFullError, match="free space first"):
        check_free_space(tmp_path / "not" / "yet", need=2**62)


# ---------------------------------------------------------------------------- references
def test_reference_that_cannot_be_fitted_is_reported_failed_not_raised():
    """Targets around 1e300 (past the pre-flight, e.g. through the Python API): every start of a
    reference's least-squares fit fails; scoring the references reports that reference failed."""
    import numpy as np
    import polars as pl

    from datasets.schema import Column, Dataset
    from datasets.tasks import make_task

    n = 40
    x = np.arange(n, dtype=float)
    frame = pl.DataFrame(
        {"x": x, "y": 1e300 * (1 + x / n), "split": ["train"] * 24 + ["validation"] * 8 + ["test"] * 8}
    )
    dataset = Dataset(
        name="huge",
        frame=frame,
        x="x",
        y="y",
        group=None,
        definition=None,
        columns=(Column("x", "?", "x"), Column("y", "?", "y")),
        meta={"task": "curve"},
    )
    task = make_task(dataset, "curve")
    scores = task.score_references("validation")
    assert scores, "the curve task has references"
    failed = [s for s in scores if s.get("error")]
    assert failed and all(s["rmse"] == float("inf") for s in failed)
    assert any("least-squares fit failed" in s["error"] for s in failed)


# ---------------------------------------------------------------------------- damaged stores
def _real_store(folder: Path, n: int = 60) -> dict[str, list[tuple]]:
    """A store with one run, n candidates and their evaluations; returns every table's rows."""
    from storage import CandidateStore, EvaluationResult

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "candidates.duckdb"
    with CandidateStore(path) as store:
        store.start_run("r1", dataset="d", task="curve", proposer="replay", metric="rmse")
        sources = []
        for i in range(n):
            body = "x"
            for _ in range(i + 1):
                body = f"(+ x (* a {body}))"
            sources.append(f"(param a 0.5)\n{body}")
        new = store.add(sources, "r1")
        assert len(new) == n
        store.record(
            [
                EvaluationResult(
                    c.hash,
                    "r1",
                    "d",
                    "curve",
                    "validation",
                    {"a": 0.1 * k},
                    {"loss": 1.0 + k},
                    {"rmse": 2.0 + k},
                    0.01,
                    loss_history=[float(j) for j in range(400)],
                )
                for k, c in enumerate(new)
            ]
        )
    return _rows(path)


def _rows(path: Path) -> dict[str, list[tuple]]:
    import duckdb

    from storage.health import TABLES

    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: sorted(con.sql(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in TABLES if t != "runs"} | {
            "runs": con.sql("SELECT run_id, status, metric FROM runs").fetchall()
        }
    finally:
        con.close()


def _damaged_block(path: Path, table: str) -> int:
    """The offset of a 256 KiB block whose damage makes ``table`` (and only it) unreadable."""
    import duckdb

    from storage.health import TABLES

    data = path.read_bytes()
    probe = path.with_name("probe.duckdb")
    for offset in range(12288, len(data), 262144):
        damaged = bytearray(data)
        damaged[offset + 1000 : offset + 1200] = os.urandom(200)
        probe.write_bytes(bytes(damaged))
        try:
            con = duckdb.connect(str(probe), read_only=True)
        except duckdb.Error:
            continue
        bad = []
        for t in TABLES:
            try:
                con.sql(f'SELECT * FROM "{t}"').fetchall()
            except duckdb.Error:
                bad.append(t)
        con.close()
        if bad == [table]:
            probe.unlink()
            return offset
    probe.unlink(missing_ok=True)
    pytest.fail(f"no block holds {table} alone")


def _damage(path: Path, how: str, table: str = "candidates") -> None:
    data = bytearray(path.read_bytes())
    if how == "random-bytes-inside":
        offset = _damaged_block(path, table)
        data[offset + 1000 : offset + 1200] = os.urandom(200)
    elif how == "cut-in-half":
        del data[len(data) // 2 :]
    elif how == "garbage-over-header":
        data[:512] = os.urandom(512)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["random-bytes-inside", "cut-in-half", "garbage-over-header"])
def test_damaged_store_is_reported_as_damage_and_repaired(tmp_path, how):
    folder = tmp_path / "runs"
    before = _real_store(folder)
    path = folder / "candidates.duckdb"
    if how == "cut-in-half":  # the copy a run keeps for readers (storage.snapshot_path) is named as a way back
        shutil.copy(path, folder / "candidates.snapshot.duckdb")
    _damage(path, how)

    board = _cli(["leaderboard", "--folder", str(folder)], cwd=tmp_path)
    lines = _message_lines(board.stderr)
    assert board.returncode == 3 and "Traceback" not in board.stderr, board.stderr[-3000:]
    assert len(lines) == 1 and "is damaged" in lines[0] and str(path) in lines[0], lines
    assert "another process" not in board.stderr and "ndvm store repair" in lines[0]

    check = _cli(["store", "check", "--folder", str(folder)], cwd=tmp_path)
    assert check.returncode == 3 and ("DAMAGED" in check.stdout or "cannot be opened" in check.stdout), check.stdout
    assert ("candidates.snapshot.duckdb is a readable copy" in check.stdout) == (how == "cut-in-half"), check.stdout

    repair = _cli(["store", "repair", "--folder", str(folder)], cwd=tmp_path)
    assert repair.returncode == 0, repair.stderr[-3000:]
    assert list(folder.glob("candidates.duckdb.damaged-*")), "the damaged file is kept"
    assert _cli(["store", "check", "--folder", str(folder)], cwd=tmp_path).returncode == 0
    after = _rows(path)
    for table, rows in after.items():
        assert set(rows) <= set(before[table]), table  # nothing invented, nothing altered
    if how == "random-bytes-inside":  # only the candidates' block was hit: every evaluation is kept
        assert after["evaluations"] == before["evaluations"] and after["runs"] == before["runs"]
        assert len(after["candidates"]) < len(before["candidates"])
    elif how == "garbage-over-header":  # the header is rebuilt: everything is kept
        assert after == before and "rebuilt header" in repair.stdout
    else:  # cut in half: what lies in the first half is kept
        assert sum(map(len, after.values())) > 0
        assert "rows kept" in repair.stdout


def test_lock_message_only_for_a_lock(tmp_path):
    folder = tmp_path / "runs"
    _real_store(folder, n=3)
    holder = subprocess.Popen(
        [
            PY,
            "-c",
            f"from storage import CandidateStore; import sys, time; s = CandidateStore({str(folder / 'candidates.duckdb')!r}); print('held', flush=True); time.sleep(120)",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for args in (["leaderboard"], ["store", "check"], ["report"]):
            done = _cli([*args, "--folder", str(folder)], cwd=tmp_path)
            lines = _message_lines(done.stderr)
            assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-3000:]
            assert len(lines) == 1 and "another process holds it" in lines[0] and "damaged" not in lines[0]
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------- a full disk
def _mount_tmpfs(where: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the disk-full test runs as root in CI)")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode().strip()}")


def _fill(where: Path) -> Path:
    ballast = where / "ballast"
    with ballast.open("wb", buffering=0) as handle:  # unbuffered: closing it has nothing left to write
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    return ballast


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_disk_full_during_a_run_stops_cleanly_and_resume_finishes(tmp_path, prefect_api):
    from storage import CandidateStore

    mount = tmp_path / "small"
    _mount_tmpfs(mount, "64m")
    try:
        folder = mount / "runs"
        env = subprocess_env(prefect_api, PREFECT_LOGGING_LEVEL="WARNING")
        command = [PY, "-m", "ndvm.cli", "discover", "--proposer", "mutation", "--folder", str(folder), "--seed", "3"]
        run = subprocess.Popen(
            [*command, "--run-id", "full-run", "--max-candidates", "400", "--minutes", "3", "--batch-size", "8"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        status = folder / "status" / "full-run.json"
        deadline = time.monotonic() + 240
        calibrated = 0
        while time.monotonic() < deadline and run.poll() is None:  # some results stored, then fill the disk
            try:
                calibrated = json.loads(status.read_text())["calibrated"]
            except (OSError, ValueError, KeyError):
                calibrated = 0
            if calibrated >= 8:
                break
            time.sleep(0.5)
        assert run.poll() is None and calibrated >= 8, "the run did not get going"
        ballast = _fill(mount)
        _, stderr = run.communicate(timeout=300)
        lines = [line for line in stderr.splitlines() if line.startswith("ndvm discover:")]
        assert run.returncode == 4, stderr[-3000:]
        where = stderr.find("Traceback")
        assert where < 0, stderr[max(0, where - 3000) : where + 3000]
        assert lines and lines[-1].startswith("ndvm discover: the disk is full"), stderr[-3000:]
        assert "run full-run stopped, and everything it stored is kept" in lines[-1]
        assert f"ndvm discover --resume full-run --folder {folder}" in lines[-1]

        ballast.unlink()  # space comes back
        with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
            kept = store._con.sql("SELECT id, candidate FROM evaluations WHERE run_id = 'full-run'").fetchall()
            assert store.run_status("full-run").status != "finished"
        assert len(kept) >= calibrated  # what the status file showed stored is in the store
        again = subprocess.run(
            [*command, "--resume", "full-run", "--max-candidates", "8", "--minutes", "1"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert again.returncode == 0, again.stderr[-3000:]
        with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
            after = store._con.sql("SELECT id, candidate FROM evaluations WHERE run_id = 'full-run'").fetchall()
            assert store.run_status("full-run").status == "finished"
        assert set(kept) <= set(after)  # nothing lost
        assert len({c for _, c in after}) == len(after)  # nothing calibrated twice
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(mount, ignore_errors=True)


def test_calibrate_and_recalibrate_check_the_file_first(tmp_path):
    (tmp_path / "data.csv").write_text("x,y\n1,2\n2,3\n3,three\n4,5\n5,6\n")
    (tmp_path / "model.scm").write_text("(param a 1.0)\n(* a x)\n")
    for args in (
        ["calibrate", "model.scm", "--data", "data.csv", "--x", "x", "--y", "y"],
        ["recalibrate", "--data", "data.csv", "--x", "x", "--y", "y", "--folder", str(tmp_path / "runs")],
    ):
        done = _cli(args, cwd=tmp_path)
        lines = _message_lines(done.stderr)
        assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert lines[0].startswith(f"ndvm {args[0]}: data.csv: the target (y) column 'y' is not numeric: row 3")


def test_the_python_api_raises_the_typed_error_for_an_empty_file(tmp_path):
    import datasets
    from datasets.errors import DataFormatError

    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(DataFormatError, match="the file is empty"):
        datasets.load(tmp_path / "empty.csv", x="x", y="y")
