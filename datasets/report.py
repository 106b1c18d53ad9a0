"""Reference-model report: ``python -m datasets.report [DATASET|PATH] [key=value ...]``.

Fits every reference model of the dataset's task on the training part and prints its scores on
the validation and on the test split as Markdown tables (these are the numbers a discovered
program has to beat).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from .registry import load
from .tasks import make_task


def _parse(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def reference_table(task, split: str = "test") -> str:
    rows = task.score_references(split)
    if "rmse_by_lead" in rows[0]:  # a forecast task's score
        lines = [
            "| model | params | mean RMSE | RMSE lead 1 / 3 / 6 / 12 | mean ACC | ACC lead 1 / 3 / 6 / 12 |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            if r.get("error") and "rmse_by_lead" not in r:  # a reference whose fit failed: no score
                lines.append(f"| {r['model']} | {r['n_params']} | failed | {r['error']} | | |")
                continue
            rm, ac = r["rmse_by_lead"], r["acc_by_lead"]
            lines.append(
                f"| {r['model']} | {r['n_params']} | {r['mean_rmse']:.3f} | "
                f"{rm[0]:.3f} / {rm[2]:.3f} / {rm[5]:.3f} / {rm[11]:.3f} | {r['mean_acc']:.3f} | "
                f"{ac[0]:.2f} / {ac[2]:.2f} / {ac[5]:.2f} / {ac[11]:.2f} |"
            )
    else:
        lines = [
            f"| model | params | {split} RMSE (mean over groups) | {split} RMSE pooled | train RMSE | fit s |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['model']} | {r['n_params']} | {r['rmse']:.4f} | {r['rmse_pooled']:.4f} | "
                f"{r['train_rmse']:.4f} | {r['fit_seconds']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv.pop(0) if argv else "enso"
    options = dict(arg.split("=", 1) for arg in argv)
    task_options = {k[5:]: _parse(v) for k, v in options.items() if k.startswith("task.")}
    data_options = {k: _parse(v) for k, v in options.items() if not k.startswith("task.")}
    start = time.perf_counter()
    dataset = load(name, **data_options)
    task = make_task(dataset, **task_options)
    print(f"{dataset.describe()}\ntask: {task.name}\n")
    for split in ("validation", "test"):
        print(f"{split}:\n{reference_table(task, split)}\n")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
