"""The proposer protocol: what a proposer is given (:class:`ProposalContext`) and what it returns
(:class:`Proposal`), plus the record of what went wrong (:class:`Failure`) that the caller feeds
back into the next context.

Every proposer implements ``propose(context, n)`` and ``apropose(context, n)``. A proposer that is
naturally synchronous (mutation, replay) implements ``propose`` and inherits an ``apropose`` that
runs it in a worker thread; the LLM proposer implements ``apropose`` and inherits a ``propose`` that
drives the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).with_name("prompts")


def load_prompt(name: str) -> str:
    """The text of ``proposers/prompts/<name>``."""
    path = PROMPTS_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {name!r} not found in {PROMPTS_DIR}")
    return path.read_text()


@dataclass(frozen=True)
class Column:
    """One column of the task's dataset."""

    name: str
    unit: str = ""
    description: str = ""


@dataclass
class TaskSpec:
    """What the candidate programs must model, in the words the proposers need.

    ``inputs`` are the names a program may use without declaring them (the data it is given);
    ``contract`` states what the program's value must be (e.g. "one prediction per point of x").
    ``program_source``, for tasks that wrap candidates (the forecast task appends its driver to a
    candidate made of definitions): candidate -> the text to compile; it raises ValueError when the
    candidate breaks the task's contract. None: the candidate is the program.
    """

    dataset: str
    description: str
    inputs: dict[str, str]  # input name -> shape, units, meaning
    contract: str
    columns: list[Column] = field(default_factory=list)
    sample_rows: list[dict[str, Any]] = field(default_factory=list)
    score_label: str = "score (higher is better)"
    seed_programs: list[str] = field(default_factory=list)
    program_source: Callable[[str], str] | None = None
    # A short description of the training and validation data (units, ranges, lags, season, spread
    # across groups): ``card_text(Task.card_facts())`` (proposers/datacard.py), computed once per run;
    # part of the prompt's cached prefix.
    data_card: str = ""
    # True when every input is a column of one table (a vector over the same rows), so any input
    # may enter any data sub-expression (the regression task); the mutation proposer then adds
    # feature terms over all of them (proposers/mutation.py, ``sr_term``)
    table_inputs: bool = False
    # True when candidates are state-space forecasters, ``(init)``, ``(predict s)``, ``(update s y)``
    # or ``(update s y x)`` (the forecast task): the mutation proposer may then grow their state
    # (``state_term``: a lag, the calendar, a covariate, a damping)
    state_space: bool = False
    # What ``(ref x i)`` holds in ``(update s y x)``, in order: (name, period) with the period for
    # the calendar position (1..period) and None for a covariate; empty: the task gives no x
    observed_x: list[tuple[str, int | None]] = field(default_factory=list)


@dataclass(frozen=True)
class ScoredProgram:
    """A program already evaluated, with its score (and its canonical hash when the caller has it)."""

    source: str
    score: float
    canonical_hash: str | None = None
    params: dict[str, float] | None = None  # fitted parameter values, shown to LLMs


@dataclass(frozen=True)
class ReferenceProgram:
    """One of the task's reference models written as a program (``Task.reference_programs``, origin
    ``reference`` in the store): a textbook model the search starts from and must beat."""

    name: str  # as the task names it, e.g. "ar-aic-program (AR(2))"
    source: str
    score: float | None = None  # its validation score in this run; None: not calibrated (yet)
    params: dict[str, float] | None = None  # its fitted values, when calibrated
    status: str | None = None  # its evaluation's status (ok, failed, ...); None: not calibrated yet
    canonical_hash: str | None = None


class LLMFatalError(RuntimeError):
    """An error that no retry can fix (authentication, permission, unknown model): stop the run.
    Raised by proposers.llm; defined here so the pipeline recognises it without importing litellm."""


