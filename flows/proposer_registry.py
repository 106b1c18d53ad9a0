"""The proposers a discovery run can use, by name: ``--proposer NAME`` builds one here.

Adding a proposer is one module and one line: a ``Proposer`` subclass (proposers/base.py) that
declares its ``traits`` (offline, wants residuals, names duplicates: what the pipeline needs to
know of it), and a ``register_proposer(NAME, factory)`` line below (or in your own code before the
run starts), where ``factory(config, seed_offset)`` builds it from the run's ``DiscoverConfig``.
Nothing in the pipeline branches on a proposer's name (tests/test_flows_stages.py adds a toy one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.errors import DiscoveryError

# factory(config: DiscoverConfig, seed_offset: int) -> Proposer. seed_offset: a resumed run starts
# a seeded generator elsewhere (the same seed would re-propose known programs).
ProposerFactory = Callable[[Any, int], Any]

_FACTORIES: dict[str, ProposerFactory] = {}


class UnknownProposerError(ValueError):
    """A proposer name that nothing registered."""


def register_proposer(name: str, factory: ProposerFactory) -> None:
    """Make ``--proposer name`` (and ``discover(proposer=name)``) build ``factory(config, seed_offset)``."""
    if not name or name == "auto":
        raise ValueError(f"a proposer needs a name other than 'auto' (it picks one), got {name!r}")
    _FACTORIES[name] = factory


def proposer_names() -> tuple[str, ...]:
    """The registered proposers, in registration order."""
    return tuple(_FACTORIES)


def make_proposer(config: Any, seed_offset: int = 0) -> Any:
    """The proposer of a run, built by its registered factory."""
    try:
        factory = _FACTORIES[config.proposer]
    except KeyError:
        raise UnknownProposerError(
            f"unknown proposer {config.proposer!r}; registered: {', '.join(_FACTORIES)}"
        ) from None
    return factory(config, seed_offset)


# ---------------------------------------------------------------------------- the built-in proposers
def _mutation(config: Any, seed_offset: int) -> Any:
    from proposers import MutationProposer

    return MutationProposer(seed=config.seed + seed_offset)


def _llm(config: Any, seed_offset: int) -> Any:
    from proposers import LLMProposer

    return LLMProposer(
        config.model,
        temperature=config.temperature,
        concurrency=config.concurrency,
        timeout=config.llm_timeout,
        api_base=config.api_base,
        api_key_env=config.llm_env,
        per_request=config.per_request,
        seed=config.seed + seed_offset,
        price_per_token=None if config.price_per_token is None else tuple(config.price_per_token),
    )


def _replay(config: Any, seed_offset: int) -> Any:
    from proposers import ReplayProposer

    if not config.replay:
        raise DiscoveryError("the replay proposer needs --replay FILE.jsonl")
    return ReplayProposer(config.replay)


register_proposer("mutation", _mutation)
register_proposer("llm", _llm)
register_proposer("replay", _replay)


__all__ = ["ProposerFactory", "UnknownProposerError", "make_proposer", "proposer_names", "register_proposer"]
