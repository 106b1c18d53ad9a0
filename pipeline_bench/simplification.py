"""What the simplifier does to proposals before they are fitted (issue 37 part 2):
``python -m pipeline_bench.simplification [--data-dir DIR]``.

Prints, for each recorded LLM corpus of the shared data (``ndvm_corpora/*.jsonl``, each program's
parameters declared at 0.5) and for 1,000 raw ENSO mutation proposals (``simplify=False``,
seed 1): how many the simplifier changes, parameters and nodes before and after, and how many
distinct programs (canonical hashes) remain: each merged program is one fit a run does not spend.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import ndvm
from ndvm_bench.common import BenchConfig, find_data_dir
from proposers.sexpr import count_nodes, read_all
from proposers.simplify import simplify_source

CORPORA = ("cosearch_candidates_valid", "cosearch_rec_candidates_valid")


def _nodes(source: str) -> int:
    return sum(count_nodes(f) for f in read_all(source) if not (isinstance(f, list) and f and f[0] == "param"))


def _rule(change: str) -> str:
    if change.endswith("became 0.0"):
        return "zero term"
    if change.endswith("became 1.0"):
        return "u/u factor"
    if change.endswith("u became u"):
        return "exp/log"
    if change.startswith("grouped"):
        return "constants grouped"
    if change.startswith("folded"):
        return "folded"
    if change.startswith("dropped the neutral"):
        return "neutral element"
    if change.startswith("dropped the unused"):
        return "unused parameter"
    return "lone parameters"


def measure(name: str, sources: list[str], wrap=lambda s: s) -> str:
    changed, params, nodes = 0, [0, 0], [0, 0]
    hashes: list[set[str]] = [set(), set()]
    rules: collections.Counter[str] = collections.Counter()
    for source in sources:
        text, result = simplify_source(source)
        for k, s in enumerate((source, text)):
            program = ndvm.compile(wrap(s))
            hashes[k].add(program.canonical_hash)
            params[k] += len(program.param_names)
            nodes[k] += _nodes(s)
        if result is not None:
            changed += 1
            rules.update(_rule(c) for c in result.changes)
    return (
        f"{name}: {len(sources)} programs, {changed} simplified; parameters {params[0]} -> {params[1]}; "
        f"nodes {nodes[0]} -> {nodes[1]}; distinct programs {len(hashes[0])} -> {len(hashes[1])}; "
        f"rules applied: {dict(rules.most_common())}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline_bench.simplification", description=__doc__)
    ap.add_argument("--data-dir", help="the shared data folder (default: ../shared/data, $NDVM_SHARED_DATA)")
    args = ap.parse_args(argv)
    data = find_data_dir(BenchConfig(data_dir=args.data_dir))
    for corpus in CORPORA:
        path = None if data is None else Path(data) / "ndvm_corpora" / f"{corpus}.jsonl"
        if path is None or not path.is_file():
            print(f"{corpus}: not found (ndvm_corpora/{corpus}.jsonl of the shared data)", file=sys.stderr)
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        print(measure(corpus, ["".join(f"(param {p} 0.5)\n" for p in r["params"]) + r["src"] for r in records]))

    from datasets import load
    from datasets.tasks import make_task
    from proposers import MutationProposer, ProposalContext, TaskSpec

    task = make_task(load("enso"))
    spec = TaskSpec(
        "enso", "", {}, task.contract_text(), seed_programs=task.seed_programs(), program_source=task.program_source
    )
    proposals = MutationProposer(seed=1, simplify=False).propose(ProposalContext(spec), 1000)
    print(measure("ENSO mutation, simplify=False", [p.source for p in proposals], wrap=task.program_source))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
