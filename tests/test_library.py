"""The program library (issue 16 part 1): a run's dataset fingerprint, evaluations reused from earlier
runs on the same fingerprint, runs seeded with the earlier best programs, ``fresh`` runs, and the
run's seed (drawn, recorded, replayable in serial mode). Real DuckDB files, real discovery runs on
the embedded ENSO series with short budgets (a few seconds each)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import duckdb
import polars as pl
import pytest

import datasets
from datasets.tasks import make_task
from storage import CandidateStore, EvaluationResult, StoreError
from storage.fingerprint import RESULT_SETTINGS, dataset_fingerprint
from storage.library import LIBRARY_ORIGIN, ProgramLibrary, best_programs, library_runs, open_library

CALIBRATION = {
    "optimizer": "adam",
    "steps": 20,
    "lr": 0.05,
    "restarts": 2,
    "solve_linear": False,
    "seed": 0,
    "threads": None,
    "max_seconds": None,
}
AB = "(param a 0.5) (param b 1.5) "
SOURCES = [AB + "(+ a (* b x))", AB + "(* a (exp (* b x)))", AB + "(+ a (* b (* x x)))", AB + "(/ a (+ b x))"]


# ---------------------------------------------------------------------------- the dataset fingerprint
def _fingerprint(ds, task=None, **calibration):
    return dataset_fingerprint(ds, task or make_task(ds), {**CALIBRATION, **calibration})


def test_the_fingerprint_follows_data_split_task_and_fit_settings_only():
    ds = datasets.load("enso")
    base = _fingerprint(ds)
    assert base == _fingerprint(datasets.load("enso"))  # a reload of the same data: the same fingerprint
    assert base.parts["calibration"] == {k: CALIBRATION[k] for k in RESULT_SETTINGS}
    # what does not change a fit: the seed, threads, the per-candidate time limit
    assert base.value == _fingerprint(ds, seed=123, threads=2, max_seconds=5.0).value
    # one value of the data
    values = ds.frame.get_column("anom_c").to_numpy().copy()
    values[-1] += 0.01
    changed = replace(ds, frame=ds.frame.with_columns(pl.Series("anom_c", values)))
    assert _fingerprint(changed).value != base.value and _fingerprint(changed).parts["data"] != base.parts["data"]
    # the split: one year moved from validation to train
    moved = datasets.load("enso", train_end_year=1981)
    assert _fingerprint(moved).value != base.value
    # the task's settings, and a fit setting
    assert _fingerprint(ds, make_task(ds, leads=6)).value != base.value
    assert _fingerprint(ds, make_task(ds, loss="gaussian_nll")).value != base.value
    for setting, value in (("steps", 21), ("restarts", 3), ("lr", 0.1), ("optimizer", "lbfgs")):
        assert _fingerprint(ds, **{setting: value}).value != base.value, setting
    with pytest.raises(ValueError, match=r"lack \['steps'\]"):
        dataset_fingerprint(ds, make_task(ds), {k: v for k, v in CALIBRATION.items() if k != "steps"})


# ---------------------------------------------------------------------------- reuse in the store
def _store_run(store, run_id, fingerprint, sources, seed=1):
    store.start_run(run_id, dataset="toy", task="curve", metric="rmse")
    library = open_library(
        store, run_id, fingerprint=fingerprint, parts={"what": "test"}, seed=seed, enabled=True, new_run=True
    )
    return library, store.add(sources, run_id)


def _result(run_id, candidate, status="ok", rmse=1.0):
    return EvaluationResult(
        candidate=candidate.hash,
        run_id=run_id,
        dataset="toy",
        task="curve",
        split="v",
        parameters={"a": rmse} if status == "ok" else {},
        train_metrics={"mse": rmse},
        heldout_metrics={"rmse": rmse} if status == "ok" else {},
        seconds=0.5,
        status=status,
        error=None if status == "ok" else f"{status} in the test",
        loss_history=[2.0, rmse],
    )


def test_reuse_copies_every_final_status_and_only_on_the_same_fingerprint(tmp_path):
    with CandidateStore(tmp_path / "c.duckdb") as store:
        _, first = _store_run(store, "night-1", "fp-a", SOURCES)
        store.record(
            [
                _result("night-1", first[0], rmse=0.3),
                _result("night-1", first[1], "crashed"),
                _result("night-1", first[2], "timeout"),
                _result("night-1", first[3], "error"),
            ]
        )
        library, second = _store_run(store, "night-2", "fp-a", SOURCES + [AB + "(- a (* b x))"], seed=2)
        assert [c.hash for c in library.reuse(second)] == [second[4].hash]  # only the unknown one is left
        status = store.run_status("night-2")
        assert (status.reused, status.calibrated, status.crashed, status.timeout, status.failed, status.pending) == (
            4,
            1,
            1,
            1,
            1,
            1,
        )
        assert (status.seed, status.dataset_fingerprint) == (2, "fp-a")
        evaluation = store.evaluation("night-2", first[0].hash)
        assert evaluation["reused_from"] == "night-1" and evaluation["parameters"] == {"a": 0.3}
        assert evaluation["loss_history"] == [2.0, 0.3] and evaluation["seconds"] == 0.5
        assert store.top(run_id="night-2")["hash"].to_list() == [first[0].hash]
        # a third night reuses the copy, and names the run that calibrated it
        library3, third = _store_run(store, "night-3", "fp-a", SOURCES[:1], seed=3)
        assert library3.reuse(third) == []
        assert store.evaluation("night-3", first[0].hash)["reused_from"] == "night-1"
        # other data: nothing reused
        other, fourth = _store_run(store, "other-data", "fp-b", SOURCES)
        assert other.reuse(fourth) == fourth and store.run_status("other-data").reused == 0
        # a fresh run: nothing reused either
        fresh = ProgramLibrary(store, "other-data", "fp-a", enabled=False)
        assert fresh.reuse(fourth) == fourth and fresh.seed_run() == [] and fresh.seeds == []
        assert library_runs(store, "fp-a") == ["night-1", "night-2", "night-3"]
        with pytest.raises(StoreError, match="was not added to run 'night-3'"):
            library3.reuse(second[1:2])


def test_the_best_ok_evaluation_is_reused_and_seeds_rank_by_validation(tmp_path):
    with CandidateStore(tmp_path / "c.duckdb") as store:
        _, first = _store_run(store, "night-1", "fp", SOURCES)
        store.record(
            [
                _result("night-1", first[0], rmse=0.9),
                _result("night-1", first[1], rmse=0.2),
                _result("night-1", first[2], "error"),
                _result("night-1", first[3], rmse=0.5),
            ]
        )
        _, again = _store_run(store, "night-2", "fp", [])
        store.add(SOURCES[:1], "night-2")
        store.record([_result("night-2", first[0], rmse=0.1)])  # calibrated again, better (another seed)
        programs = best_programs(store, "fp", k=3)
        assert [(p.hash, p.score) for p in programs] == [
            (first[0].hash, 0.1),
            (first[1].hash, 0.2),
            (first[3].hash, 0.5),
        ]
        assert programs[0].run_id == "night-2" and programs[0].source == SOURCES[0]
        library, _ = _store_run(store, "night-3", "fp", [])
        assert library.seed_run(k=2) == []  # both seeds reuse their evaluations: nothing to calibrate
        assert library.seeds == [first[0].hash, first[1].hash]
        assert store.evaluation("night-3", first[0].hash)["score"] == 0.1  # the better of the two evaluations
        status = store.run_status("night-3")
        assert (status.seeded, status.reused, status.new) == (2, 2, 2)
        assert set(store.history("night-3")["origin"].to_list()) == {LIBRARY_ORIGIN}
        # a resume of night-3 keeps its fingerprint and knows its seeds (the fingerprint given is ignored)
        resumed = open_library(store, "night-3", fingerprint="other", parts=None, seed=9, enabled=True, new_run=False)
        assert (resumed.fingerprint, resumed.seeds) == ("fp", library.seeds)
        assert store.run_status("night-3").seed == 1


def test_a_store_written_before_the_library_opens_and_migrates(tmp_path):
    path = tmp_path / "old.duckdb"
    with CandidateStore(path) as store:
        store.start_run("old-run", metric="rmse")
    con = duckdb.connect(str(path))
    con.sql("ALTER TABLE evaluations DROP COLUMN reused_from")
    con.sql(
        "ALTER TABLE runs DROP COLUMN dataset_fingerprint; ALTER TABLE runs DROP COLUMN fingerprint_parts; "
        "ALTER TABLE runs DROP COLUMN seed"
    )
    con.close()
    with CandidateStore(path, read_only=True) as store:  # a reader does not migrate: defaults
        status = store.run_status("old-run")
        assert (status.reused, status.seed, status.dataset_fingerprint) == (0, None, None)
    with CandidateStore(path) as store:  # the writer adds the columns; a resumed old run gets its fingerprint
        library = open_library(store, "old-run", fingerprint="fp", parts=None, seed=7, enabled=True, new_run=False)
        assert library.fingerprint == "fp" and store.run_status("old-run").seed == 7


# ---------------------------------------------------------------------------- real runs
def _discover(folder: Path, *, seed: int | None, fresh: bool = False, candidates: int = 24, **options):
    from flows.discover import Budget, add_progress_listener, build_config, run_discovery

    snapshots = []
    remove = add_progress_listener(snapshots.append)
    settings = dict(serial=True, batch_size=16, steps=20, restarts=2, top_k=1, test_top_k=1, log_every=3600.0)
    try:
        config = build_config("enso", "mutation", seed=seed, fresh=fresh, folder=str(folder), **{**settings, **options})
        report = run_discovery(config, Budget(minutes=None, max_candidates=candidates))
    finally:
        remove()
    assert report.status == "finished" and report.pending == 0
    return report, snapshots[-1]


def _query(folder: Path, sql: str, *params):
    con = duckdb.connect(str(folder / "candidates.duckdb"), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Two consecutive runs on ENSO in one folder (the first with a drawn seed), then a --fresh one."""
    folder = tmp_path_factory.mktemp("nights")
    first, _ = _discover(folder, seed=None)
    second, progress = _discover(folder, seed=11)
    fresh, _ = _discover(folder, seed=11, fresh=True)
    return folder, first, second, progress, fresh


