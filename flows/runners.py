"""Where calibration batches run.

- ``threads`` (default): ``workers`` (default 2) supervised worker processes
  (``flows.supervisor.WorkerPool``), each calibrating one batch at a time on every core
  (``ndvm.calibrate_many`` spreads a batch over native threads). Two batches in flight keep the
  cores busy: while one worker scores its batch on the validation split (one Python thread) and
  hands it back, the other's batch is on every core. Not the flow's own process: a candidate that
  crashes the runtime must not take the run down with it.
- ``processes``: ``workers`` supervised worker processes, one batch each, cores split between them.
  A worker that dies is replaced; only its own batch is affected (see ``flows.supervisor``).
- ``dask``: prefect-dask's ``DaskTaskRunner`` on the cluster at ``dask_address``
  (``tcp://HOST:PORT``), or on a temporary local cluster of ``workers`` processes when no address
  is given. Give the workers ``PREFECT_API_URL`` of a running ``prefect server start`` (or they
  each start a temporary Prefect server, several seconds each). Candidates of a failed batch are
  retried alone in a local supervised worker.

Every runner returns the workers' results to the flow's process, the only writer of the store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flows.calibration import BatchResult, CalibrationOptions
from flows.dask_task import dask_batch_task, submit_batch
from flows.options import option

RUNNERS = ("threads", "processes", "dask")
# Batches in flight of the threads runner: one fitting on every core while the other is scored,
# returned and replaced (BENCHMARKS.md, "make run").
THREADS_BATCHES_IN_FLIGHT = 2


class RunnerError(ValueError):
    """A task-runner option that cannot work (an unknown runner, a malformed Dask address)."""


@dataclass(frozen=True)
class RunnerChoice:
    kind: str = field(
        default="threads",
        metadata=option(
            "where batches run: native threads on every core (two supervised workers, a batch each), "
            "worker processes with the cores split between them, or Dask",
            group="execution",
            flag="--runner",
            name="runner",
            choices=RUNNERS,
        ),
    )
    workers: int | None = field(
        default=None,
        metadata=option(
            f"worker processes (threads: batches in flight, each on every core, default {THREADS_BATCHES_IN_FLIGHT}; "
            "processes/dask: cores split between them)",
            group="execution",
        ),
    )
    dask_address: str | None = field(
        default=None,
        metadata=option("calibrate on this Dask cluster (prefect-dask)", group="execution", metavar="tcp://HOST:PORT"),
    )

    def check(self) -> RunnerChoice:
        kind = "dask" if self.dask_address else self.kind
        if kind not in RUNNERS:
            raise RunnerError(f"unknown runner {self.kind!r}; use one of {', '.join(RUNNERS)}")
        if self.dask_address and not self.dask_address.startswith(("tcp://", "tls://", "inproc://", "ucx://")):
            raise RunnerError(f"--dask-address must look like tcp://HOST:PORT, got {self.dask_address!r}")
        if self.workers is not None and self.workers < 1:
            raise RunnerError("workers must be >= 1")
        return RunnerChoice(kind, self.workers, self.dask_address)

    def batches_in_flight(self) -> int:
        """How many batches to keep submitted: one per worker process (threads: two by default)."""
        if self.kind == "threads":
            return self.workers or THREADS_BATCHES_IN_FLIGHT
        return self.workers or (2 if self.kind == "dask" else max(1, os.cpu_count() or 1))

    def queued_batches(self) -> int:
        """Batches of candidates the proposal stage keeps queued ahead of calibration: one for each
        local worker of the threads runner (a worker that frees up finds one ready; more would only
        be proposed from an older leaderboard and left to the drain at the deadline), two for each
        worker process or Dask worker."""
        if self.kind == "threads":
            return self.batches_in_flight()
        return 2 * self.batches_in_flight()

    def native_threads(self) -> int | None:
        """Native threads per batch: every core (threads runner); split between local worker processes."""
        if self.kind == "threads":
            return None
        if self.kind == "processes" or (self.kind == "dask" and not self.dask_address):
            return max(1, (os.cpu_count() or 1) // self.batches_in_flight())
        return None  # a remote cluster: the worker's own cores

    def cores_per_batch(self, threads: int | None) -> int | None:
        """The cores one batch can count on while every batch in flight runs (the batch time
        limit's divisor, flows/supervisor.py): ``threads`` per batch, or the local cores shared by
        the batches of the threads runner; None where the worker decides (a remote cluster)."""
        if threads is not None:
            return threads
        if self.kind == "threads":
            return max(1, (os.cpu_count() or 1) // self.batches_in_flight())
        return None

    @contextlib.contextmanager
    def backend(
        self, task_obj: Any, options: CalibrationOptions, api_url: str | None = None
    ) -> Iterator[tuple[Any, Any]]:
        """(backend, isolation factory) for ``flows.supervisor.CalibrationSupervisor``: a
        ``WorkerPool`` (threads, processes), or a ``PrefectBackend`` on Dask with a factory of a
        local one-worker pool for the candidates retried alone."""
        from flows.supervisor import PrefectBackend, WorkerPool

        if self.kind in ("threads", "processes"):
            pool = WorkerPool(task_obj, options, workers=self.batches_in_flight())
            try:
                yield pool, None
            finally:
                pool.close()
            return
        alone = CalibrationOptions(**{**options.__dict__, "threads": None})
        with self.make(api_url) as runner:
            yield (
                PrefectBackend(runner, task_obj, options, self.batches_in_flight()),
                lambda: WorkerPool(task_obj, alone, workers=1),
            )

    def make(self, api_url: str | None = None) -> Any:
        """The Prefect task runner of the dask runner (use as a context manager, then ``submit``).
        ``api_url``: the Prefect API the workers of a temporary local Dask cluster report to (see
        ``worker_api_url``)."""
        if self.kind != "dask":
            raise RunnerError(f"the {self.kind} runner has no Prefect task runner (see RunnerChoice.backend)")
        from prefect_dask import DaskTaskRunner

        if self.dask_address:
            return DaskTaskRunner(address=self.dask_address)
        cluster = {
            "n_workers": self.batches_in_flight(),
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
        }
        if api_url:
            cluster["env"] = {"PREFECT_API_URL": api_url}
        return DaskTaskRunner(cluster_kwargs=cluster)

    def describe(self) -> str:
        if self.kind == "dask":
            return f"dask ({self.dask_address or f'local cluster, {self.batches_in_flight()} workers'})"
        if self.kind == "processes":
            return f"processes ({self.batches_in_flight()} workers)"
        n = self.batches_in_flight()
        return f"threads ({n} worker process{'es' if n > 1 else ''}, all cores each)"


def worker_api_url() -> str | None:
    """The Prefect API worker processes should report to: $PREFECT_API_URL, or the temporary server
    this process started (without it every worker would start a temporary server of its own)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        return str(get_current_settings().api.url)
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer._instances.get(None)  # the ephemeral server, when one runs
    if server is not None and server.server_process is not None:
        return server.api_url
    return None


@contextlib.contextmanager
def worker_environment(choice: RunnerChoice) -> Iterator[str | None]:
    """Point worker processes at this run's Prefect API while the runner starts them (Prefect's
    process pool copies os.environ into its workers), then restore the environment."""
    url = worker_api_url() if choice.kind == "dask" else None  # only Dask workers report to Prefect
    if not url or os.environ.get("PREFECT_API_URL") or choice.dask_address:
        yield url
        return
    os.environ["PREFECT_API_URL"] = url
    try:
        yield url
    finally:
        os.environ.pop("PREFECT_API_URL", None)


__all__ = [
    "RUNNERS",
    "THREADS_BATCHES_IN_FLIGHT",
    "RunnerChoice",
    "RunnerError",
    "dask_batch_task",
    "submit_batch",
    "BatchResult",
    "worker_api_url",
    "worker_environment",
]
