"""``ndvm ui``: the MLflow UI over a run folder's store, with a link to each experiment's leaderboard."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from flows.environment import quiet_environment, with_offline_env


def mlflow_server_command(folder: str, host: str, port: int) -> list[str]:
    db = Path(folder).resolve() / "mlflow.db"
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return [
        mlflow,
        "server",
        "--backend-store-uri",
        f"sqlite:///{db}",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def leaderboard_links(folder: str, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """One line per dataset-and-task experiment of the folder's MLflow store, linking its
    leaderboard view: MLflow 3.17's UI opens on its GenAI pages unless the address says otherwise.
    Read from the store directly (the server may still be starting); empty when it cannot be read."""
    from mlflow.tracking import MlflowClient

    from storage.tracking import leaderboard_path

    db = Path(folder).resolve() / "mlflow.db"
    try:
        experiments = MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    except Exception as exc:  # the links are a convenience: the UI starts without them
        print(f"ndvm ui: could not list the experiments of {db}: {exc}", file=sys.stderr)
        return []
    return [
        f"  {e.name}: http://{host}:{port}/{leaderboard_path(e.experiment_id)}"
        for e in sorted(experiments, key=lambda e: e.name)
        if e.name.startswith("ndvm-")
    ]


# What MLflow 3.17's UI shows besides the runs, and how to quiet it (README "A scientist's morning").
UI_NOTE = (
    "MLflow's telemetry is off for this server (DO_NOT_TRACK=true, MLFLOW_DISABLE_TELEMETRY=true: "
    "flows/offline.env). Its start page is the GenAI view: the links above open the runs table; the "
    "'GenAI | Model training' switch at the top left is kept by your browser once set to Model training. "
    "MLflow 3.17 has no server setting for its 'MLflow Assistant' panel on the right: close it with its x; "
    "'Exit shared view' above the table dismisses the shared-view notice."
)


def cmd_ui(args: argparse.Namespace) -> int:
    quiet_environment()
    db = Path(args.folder).resolve() / "mlflow.db"
    if not db.is_file():
        raise SystemExit(f"ndvm ui: no MLflow store at {db}; run `ndvm discover` first (or pass --folder)")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"ndvm ui: binding to {args.host}: anyone who can reach this machine can read the results", file=sys.stderr
        )
    command = mlflow_server_command(args.folder, args.host, args.port)
    env = with_offline_env(os.environ)
    # Its own process group: on Ctrl-C or SIGTERM (docker stop) the server and its uvicorn worker
    # are stopped together, never orphaned.
    process = subprocess.Popen(command, env=env, start_new_session=True)

    def terminate(signum, frame):  # SIGTERM -> the same clean stop as Ctrl-C
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    print(f"MLflow UI: http://{args.host}:{args.port}  (store {db}; Ctrl-C stops it)", flush=True)
    links = leaderboard_links(args.folder, args.host, args.port)
    if links:
        print("open an experiment's leaderboard (the classic runs view, not MLflow's GenAI start page):", flush=True)
    for line in links:
        print(line, flush=True)
    print(UI_NOTE, flush=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        _stop_group(process)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


__all__ = ["cmd_ui", "leaderboard_links", "mlflow_server_command"]
