"""What calibrating in a supervised worker process costs against calibrating in the flow's process.

    .venv/bin/python scripts/bench_supervisor.py [--batches 6] [--batch-size 32]

Mutation-proposer candidates of the enso task, calibrated batch by batch with ``calibrate_batch``
in this process, then through a one-worker ``flows.supervisor.WorkerPool`` (the default runner):
prints the worker's start-up time (spawn, imports, the task object) and the per-batch times and
their ratio (pipe round trip and pickling of the items and results included).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--restarts", type=int, default=8)
    args = parser.parse_args()

    import ndvm
    from flows.calibration import BatchItem, CalibrationOptions, calibrate_batch
    from flows.problem import ProblemSpec, load_problem, task_spec
    from flows.supervisor import Job, WorkerPool
    from proposers import MutationProposer, ProposalContext

    dataset, task = load_problem(ProblemSpec(dataset="enso"))
    proposer, context = MutationProposer(seed=0), ProposalContext(task_spec(dataset, task))
    items, seen = [], set()
    while len(items) < args.batches * args.batch_size:
        for proposal in proposer.propose(context, 16):
            wrapped = task.program_source(proposal.source)
            digest = ndvm.compile(wrapped).canonical_hash
            if digest not in seen:
                seen.add(digest)
                items.append(BatchItem(digest, proposal.source, wrapped))
    batches = [items[i * args.batch_size : (i + 1) * args.batch_size] for i in range(args.batches)]
    options = CalibrationOptions(steps=args.steps, restarts=args.restarts)

    calibrate_batch(task, batches[0][:2], options)  # warm caches of this process too
    in_process = []
    for batch in batches:
        started = time.perf_counter()
        calibrate_batch(task, batch, options)
        in_process.append(time.perf_counter() - started)

    started = time.perf_counter()
    pool = WorkerPool(task, options, workers=1)
    while not pool._workers[0].ready:  # the first poll sees the worker's "ready"
        pool.poll(0.01)
    startup = time.perf_counter() - started
    pool.submit(Job(0, batches[0][:2], False, None))
    while not pool.poll(0.05):
        pass
    supervised = []
    try:
        for i, batch in enumerate(batches, 1):
            started = time.perf_counter()
            pool.submit(Job(i, batch, False, None))
            while not pool.poll(0.001):
                pass
            supervised.append(time.perf_counter() - started)
    finally:
        pool.close()
    a, b = statistics.median(in_process), statistics.median(supervised)
    print(f"worker start-up (spawn, imports, task object): {startup:.2f} s")
    print(
        f"batch of {args.batch_size}, {args.steps} steps x {args.restarts} restarts, median of {args.batches}: "
        f"in-process {a:.3f} s, supervised worker {b:.3f} s, ratio {b / a:.3f}"
    )


if __name__ == "__main__":
    main()