def test_a_run_draws_and_records_its_seed(nights):
    folder, first, second, _, _ = nights
    assert isinstance(first.seed, int) and 0 <= first.seed < 2**31 and second.seed == 11
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        status = store.run_status(first.run_id)
    assert status.seed == first.seed and status.config["seed"] == first.seed
    assert status.config["calibration"]["seed"] == first.seed  # the fits follow the run's seed
    assert status.dataset_fingerprint == first.dataset_fingerprint == second.dataset_fingerprint
    from flows.cli_display import library_line

    assert f"seed {first.seed}" in library_line(first.to_dict())


def test_the_second_run_reuses_the_first_runs_evaluations(nights):
    folder, first, second, progress, _ = nights
    assert first.reused == 0 and first.library_seeds == []
    evaluated_first = {
        h for (h,) in _query(folder, "SELECT DISTINCT candidate FROM evaluations WHERE run_id = ?", first.run_id)
    }
    members = {h for (h,) in _query(folder, "SELECT hash FROM run_candidates WHERE run_id = ?", second.run_id)}
    rows = _query(
        folder,
        "SELECT candidate, reused_from FROM evaluations WHERE run_id = ? AND reused_from IS NOT NULL",
        second.run_id,
    )
    reused = {h for h, _ in rows}
    # every candidate of the second run that the first evaluated is reused, once, from the first run
    assert reused == members & evaluated_first and len(rows) == len(reused) == second.reused
    assert {origin for _, origin in rows} == {first.run_id}
    assert second.reused >= 5 and second.calibrated > second.reused  # and it calibrated new ones too
    # not calibrated again: a reused candidate has no evaluation of its own in the second run
    assert (
        _query(
            folder,
            "SELECT count(*) FROM evaluations WHERE run_id = ? AND reused_from IS NULL AND list_contains(?, candidate)",
            second.run_id,
            sorted(reused),
        )[0][0]
        == 0
    )
    # the same stored evaluation: parameters, scores, status
    copied = _query(
        folder,
        "SELECT a.parameters = b.parameters AND a.heldout_metrics = b.heldout_metrics "
        "AND a.status = b.status AND a.score IS NOT DISTINCT FROM b.score "
        "FROM evaluations a JOIN evaluations b ON a.candidate = b.candidate "
        "WHERE a.run_id = ? AND b.run_id = ? AND a.reused_from IS NOT NULL",
        second.run_id,
        first.run_id,
    )
    assert copied and all(same for (same,) in copied)
    # counted in the summary and the progress line
    from flows.cli_display import library_line

    assert f"reused {second.reused} evaluations from earlier runs" in library_line(second.to_dict())
    assert progress.reused == second.reused


