"""Command line: propose candidates and write them as JSON lines (replayable with ReplayProposer).

    python -m proposers mutation --inputs x --seeds seeds.jsonl -n 100 --out cands.jsonl
    python -m proposers replay ../shared/data/ndvm_corpora/cosearch_candidates_valid.jsonl --inputs x -n 10
    OPENAI_API_KEY=... python -m proposers llm --model gpt-4o-mini --inputs x \
        --description "y(x) of a damped sensor" --contract "one prediction per point of x" -n 8

Seeds (``--seeds``) are a JSONL file in the replay format (``src`` and optional ``params``) or a
``.scm`` file of programs separated by blank lines. Failures go to stderr, one JSON object a line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from .base import ProposalContext, TaskSpec, proposal_record
from .replay import with_declarations


def read_seeds(path: str) -> list[str]:
    text = Path(path).read_text()
    if path.endswith(".jsonl"):
        out = []
        for line in text.splitlines():
            if line.strip():
                record = json.loads(line)
                out.append(with_declarations(record["src"], record.get("params")))
        return out
    return [block.strip() for block in text.split("\n\n") if block.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m proposers", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="proposer", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("-n", type=int, default=10, help="proposals to ask for")
        p.add_argument("--inputs", nargs="*", default=["x"], help="the task's input names (default: x)")
        p.add_argument("--dataset", default="task", help="dataset name shown to the proposer")
        p.add_argument("--description", default="", help="what to model, in words")
        p.add_argument(
            "--contract",
            default="the program's value is one prediction per data point",
            help="what the program must compute",
        )
        p.add_argument("--seeds", help="seed programs: .jsonl (src, params) or .scm (blank-line separated)")
        p.add_argument("--out", help="JSONL output (default: stdout)")
        p.add_argument("--no-validate", action="store_true", help="skip ndvm.compile (static checks only)")

    m = sub.add_parser("mutation", help="offline mutation and crossover")
    common(m)
    m.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("replay", help="replay a JSONL file")
    r.add_argument("path")
    common(r)
    r.add_argument("--cycle", action="store_true")
    g = sub.add_parser("llm", help="a litellm model")
    common(g)
    g.add_argument("--model", required=True, help="litellm model, e.g. gpt-4o-mini, ollama_chat/llama3.1")
    g.add_argument("--api-base", help="server URL for local/self-hosted models")
    g.add_argument("--api-key-env", help="name of the environment variable holding the key")
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--concurrency", type=int, default=8)
    g.add_argument("--timeout", type=float, default=60.0)
    g.add_argument("--max-retries", type=int, default=3)
    g.add_argument("--max-repairs", type=int, default=2)
    g.add_argument("--per-request", type=int, default=4)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    seeds = read_seeds(args.seeds) if args.seeds else []
    task = TaskSpec(
        args.dataset, args.description, {name: "input" for name in args.inputs}, args.contract, seed_programs=seeds
    )
    from .validate import validate_static

    validator = validate_static if args.no_validate else None
    if args.proposer == "mutation":
        from .mutation import MutationProposer

        proposer = MutationProposer(args.seed, validate=not args.no_validate)
    elif args.proposer == "replay":
        from .replay import ReplayProposer

        proposer = ReplayProposer(args.path, cycle=args.cycle, validator=validator)
    else:
        from .llm import LLMProposer

        proposer = LLMProposer(
            args.model,
            args.temperature,
            args.concurrency,
            args.timeout,
            args.max_retries,
            args.max_repairs,
            args.api_base,
            api_key_env=args.api_key_env,
            per_request=args.per_request,
            validator=validator,
        )
    proposals = proposer.propose(ProposalContext(task), args.n)
    out = open(args.out, "a") if args.out else sys.stdout
    try:
        for proposal in proposals:
            out.write(json.dumps(proposal_record(proposal)) + "\n")
    finally:
        if args.out:
            out.close()
    for failure in proposer.drain_failures():
        print(json.dumps(asdict(failure)), file=sys.stderr)
    usage = getattr(proposer, "usage", None)
    if usage is not None:
        print(json.dumps({"usage": asdict(usage)}), file=sys.stderr)
    print(f"{len(proposals)} proposals", file=sys.stderr)
    return 0 if proposals else 1


if __name__ == "__main__":
    sys.exit(main())
