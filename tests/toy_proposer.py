"""A toy proposer, added to the pipeline the way docs/architecture.md says a proposer is added:
this module, and one ``register_proposer`` line (tests/test_flows_stages.py makes it).

It proposes AR(1) forecasts with one extra term each, from a fixed list, ``round_size`` at a time,
and keeps every context it was given, so a test can check what the pipeline fed it. It declares
itself offline (rounds of 4, several per task run) and that it wants the residuals of the best.
"""

from __future__ import annotations

from proposers import Origin, Proposal, ProposalContext, Proposer, ProposerTraits
from proposers.validate import validate_source

TERMS = ("(tanh s)", "(sin s)", "(cos s)", "(* s s)", "(* s s s)", "(abs s)", "(atan s)", "(sigmoid s)")


def toy_program(term: str) -> str:
    return (
        "(param phi 0.8 (between -1 1))\n(param c 0.01)\n(define (init) 0.0)\n"
        f"(define (predict s) (+ (* phi s) (* c {term})))\n(define (update s y) y)"
    )


class ToyProposer(Proposer):
    name = "toy"
    traits = ProposerTraits(offline=True, round_size=4, wants_residuals=True)

    def __init__(self) -> None:
        super().__init__()
        self.next = 0
        self.requests: list[tuple[int, ProposalContext]] = []  # (n, context) of every request

    @property
    def exhausted(self) -> bool:
        return self.next >= len(TERMS)

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        self.requests.append((n, context))
        out = []
        for term in TERMS[self.next : self.next + n]:
            source = toy_program(term)
            checked = validate_source(
                source, set(context.task.inputs), proposer=self.name, program_source=context.task.program_source
            )
            assert checked.ok, checked.failure
            out.append(Proposal(source, Origin(self.name), checked.canonical_hash, checked.param_names))
        self.next += n
        return out