def test_the_second_run_starts_from_the_first_runs_best_programs(nights):
    folder, first, second, _, _ = nights
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        best_first = store.top(5, run_id=first.run_id)["hash"].to_list()
        history = store.history(second.run_id)
    assert second.library_seeds == best_first  # by validation score, best first
    seeded = history.filter(pl.col("origin") == LIBRARY_ORIGIN)
    assert seeded["hash"].to_list() == best_first and set(seeded["outcome"]) == {"new"}
    assert history["origin"][:5].to_list() == [LIBRARY_ORIGIN] * 5  # before any proposal
    # the library seeds are not part of the candidate budget: 24 proposals were accepted besides
    # (and the task's reference programs, origin "reference", that are not among the seeds already)
    references = _query(
        folder,
        "SELECT count(*) FROM proposals WHERE run_id = ? AND origin = 'reference' AND outcome = 'new'",
        second.run_id,
    )[0][0]
    assert second.new == 24 + 5 + references and references <= 3
    # the mutation proposer's first round: its parents include the seeds (the run's best programs)
    parents = _query(
        folder,
        "SELECT parents FROM proposals WHERE run_id = ? AND origin = 'mutation' ORDER BY id LIMIT 16",
        second.run_id,
    )
    used = {p for (text,) in parents for p in json.loads(text)}
    assert used & set(best_first)


