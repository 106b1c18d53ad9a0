"""The pipeline commands of ``ndvm``: registration in ndvm's parser, datasets, calibrate,
leaderboard, serve (a deployment with a cron schedule on the session's Prefect server), ui."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from conftest import shared_file
from test_flows_support import free_port, start_ui, stop_ui, subprocess_env

from ndvm.cli import build_parser, main

FORECAST_PROGRAM = """(param phi 0.9 (between -1 1))
(define (init) 0.0)
(define (predict s) (* phi s))
(define (update s y) y)
"""


def test_pipeline_commands_are_registered_in_ndvm():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"discover", "recalibrate", "serve", "leaderboard", "datasets", "calibrate", "ui"} <= set(sub.choices)
    args = parser.parse_args(["discover"])
    # the embedded default: enso, proposer chosen from the environment, two minutes, ./runs
    assert (args.task, args.proposer, args.minutes, args.folder, args.runner) == (
        "enso",
        "auto",
        2.0,
        "runs",
        "threads",
    )


def test_datasets_lists_the_registry(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    for name in ("enso", "enso-nino34", "battery", "battery-synthetic"):
        assert name in out
    assert "synthetic" in out


def test_calibrate_a_forecast_program_on_enso(tmp_path, capsys):
    program = tmp_path / "ar1.scm"
    program.write_text(FORECAST_PROGRAM)
    assert main(["calibrate", str(program), "--data", "enso", "--steps", "60", "--restarts", "4"]) == 0
    out = capsys.readouterr().out
    phi = float(out.split("phi = ")[1].split()[0])
    assert 0.5 < phi < 1.0  # monthly anomalies are strongly persistent
    assert "validation: mean_rmse" in out


def test_calibrate_a_curve_program_on_a_csv_column(tmp_path, capsys):
    t = np.linspace(0, 10, 60)
    y = 3.0 - 0.4 * t
    (tmp_path / "fade.csv").write_text("t,v\n" + "\n".join(f"{a},{b}" for a, b in zip(t, y)))
    program = tmp_path / "line.scm"
    program.write_text("(param a 1.0)\n(param b 0.0)\n(+ a (* b x))\n")
    code = main(
        [
            "calibrate",
            str(program),
            "--data",
            str(tmp_path / "fade.csv"),
            "--x",
            "t",
            "--y",
            "v",
            "--optimizer",
            "lbfgs",
            "--steps",
            "100",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    values = {line.split("=")[0].strip(): float(line.split("=")[1]) for line in out.splitlines() if " = " in line}
    assert values["a"] == pytest.approx(3.0, abs=1e-4) and values["b"] == pytest.approx(-0.4, abs=1e-4)
    assert "validation: rmse" in out


def test_calibrate_rejects_a_program_with_other_inputs(tmp_path):
    (tmp_path / "d.csv").write_text("t,v\n" + "\n".join(f"{i},{i}" for i in range(20)))
    program = tmp_path / "bad.scm"
    program.write_text("(param a 1.0)\n(* a z)\n")
    with pytest.raises(SystemExit, match=r"unknown input\(s\) \['z'\]: a curve program may only use the input `x`"):
        main(["calibrate", str(program), "--data", str(tmp_path / "d.csv"), "--x", "t", "--y", "v"])


def test_leaderboard_of_a_run_folder(enso_run, capsys):
    report, folder = enso_run
    assert main(["leaderboard", "--folder", str(folder), "--run", "enso-e2e", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert report["best_hash"] in out and "mean_rmse" in out


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_serve_registers_a_cron_deployment_and_runs_it(prefect_api, tmp_path):
    from prefect.client.orchestration import get_client

    from storage import CandidateStore

    # (the runner polls for due runs every 2 s here instead of 10 s)
    env = subprocess_env(prefect_api, PREFECT_RUNNER_POLL_FREQUENCY="2")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ndvm.cli",
            "serve",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--name",
            "nightly-test",
            "--minutes",
            "30",
            "--steps",
            "30",
            "--restarts",
            "2",
            "--top-k",
            "1",
            "--folder",
            str(tmp_path),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deployment = None
        deadline = time.monotonic() + 90
        with get_client(sync_client=True) as client:
            while time.monotonic() < deadline and deployment is None:
                assert proc.poll() is None, proc.stdout.read()
                try:
                    deployment = client.read_deployment_by_name("ndvm-discover/nightly-test")
                except Exception:  # not registered yet
                    time.sleep(0.5)
            assert deployment is not None, "the deployment was not registered in time"
            schedules = client.read_deployment_schedules(deployment.id)
        assert [(s.schedule.cron, s.schedule.timezone) for s in schedules] == [("0 2 * * *", "Europe/Berlin")]
        assert deployment.parameters["budget"]["minutes"] == 30.0
        assert deployment.parameters["task"] == "enso" and deployment.parameters["folder"] == str(tmp_path.resolve())

        # What the schedule does at 02:00, now: a run of the deployment, executed by the served process.
        with get_client(sync_client=True) as client:
            budget = {"minutes": 1.0, "max_candidates": 6}
            flow_run = client.create_flow_run_from_deployment(deployment.id, parameters={"budget": budget})
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                state = client.read_flow_run(flow_run.id).state
                if state is not None and state.is_final():
                    break
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(1.0)
        assert state is not None and state.is_completed(), state
        with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
            status = store.run_status(store.latest_run())
        # 6 proposals and the task's three reference programs (enso: AR(AIC), damped persistence, seasonal AR)
        assert (status.status, status.new, status.pending) == ("finished", 6 + 3, 0)
        # the run knows its deployment (Prefect's runtime): the next run of it would continue it if killed
        assert status.config["deployment"] == "nightly-test"
    finally:
        proc.send_signal(signal.SIGTERM)  # a served process stops cleanly on SIGTERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_discover_reports_a_wrong_run_id_without_a_traceback(prefect_api, tmp_path, capsys):
    assert main(["discover", "--resume", "no-such-run", "--folder", str(tmp_path)]) == 1
    assert "ndvm discover: cannot resume 'no-such-run'" in capsys.readouterr().err
    assert main(["serve", "--cron", "0 2 * * *", "--dask-address", "localhost:8786"]) == 1
    assert "tcp://HOST:PORT" in capsys.readouterr().err


def test_ui_refuses_a_folder_without_a_store(tmp_path):
    with pytest.raises(SystemExit, match="no MLflow store"):
        main(["ui", "--folder", str(tmp_path)])


def test_ui_serves_the_run_folder_on_localhost(enso_run, prefect_api):
    report, folder = enso_run
    port = free_port()
    proc = start_ui(folder, port, prefect_api)
    try:
        body = json.dumps({"experiment_ids": [report["mlflow_experiment_id"]], "max_results": 100}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/search",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=20) as reply:
            runs = json.load(reply)["runs"]
        names = {r["info"]["run_name"] for r in runs}
        assert "enso-e2e" in names and report["best_hash"] in names  # entries are named by their hash
    finally:
        stop_ui(proc)
    # SIGTERM to `ndvm ui` stops the MLflow server with it (its own process group): the port is free
    time.sleep(1.0)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)


def test_recalibrate_command_prints_old_and_new_scores(enso_run, capsys):
    sstoi = shared_file("enso/raw/cpc_sstoi.indices.txt")
    report, folder = enso_run
    code = main(
        [
            "recalibrate",
            "--from-run",
            "enso-e2e",
            "--top",
            "2",
            "--run-id",
            "recal-cli",
            "--steps",
            "30",
            "--restarts",
            "2",
            "--data",
            str(sstoi),
            "--folder",
            str(folder),
        ]
    )
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "enso-e2e re-fitted on" in out and "recal-cli" in out and report["best_hash"] in out
    assert "logged 2 nested runs" in out


def test_the_run_summary_names_the_registry_decision_and_links_the_leaderboard_view(enso_run):
    import io

    from rich.console import Console

    from flows.cli_display import print_run_summary

    report, folder = enso_run
    # the shared run is the first on its folder's fingerprint: its best becomes the champion
    assert report["champion"] and "ndvm-enso-forecast" in report["champion"]
    buffer = io.StringIO()
    print_run_summary(Console(file=buffer, width=400), report, str(folder))
    out = buffer.getvalue()
    assert f"model registry: {report['champion']}" in out
    experiment = report["mlflow_experiment_id"]
    assert f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?workflowType=machine_learning" in out


def test_ndvm_ui_links_each_experiments_leaderboard_view(enso_run):
    from flows.ui import leaderboard_links

    report, folder = enso_run
    lines = leaderboard_links(str(folder), "127.0.0.1", 5055)
    experiment = report["mlflow_experiment_id"]
    # (other tests of the session may log further experiments into this folder's store)
    assert (
        f"  ndvm-enso-forecast: http://127.0.0.1:5055/#/experiments/{experiment}/runs"
        "?workflowType=machine_learning&viewStateShareKey=leaderboard"
    ) in lines
    assert all(line.startswith("  ndvm-") and "workflowType=machine_learning" in line for line in lines)
