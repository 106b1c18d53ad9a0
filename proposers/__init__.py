"""Where candidate programs come from: an LLM through litellm, offline mutation, or replay of a file.

    from proposers import MutationProposer, ReplayProposer, LLMProposer, ProposalContext, TaskSpec

Every proposer has ``propose(context, n) -> list[Proposal]`` and ``async apropose(context, n)``.
``LLMProposer`` is imported lazily: litellm takes seconds to import and the offline proposers
do not need it.
"""

from .base import (
    Budget,
    Column,
    Duplicate,
    Failure,
    LLMFatalError,
    Origin,
    Proposal,
    ProposalContext,
    Proposer,
    ProposerTraits,
    ReferenceProgram,
    ScoredProgram,
    TaskSpec,
    load_prompt,
    proposal_record,
    write_jsonl,
)
from .mutation import MutationProposer, MutationStats
from .replay import ReplayProposer, with_declarations
from .validate import Validation, canonical_hash, runtime_available, validate_source, validate_static

_LAZY = {"LLMProposer", "Usage", "build_messages", "extract_programs"}


def __getattr__(name: str):
    if name in _LAZY:
        from . import llm

        return getattr(llm, name)
    raise AttributeError(f"module 'proposers' has no attribute {name!r}")


__all__ = [
    "Budget",
    "Column",
    "Duplicate",
    "Failure",
    "LLMFatalError",
    "Origin",
    "Proposal",
    "ProposalContext",
    "Proposer",
    "ProposerTraits",
    "ReferenceProgram",
    "ScoredProgram",
    "TaskSpec",
    "load_prompt",
    "proposal_record",
    "write_jsonl",
    "MutationProposer",
    "MutationStats",
    "ReplayProposer",
    "with_declarations",
    "Validation",
    "canonical_hash",
    "runtime_available",
    "validate_source",
    "validate_static",
    *sorted(_LAZY),
]