def test_fresh_neither_reuses_nor_seeds(nights):
    folder, first, _, _, fresh = nights
    # (a fresh run still starts from the task's three reference programs)
    assert fresh.reused == 0 and fresh.library_seeds == [] and fresh.new == 24 + 3
    assert (
        _query(folder, "SELECT count(*) FROM evaluations WHERE run_id = ? AND reused_from IS NOT NULL", fresh.run_id)[
            0
        ][0]
        == 0
    )
    assert (
        _query(folder, "SELECT count(*) FROM proposals WHERE run_id = ? AND origin = ?", fresh.run_id, LIBRARY_ORIGIN)[
            0
        ][0]
        == 0
    )
    # its results join the library all the same
    assert fresh.dataset_fingerprint == first.dataset_fingerprint


def test_the_same_seed_replays_the_same_serial_run(nights, tmp_path):
    folder, _, _, _, fresh = nights
    again, _ = _discover(folder, seed=11, fresh=True)
    other, _ = _discover(tmp_path, seed=12, fresh=True)
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        a = store.history(fresh.run_id).select("source", "outcome", "hash")
        b = store.history(again.run_id).select("source", "outcome", "hash")
        scores_a = store.top(100, run_id=fresh.run_id).select("hash", "score", "parameters")
        scores_b = store.top(100, run_id=again.run_id).select("hash", "score", "parameters")
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        c = store.history(other.run_id).select("source", "outcome", "hash")
    assert a.height >= 24 and a.to_dicts() == b.to_dicts()  # the same programs (24 new at least) in the same order
    assert scores_a.to_dicts() == scores_b.to_dicts()  # fitted the same
    assert a["hash"].to_list() != c["hash"].to_list()  # another seed explores differently


def test_a_changed_split_or_fit_setting_reuses_nothing(nights):
    # (a changed task setting, e.g. the forecast leads, is in the fingerprint test above: the CLI
    # has no option for it, and another task kind wraps candidates differently, so its hashes differ anyway)
    folder, first, second, _, _ = nights
    split, _ = _discover(folder, seed=11, candidates=16, dataset_options={"train_end_year": 1979})
    steps, _ = _discover(folder, seed=11, candidates=16, steps=21)
    for other in (split, steps):
        assert other.dataset_fingerprint not in (None, first.dataset_fingerprint)
        assert other.reused == 0 and other.library_seeds == []
    # with the seed of the second run, these runs re-proposed programs the earlier runs had evaluated
    evaluated = {
        h
        for (h,) in _query(
            folder, "SELECT DISTINCT candidate FROM evaluations WHERE run_id IN (?, ?)", first.run_id, second.run_id
        )
    }
    members = {h for (h,) in _query(folder, "SELECT hash FROM run_candidates WHERE run_id = ?", steps.run_id)}
    assert members & evaluated


