"""The edge block's ablation (issue 37 part 4): ``ndvm discover`` on the symreg-discovery problems
with the edge block (the default, ``--edge-fraction 0.1``) and without it (``--edge-fraction 0``),
same seeds, same wall clock; NMSE on the in-domain and the out-of-domain test files.

    python -m pipeline_bench.edge_ablation [SECONDS] [SEED ...] [--only SETTING]
        (default: 180 s, seed 0, both settings; --only "edge block" or --only "no edge block")

The LLM-SR problems need ../shared/data/llmsr (else they are left out, with the reason).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ndvm_bench.common import BenchConfig, find_data_dir
from pipeline_bench.discovery import _quiet
from pipeline_bench.symreg_discovery import llmsr_problems, nmse, run_ndvm, synthetic_problems

SETTINGS = {"edge block": (), "no edge block": ("--edge-fraction", "0")}


def main(argv: list[str]) -> int:
    settings = dict(SETTINGS)
    if "--only" in argv:
        at = argv.index("--only")
        only = argv[at + 1] if at + 1 < len(argv) else ""
        if only not in SETTINGS:
            raise SystemExit(f"--only takes one of {sorted(SETTINGS)}, got {only!r}")
        settings = {only: SETTINGS[only]}
        argv = argv[:at] + argv[at + 2 :]
    seconds = float(argv[0]) if argv else 180.0
    seeds = [int(s) for s in argv[1:]] or [0]
    _quiet()
    problems, notes = llmsr_problems(find_data_dir(BenchConfig()))
    problems.update(synthetic_problems())
    print("| problem | seed | setting | NMSE in-domain | NMSE out-of-domain | complexity | calibrated | model |")
    print("|---|--:|---|--:|--:|--:|--:|---|")
    with tempfile.TemporaryDirectory(prefix="ndvm-edge-ablation-") as tmp:
        for name, tables in problems.items():
            target = list(tables["train"])[-1]
            for seed in seeds:
                for setting, extra in settings.items():
                    folder = Path(tmp) / name / str(seed) / setting.replace(" ", "-")
                    r = run_ndvm(name, tables, seconds, folder, seed=seed, extra_args=extra)
                    if "error" in r:
                        print(f"| {name} | {seed} | {setting} | error: {r['error']} | | | | |", flush=True)
                        continue
                    ids = nmse(r["pred_id"], tables["test_id"][target])
                    ood = nmse(r["pred_ood"], tables["test_ood"][target])
                    model = str(r["model"]).replace("|", "/")[:90]
                    print(
                        f"| {name} | {seed} | {setting} | {ids:.3g} | {ood:.3g} | {r['complexity']} | "
                        f"{r['calibrated']} | {model} |",
                        flush=True,
                    )
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
