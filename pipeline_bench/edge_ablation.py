"""Ablations of the table search (issue 37): ``ndvm discover`` on the symreg-discovery problems under
two settings, same seeds, same wall clock; NMSE on the in-domain and the out-of-domain test files.

    python -m pipeline_bench.edge_ablation [SECONDS] [SEED ...] [--only SETTING] [--ablation NAME]
        (default: 180 s, seed 0, both settings of the edge ablation)

``--ablation edge`` (part 4): the edge block (the default, ``--edge-fraction 0.1``) against none
(``--edge-fraction 0``). ``--ablation linear`` (part 1): linear parameters solved by least squares
(``--solve-linear``) against every parameter searched (the pipeline's default).

The LLM-SR problems need ../shared/data/llmsr (else they are left out, with the reason).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ndvm_bench.common import BenchConfig, find_data_dir
from pipeline_bench.discovery import _quiet
from pipeline_bench.symreg_discovery import llmsr_problems, nmse, run_ndvm, synthetic_problems

ABLATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "edge": {"edge block": (), "no edge block": ("--edge-fraction", "0")},
    "linear": {"linear solved": ("--solve-linear",), "every parameter searched": ()},
}
SETTINGS = ABLATIONS["edge"]


def _take(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """argv without ``flag VALUE``, and VALUE (None when the flag is absent)."""
    if flag not in argv:
        return argv, None
    at = argv.index(flag)
    value = argv[at + 1] if at + 1 < len(argv) else ""
    return argv[:at] + argv[at + 2 :], value


def main(argv: list[str]) -> int:
    argv, ablation = _take(argv, "--ablation")
    if ablation is not None and ablation not in ABLATIONS:
        raise SystemExit(f"--ablation takes one of {sorted(ABLATIONS)}, got {ablation!r}")
    choices = ABLATIONS[ablation or "edge"]
    settings = dict(choices)
    argv, only = _take(argv, "--only")
    if only is not None:
        if only not in choices:
            raise SystemExit(f"--only takes one of {sorted(choices)}, got {only!r}")
        settings = {only: choices[only]}
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