@dataclass(frozen=True)
class Failure:
    """Something that did not become a proposal.

    ``kind`` is one of: ``parse``, ``check``, ``eval``, ``limit`` (the ndvm error classes),
    ``static`` (the proposers' own static check: an undeclared name, an unused parameter),
    ``contract`` (the task's wrapper refused the candidate, e.g. a missing required function),
    ``extract`` (no code found in a reply), ``rate_limit``, ``server``, ``timeout``, ``api``
    (other errors of the model API), ``budget`` (a call not made: the cost budget was spent),
    ``replay`` (a malformed replay line).
    """

    kind: str
    message: str
    source: str | None = None
    proposer: str = ""
    model: str | None = None
    line: int | None = None
    column: int | None = None

    def brief(self, max_source: int = 400) -> str:
        """One readable paragraph for a prompt."""
        where = f" at line {self.line}, column {self.column}" if self.line else ""
        text = f"[{self.kind}]{where} {self.message}"
        if self.source:
            src = self.source if len(self.source) <= max_source else self.source[:max_source] + " ..."
            text += f"\n  program: {src}"
        return text


@dataclass(frozen=True)
class Duplicate:
    """A proposal of the previous round that the store already had: the same canonical hash, or the
    same values on the probe inputs (``semantic``) as the stored program ``duplicate_of``."""

    source: str
    duplicate_of: str  # canonical hash of the stored program
    score: float | None = None  # its validation score, when it is calibrated
    semantic: bool = False
    times: int = 1  # how many times in the run it was proposed again

    def brief(self, max_source: int = 300) -> str:
        src = self.source.strip()
        src = src if len(src) <= max_source else src[:max_source] + " ..."
        how = "computes the same values as" if self.semantic else "is the same program as"
        score = f" (validation score {self.score:.4g})" if self.score is not None else " (not calibrated yet)"
        times = f", proposed again {self.times} times in this run" if self.times > 1 else ""
        return f"{how} stored {self.duplicate_of[:12]}{score}{times}:\n  program: {src}"


@dataclass
class Budget:
    """What is left of the run; any field may be unknown (None)."""

    proposals_left: int | None = None
    seconds_left: float | None = None
    cost_left_usd: float | None = None

    def describe(self) -> str:
        parts = []
        if self.proposals_left is not None:
            parts.append(f"{self.proposals_left} proposals")
        if self.seconds_left is not None:
            parts.append(f"{self.seconds_left:.0f} s")
        if self.cost_left_usd is not None:
            parts.append(f"${self.cost_left_usd:.2f}")
        return ", ".join(parts) if parts else "not limited"


@dataclass
class ProposalContext:
    """Everything a proposer may use to propose the next candidates."""

    task: TaskSpec
    best: list[ScoredProgram] = field(default_factory=list)  # best first
    failures: list[Failure] = field(default_factory=list)  # most recent last
    budget: Budget = field(default_factory=Budget)
    language_reference: str | None = None  # None: the packaged compact reference (prompts/language.md)
    # What came of the previous proposals (the discover flow fills these; see docs/proposers.md):
    duplicates: list[Duplicate] = field(default_factory=list)  # the previous round's duplicates
    duplicate_rate: float = 0.0  # share of the recent proposals that were duplicates, 0..1
    stale_rounds: int = 0  # rounds in a row that gave nothing new
    # Where the current best program fails on validation (``residual_text(Task.residual_facts(...))``), "" if unknown
    residuals: str = ""
    # The task's reference models as programs, with their validation scores once calibrated: the
    # programs to beat and to build on (the LLM prompt names them; the mutation proposer has them
    # as parents through ``TaskSpec.seed_programs``)
    references: list[ReferenceProgram] = field(default_factory=list)

    def reference(self) -> str:
        return self.language_reference if self.language_reference is not None else load_prompt("language.md")


@dataclass(frozen=True)
class Origin:
    """Where a proposal came from."""

    proposer: str  # "llm", "mutation", "replay"
    model: str | None = None  # the litellm model, for LLM proposals
    parent_hashes: tuple[str, ...] = ()  # canonical hashes of the programs it was derived from
    operator: str | None = None  # mutation operator, "repair", "replay:<file>:<line>"...


