"""Cost per candidate of the forecast task's validation score and of its validation blocks (C2).

    .venv/bin/python scripts/forecast_validation_cost.py

Fits the four ENSO seeds (100 Adam steps x 8 restarts), then times ``task.score(fit)`` on the
validation split and ``task.block_scores`` alone (best of 3 rounds of 20 repetitions).
"""

from __future__ import annotations

import time

import numpy as np

import datasets
from datasets.tasks import make_task


def main() -> None:
    task = make_task(datasets.load("enso"))
    fits = [task.fit(source, steps=100, restarts=8, seed=0) for source in task.seed_programs()[:4]]
    obs = task.targets("validation")
    forecasts = {id(f): task.forecasts(f, "validation") for f in fits}

    def per_candidate(fn, reps: int = 20) -> float:
        rounds = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(reps):
                for fit in fits:
                    fn(fit)
            rounds.append((time.perf_counter() - start) / (reps * len(fits)))
        return min(rounds)

    score = per_candidate(lambda f: task.score(f, "validation"))
    blocks = per_candidate(lambda f: task.block_scores(forecasts[id(f)], obs))
    fit_ms = 1e3 * float(np.median([f.seconds for f in fits]))
    print(
        f"enso, {task.n_blocks} validation blocks: fit {fit_ms:.1f} ms (median of the 4 seeds); "
        f"validation score {score * 1e3:.2f} ms per candidate, of which the blocks {blocks * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
