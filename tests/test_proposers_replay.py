"""ReplayProposer over the real corpora of the shared data (ndvm_corpora) and small files."""

from __future__ import annotations

import json

import pytest
from conftest import shared_file

from proposers import ProposalContext, ReplayProposer, TaskSpec, runtime_available, validate_static, with_declarations
from proposers.sexpr import read_all

needs_runtime = pytest.mark.skipif(not runtime_available(), reason="ndvm runtime not built")


def context() -> ProposalContext:
    return ProposalContext(TaskSpec("cosearch", "y(x)", {"x": "vector [n]"}, "one value per point of x"))


def test_with_declarations():
    assert with_declarations("(* a x)", ["a"]) == "(param a 0.1)\n(* a x)"
    assert with_declarations("(* a (+ b x))", {"a": 2, "b": -0.5}) == "(param a 2.0)\n(param b -0.5)\n(* a (+ b x))"
    # already declared: left alone
    assert with_declarations("(param a 1.0)\n(* a x)", ["a"]) == "(param a 1.0)\n(* a x)"
    assert with_declarations("(* 2 x)", None) == "(* 2 x)"


@pytest.mark.parametrize(
    "validator",
    [
        pytest.param(None, id="ndvm", marks=needs_runtime),
        pytest.param(validate_static, id="static"),
    ],
)
def test_replays_the_whole_corpus_in_order(validator):
    path = shared_file("ndvm_corpora/cosearch_candidates_valid.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    replay = ReplayProposer(path, validator=validator)
    got = []
    while not replay.exhausted:
        got += replay.propose(context(), 100)
    assert replay.drain_failures() == []
    assert len(got) == len(records) == 247
    for proposal, record in zip(got, records):
        assert proposal.source.endswith(record["src"])
        assert proposal.param_names == record["params"]
        assert proposal.meta == {"skeleton": record["skeleton"]}
        assert proposal.origin.proposer == "replay" and proposal.origin.operator.startswith("replay:cosearch")
        if validator is None:
            assert proposal.canonical_hash
    assert replay.propose(context(), 10) == []  # exhausted


def test_bad_lines_are_recorded_and_skipped(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"src": "(* a x)", "params": ["a"]}),
                "{not json",
                json.dumps({"program": "(* a x)"}),
                json.dumps({"src": "(* a (exp (* b x)))", "params": ["a"]}),  # b undeclared
                "",
                json.dumps({"src": "(param k 1.0 positive) (exp (- (* k x)))", "score": 0.5}),
                json.dumps({"src": "(* a x", "params": ["a"]}),  # unbalanced
            ]
        )
    )
    replay = ReplayProposer(path, validator=validate_static)
    props = replay.propose(context(), 10)
    assert [p.source for p in props] == ["(param a 0.1)\n(* a x)", "(param k 1.0 positive) (exp (- (* k x)))"]
    assert props[1].meta == {"score": 0.5}
    kinds = [f.kind for f in replay.drain_failures()]
    assert kinds == ["replay", "replay", "static", "parse"]


def test_cycle_and_batches(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(json.dumps({"src": f"(* a (expt x {k}))", "params": ["a"]}) for k in (1, 2)))
    replay = ReplayProposer(path, validator=validate_static, cycle=True)
    sources = [p.source for p in replay.propose(context(), 5)]
    assert [s.splitlines()[-1] for s in sources] == ["(* a (expt x 1))", "(* a (expt x 2))"] * 2 + ["(* a (expt x 1))"]
    assert not replay.exhausted


def test_iterated_corpus_without_validation_keeps_everything():
    path = shared_file("ndvm_corpora/cosearch_rec_candidates_valid.jsonl")
    props = ReplayProposer(path, validate=False).propose(None, 1000)
    assert len(props) == 80
    assert all(read_all(p.source)[0][0] == "param" for p in props)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="replay file not found"):
        ReplayProposer(tmp_path / "nope.jsonl", validate=False)


def test_cycling_over_a_file_without_valid_lines_ends(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{oops\n" + json.dumps({"src": "(* a y)"}) + "\n")
    replay = ReplayProposer(path, validator=validate_static, cycle=True)
    assert replay.propose(context(), 5) == []
    assert [f.kind for f in replay.drain_failures()] == ["replay", "static"]


def test_written_proposals_replay_identically(tmp_path):
    from proposers import MutationProposer, write_jsonl

    seeds = ["(param a 1.0)\n(param k 0.5 positive)\n(* a (exp (- (* k x))))"]
    props = MutationProposer(seed=0, seed_programs=seeds, validate=False).propose(context(), 20)
    path = tmp_path / "run.jsonl"
    assert write_jsonl(props, path) == 20
    replayed = ReplayProposer(path, validator=validate_static).propose(context(), 100)
    assert [p.source for p in replayed] == [p.source for p in props]
    assert replayed[0].meta["proposer"] == "mutation" and replayed[0].meta["operator"] == props[0].origin.operator


def test_command_line_mutation_and_replay(tmp_path, capsys):
    from proposers.__main__ import main

    seeds = tmp_path / "seeds.scm"
    seeds.write_text(
        "(param a 1.0)\n(param k 0.5 positive)\n(* a (exp (- (* k x))))\n\n"
        "(param a 1.0)\n(param w 2.0)\n(* a (sin (* w x)))\n"
    )
    out = tmp_path / "cands.jsonl"
    assert main(["mutation", "--seeds", str(seeds), "-n", "25", "--out", str(out), "--no-validate"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 25 and all(r["proposer"] == "mutation" and r["operator"] for r in records)
    assert "25 proposals" in capsys.readouterr().err
    # and back through replay
    assert main(["replay", str(out), "-n", "100", "--no-validate"]) == 0
    replayed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["src"] for r in replayed] == [r["src"] for r in records]


@needs_runtime
def test_command_line_replay_of_the_corpus_with_validation(capsys):
    from proposers.__main__ import main

    assert main(["replay", str(shared_file("ndvm_corpora/cosearch_rec_candidates_valid.jsonl")), "-n", "5"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 5 and all(r["canonical_hash"] for r in records)