@dataclass
class Proposal:
    """One candidate program that passed validation (``ndvm.compile`` and the static checks)."""

    source: str
    origin: Origin
    canonical_hash: str | None = None
    param_names: list[str] = field(default_factory=list)
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    repairs: int = 0  # LLM repair rounds this candidate needed
    meta: dict[str, Any] = field(default_factory=dict)
    simplified_from: str | None = None  # the text as proposed, when the admit stage simplified it


def proposal_record(proposal: Proposal) -> dict[str, Any]:
    """A JSON-ready record of a proposal; a file of them replays with ``ReplayProposer``."""
    return {
        "src": proposal.source,
        "params": list(proposal.param_names),
        "canonical_hash": proposal.canonical_hash,
        "proposer": proposal.origin.proposer,
        "model": proposal.origin.model,
        "operator": proposal.origin.operator,
        "parent_hashes": list(proposal.origin.parent_hashes),
        "tokens_in": proposal.tokens_in,
        "tokens_out": proposal.tokens_out,
        "cost_usd": proposal.cost_usd,
        "repairs": proposal.repairs,
    }


def write_jsonl(proposals: list[Proposal], path: str | Path, append: bool = True) -> int:
    """Write proposals as JSON lines (see :func:`proposal_record`); returns how many were written."""
    import json

    with open(path, "a" if append else "w") as out:
        for proposal in proposals:
            out.write(json.dumps(proposal_record(proposal)) + "\n")
    return len(proposals)


@dataclass(frozen=True)
class ProposerTraits:
    """What the discovery pipeline needs to know of a proposer, declared by the proposer itself
    (the pipeline never branches on a proposer's name; flows/stages/propose.py reads these).

    - ``offline``: no network and no cost per request; a round takes a fraction of a second, so
      the pipeline makes one request at a time of ``round_size`` programs and lets one task run
      make several rounds (instead of ``--concurrency`` requests of ``--per-request`` programs).
    - ``round_size``: programs per round of an offline proposer.
    - ``wants_residuals``: its context carries where the run's best fails on validation
      (``ProposalContext.residuals``), which costs a store query and a task call per round.
    - ``names_duplicates``: its context names the duplicates it proposed (``ProposalContext.duplicates``),
      not only their rate.
    - ``simplifies``: its proposals are already what ``proposers.simplify`` makes of them, so the
      admit stage does not simplify them again (0.4 ms a proposal on the proposal thread).
    """

    offline: bool = False
    round_size: int = 16
    wants_residuals: bool = False
    names_duplicates: bool = False
    simplifies: bool = False


class Proposer:
    """Base class. Subclasses implement ``propose`` or ``apropose`` (or both), and declare their
    ``traits`` (``ProposerTraits``)."""

    name = "proposer"
    traits = ProposerTraits()

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self._failures_lock = threading.Lock()

    def record_failure(self, failure: Failure) -> None:
        with self._failures_lock:
            self.failures.append(failure)

    def drain_failures(self) -> list[Failure]:
        """The failures recorded since the last drain (for the caller's next context)."""
        with self._failures_lock:
            out, self.failures = self.failures, []
        return out

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        if type(self).apropose is Proposer.apropose:
            raise TypeError(f"{type(self).__name__} implements neither propose nor apropose")
        coro = self.apropose(context, n)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        # Called from inside a running event loop (a notebook, an async flow): run in a thread.
        result: list[list[Proposal]] = []
        errors: list[BaseException] = []

        def runner() -> None:
            try:
                result.append(asyncio.run(coro))
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)

        thread = threading.Thread(target=runner, name=f"{self.name}-propose")
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return result[0]

    async def apropose(self, context: ProposalContext, n: int) -> list[Proposal]:
        if type(self).propose is Proposer.propose:
            raise TypeError(f"{type(self).__name__} implements neither propose nor apropose")
        return await asyncio.to_thread(self.propose, context, n)


__all__ = [
    "Column",
    "TaskSpec",
    "ScoredProgram",
    "Failure",
    "LLMFatalError",
    "Duplicate",
    "Budget",
    "ProposalContext",
    "Origin",
    "Proposal",
    "Proposer",
    "ProposerTraits",
    "load_prompt",
    "PROMPTS_DIR",
    "proposal_record",
    "write_jsonl",
]