def test_a_renamed_twin_of_an_earlier_runs_program_is_calibrated_as_stored(tmp_path):
    # the same canonical hash, other parameter names and literals: the run calibrates the stored text,
    # so every evaluation of the hash (reused or not) has the stored program's parameter names
    stored, renamed = AB + "(+ a (* b (* 2.0 x)))", "(param q 0.1) (param r 3.0) (+ q (* r (* 5.0 x)))"
    with CandidateStore(tmp_path / "c.duckdb") as store:
        store.start_run("night-1", metric="rmse")
        [first] = store.add([stored], "night-1")
        store.start_run("night-2", metric="rmse")
        [twin] = store.add([{"source": renamed, "origin": "mutation"}], "night-2")
        assert twin.hash == first.hash and twin.source == stored and twin.proposed_source == renamed
        assert list(twin.program.param_names) == ["a", "b"] and twin.program.canonical_hash == first.hash
        assert first.proposed_source is None
        assert store.history("night-2")["source"].to_list() == [renamed]  # the proposal itself is kept as sent
        assert [c.source for c in store.pending("night-2")] == [stored]


def test_the_llm_proposers_first_prompt_shows_the_library_programs(nights, tmp_path):
    # The LLM proposer's first request of a seeded run: its context's best programs are the library
    # seeds (the only programs on the new run's leaderboard), and the prompt shows their sources.
    # Built without sending anything: no server, no key needed.
    import shutil

    from flows.discover import Budget, Discovery, build_config
    from proposers.llm import build_messages

    folder, first, second, _, _ = nights
    for name in ("candidates.duckdb", "mlflow.db"):  # (an MLflow database made already: no migrations to wait for)
        shutil.copy(folder / name, tmp_path / name)
    config = build_config(
        "enso",
        "llm",
        model="openai/library-test",
        api_base="http://127.0.0.1:9/v1",
        seed=5,
        steps=20,
        restarts=2,
        folder=str(tmp_path),
        log_every=3600.0,
    )  # the nights' fit settings
    discovery = Discovery(config, Budget(minutes=None, max_candidates=1))
    try:
        context = discovery.propose.context()
        seeds = discovery.library.seeds
    finally:
        discovery.close()
    references = {
        h
        for (h,) in _query(
            tmp_path, "SELECT hash FROM proposals WHERE run_id = ? AND origin = 'reference'", discovery.run_id
        )
    }
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        library = {h: store.candidate(h)["source"] for h in set(seeds) | references}
    assert len(seeds) == 5 and context.best
    # every example is a library program or one of the task's reference programs the run starts from
    assert {p.canonical_hash for p in context.best} <= set(seeds) | references
    assert context.best[0].canonical_hash == seeds[0]  # the best of them first
    prompt = build_messages(context, 4)[1]["content"]
    for program in context.best:
        assert library[program.canonical_hash].strip() in prompt


def test_a_timeout_is_reused_only_from_a_run_that_allowed_as_much_time(tmp_path):
    """The fingerprint leaves --candidate-seconds out (it does not change a fit), but a timeout
    depends on it: a run that gives candidates more time calibrates last night's timeouts again."""

    def run(store, run_id, seconds, seed):
        store.start_run(run_id, dataset="toy", task="curve", metric="rmse", config={"candidate_seconds": seconds})
        library = open_library(store, run_id, fingerprint="fp-a", parts={}, seed=seed, enabled=True, new_run=True)
        return library, store.add(SOURCES[:2], run_id)

    with CandidateStore(tmp_path / "c.duckdb") as store:
        _, first = run(store, "short", 1.0, 1)
        store.record([_result("short", first[0], "timeout"), _result("short", first[1], "crashed")])
        longer, second = run(store, "longer", 5.0, 2)
        assert [c.hash for c in longer.reuse(second)] == [first[0].hash]  # the crash is still reused
        same, third = run(store, "same", 1.0, 3)
        assert same.reuse(third) == []
        assert (store.run_status("same").timeout, store.run_status("same").reused) == (1, 2)
        unlimited, fourth = run(store, "unlimited", None, 4)
        assert [c.hash for c in unlimited.reuse(fourth)] == [first[0].hash]
