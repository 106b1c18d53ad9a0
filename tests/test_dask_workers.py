"""Dask across machines without oversubscription: a real scheduler and two `ndvm worker` processes
on 127.0.0.1. Each worker's calibrations use the worker's thread count (not every core of the
machine), and a discovery run calibrates on both workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_flows_support import free_port

REPO = Path(__file__).resolve().parents[1]


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


@pytest.fixture
def cluster(prefect_api):
    """(scheduler address, {worker name: nthreads}): `dask scheduler` and two `ndvm worker`s."""
    port = free_port()
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "DASK_LOGGING__DISTRIBUTED": "error"}
    env.pop(__import__("flows.dask_worker", fromlist=["x"]).WORKER_THREADS_ENV, None)
    address = f"tcp://127.0.0.1:{port}"
    processes = [
        _start(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            env,
        )
    ]
    ndvm = str(Path(sys.executable).with_name("ndvm"))
    threads = {"w-one": 1, "w-two": 2}
    try:
        for name, n in threads.items():
            processes.append(
                _start(
                    [
                        ndvm,
                        "worker",
                        "--scheduler",
                        address,
                        "--nthreads",
                        str(n),
                        "--name",
                        name,
                        "--host",
                        "127.0.0.1",
                    ],
                    env,
                )
            )
        yield address, threads
    finally:
        for process in reversed(processes):
            _stop(process)


@pytest.mark.timeout(300)
def test_ndvm_workers_use_their_thread_count_and_calibrate_a_run(cluster, tmp_path):
    from distributed import Client

    from flows.calibration import calibration_threads_here
    from flows.discover import discover

    address, threads = cluster
    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=90)
        workers = {info["name"]: addr for addr, info in client.scheduler_info()["workers"].items()}
        assert set(workers) == set(threads)
        for name, n in threads.items():
            info = client.scheduler_info()["workers"][workers[name]]
            assert info["nthreads"] == 1, "one task slot: one batch at a time per ndvm worker"
            here = client.submit(calibration_threads_here, workers=[workers[name]], pure=False).result(60)
            assert (here["threads"], here["setting"]) == (n, str(n)), f"{name}: a batch uses the worker's {n} threads"
            assert here["pid"] != os.getpid()
        # the flow's own process is not a worker: nothing changes there
        assert calibration_threads_here()["threads"] is None
    report = discover(
        task="enso",
        proposer="mutation",
        budget={"minutes": 2.0, "max_candidates": 16},
        dask_address=address,
        workers=2,
        batch_size=4,
        steps=30,
        restarts=2,
        top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="ndvm-workers",
        test_top_k=1,
    )
    assert report["runner"] == f"dask ({address})"
    # 16 proposals and the task's three reference programs (enso: AR(AIC), damped persistence, seasonal AR)
    assert report["new"] == 16 + 3 and report["pending"] == 0 and report["calibrated"] >= 12 + 3
    assert len({w.rsplit(":", 1)[1] for w in report["workers"]}) == 2, "both workers calibrated batches"


def test_plain_dask_workers_share_the_cores_of_their_host(prefect_api):
    """`dask worker --nworkers 2 --nthreads 2` (not started by ndvm) runs 4 batches at once on one
    host: each gets cores // 4 threads, not every core."""
    from distributed import Client, LocalCluster

    from flows.calibration import calibration_threads_here
    from flows.dask_worker import usable_cores

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None, host="127.0.0.1"
        ) as local,
        Client(local) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        here = client.submit(calibration_threads_here, pure=False).result(60)
    assert here["host_slots"] == 4 and here["setting"] is None
    assert here["threads"] == max(1, usable_cores() // 4)


def test_worker_command_line_is_checked(capsys):
    from ndvm.cli import main

    assert main(["worker", "--scheduler", "127.0.0.1:8786"]) == 2
    assert "tcp://HOST:PORT" in capsys.readouterr().err
    assert main(["worker", "--scheduler", "tcp://127.0.0.1:1", "--nthreads", "0"]) == 2
