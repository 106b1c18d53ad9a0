"""Dask workers without oversubscription, and ``ndvm worker --scheduler ADDRESS``.

A calibration batch spreads over native threads (``ndvm.calibrate_many(threads=...)``; None means
every core of the machine). On a Dask worker that would oversubscribe: a worker runs up to
``nthreads`` tasks at once, and each batch would take every core. So a batch on a Dask worker uses

- ``$NDVM_WORKER_THREADS`` native threads when set (``ndvm worker`` sets it: one batch at a time
  per worker, on the worker's ``--nthreads`` cores), else
- the worker's share of the cores it may run on: ``cores // slots``, where ``slots`` counts the task
  slots (``nthreads``) of every worker on the same host, as the scheduler reports them (a plain
  ``dask worker --nworkers K --nthreads T`` runs K*T batches at once, each on cores/(K*T) threads).

Outside a Dask worker nothing changes (the flow's own runners decide).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from urllib.parse import urlparse

from flows.environment import OFFLINE_ENV

WORKER_THREADS_ENV = "NDVM_WORKER_THREADS"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def current_worker():
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):  # no distributed, or not inside a worker's task
        return None


def batch_threads(requested: int | None) -> int | None:
    """Native threads for one calibration batch: ``requested`` when given; on a Dask worker its
    share of the cores (see the module docstring); else None (every core)."""
    if requested is not None:
        return requested
    env = os.environ.get(WORKER_THREADS_ENV)
    worker = current_worker()
    if worker is None:
        return None
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if value >= 1:
            return value
        raise ValueError(f"${WORKER_THREADS_ENV} must be a whole number >= 1, got {env!r}")
    return max(1, usable_cores() // host_slots(worker))


_SLOTS_CACHE: dict[str, tuple[float, int]] = {}
_SLOTS_TTL = 60.0  # seconds; workers joining later are counted at the next look-up


def _own_slots(worker) -> int:
    return max(1, int(getattr(worker.state, "nthreads", 0) or getattr(worker, "nthreads", 1) or 1))


def host_slots(worker) -> int:
    """Task slots of all the workers on ``worker``'s host, this one included (asked of the
    scheduler once a minute; this worker's own ``nthreads`` when the scheduler cannot be asked)."""
    host = urlparse(worker.address).hostname or ""
    cached = _SLOTS_CACHE.get(host)
    if cached and time.monotonic() - cached[0] < _SLOTS_TTL:
        return cached[1]
    slots = _own_slots(worker)
    try:
        from distributed import get_client

        workers = get_client().scheduler_info(n_workers=-1)["workers"]
        here = [info for address, info in workers.items() if urlparse(address).hostname == host]
        slots = max(slots, sum(int(info.get("nthreads", 1)) for info in here))
    except Exception:  # no scheduler answer (or an older distributed): this worker's own slots
        pass
    _SLOTS_CACHE[host] = (time.monotonic(), slots)
    return slots


# ---------------------------------------------------------------------------- ndvm worker
def add_worker_command(subparsers) -> None:
    p = subparsers.add_parser(
        "worker",
        help="start a Dask worker for `ndvm discover --dask-address` (one batch at a time on --nthreads cores)",
    )
    p.add_argument("--scheduler", required=True, metavar="tcp://HOST:PORT", help="the Dask scheduler's address")
    p.add_argument(
        "--nthreads",
        type=int,
        default=None,
        help="cores the worker's calibrations use (default: every core this process may run on)",
    )
    p.add_argument("--name", help="worker name shown by the scheduler (default: Dask's)")
    p.add_argument("--host", help="address to listen on (default: Dask's choice; 127.0.0.1 for this machine only)")
    p.add_argument("--memory-limit", default="auto", help="Dask's memory limit of the worker (default auto)")
    p.set_defaults(fn=cmd_worker)


def worker_command(
    scheduler: str, *, name: str | None = None, host: str | None = None, memory_limit: str = "auto"
) -> list[str]:
    """The ``dask worker`` command line: one worker process with one task slot, so one batch runs
    at a time and takes the cores given by $NDVM_WORKER_THREADS."""
    command = [
        sys.executable,
        "-m",
        "distributed.cli.dask_worker",
        scheduler,
        "--nworkers",
        "1",
        "--nthreads",
        "1",
        "--memory-limit",
        memory_limit,
        "--no-dashboard",
    ]
    if name:
        command += ["--name", name]
    if host:
        command += ["--host", host]
    return command


def cmd_worker(args: argparse.Namespace) -> int:
    if not args.scheduler.startswith(("tcp://", "tls://", "ucx://")):
        print(f"ndvm worker: --scheduler must look like tcp://HOST:PORT, got {args.scheduler!r}", file=sys.stderr)
        return 2
    if args.nthreads is not None and args.nthreads < 1:
        print(f"ndvm worker: --nthreads must be >= 1, got {args.nthreads}", file=sys.stderr)
        return 2
    threads = args.nthreads or usable_cores()
    env = {
        **{k: v for k, v in OFFLINE_ENV.items() if k not in os.environ},
        **os.environ,
        WORKER_THREADS_ENV: str(threads),
    }
    if not env.get("PREFECT_API_URL"):
        print(
            "ndvm worker: PREFECT_API_URL is not set, so each task run starts a temporary Prefect server on this "
            "machine (seconds each); point it at the flow's server: export PREFECT_API_URL=http://HOST:4200/api",
            file=sys.stderr,
        )
    command = worker_command(args.scheduler, name=args.name, host=args.host, memory_limit=args.memory_limit)
    print(f"ndvm worker: {threads} calibration threads, one batch at a time, scheduler {args.scheduler}", flush=True)
    if shutil.which(command[0]) is None and not os.path.exists(command[0]):
        print(f"ndvm worker: {command[0]} not found", file=sys.stderr)
        return 2
    process = subprocess.Popen(command, env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the worker too (same process group): let it close
        try:
            return process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


__all__ = [
    "WORKER_THREADS_ENV",
    "add_worker_command",
    "batch_threads",
    "cmd_worker",
    "usable_cores",
    "worker_command",
]
