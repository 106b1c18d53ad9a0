"""The replay proposer: candidates read back from a JSONL file (a corpus, or an earlier run).

Each line is a JSON object with ``src`` (the program) and optionally ``params`` (a list of
parameter names, or a mapping name -> initial value). In the corpus format of
``ndvm_corpora/*.jsonl`` the parameters are *not* declared in ``src``: for every listed parameter
that the source does not declare, a ``(param NAME INIT)`` declaration is prepended (INIT is the
mapped value, or ``default_init`` for a plain list). Other fields are kept in ``Proposal.meta``.

Replay goes through the file in order; each ``propose(context, n)`` returns the next ``n`` valid
candidates (invalid lines are recorded as failures and skipped). ``cycle=True`` starts again at the
end of the file; otherwise the proposer is exhausted there and returns fewer (or none).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .base import Failure, Origin, Proposal, ProposalContext, Proposer, ProposerTraits
from .sexpr import SexprError, format_number, read_all
from .validate import Validation, require_compile, validate_source


def _declared_params(source: str) -> set[str]:
    try:
        forms = read_all(source)
    except SexprError:
        return set()
    return {str(f[1]) for f in forms if isinstance(f, list) and len(f) >= 2 and f[0] == "param"}


def with_declarations(src: str, params: list[str] | dict[str, float] | None, default_init: float = 0.1) -> str:
    """``src`` with ``(param NAME INIT)`` prepended for each listed parameter it does not declare."""
    if not params:
        return src
    inits = params if isinstance(params, dict) else {name: default_init for name in params}
    declared = _declared_params(src)
    decls = [f"(param {name} {format_number(float(init))})" for name, init in inits.items() if name not in declared]
    return "\n".join(decls + [src]) if decls else src


class ReplayProposer(Proposer):
    """Replays candidates from a JSONL file (see the module docstring).

    Args:
        path: the JSONL file.
        default_init: initial value for parameters listed by name only.
        validate: check each candidate (recommended); invalid lines become failures.
        cycle: start again at the top when the file is exhausted.
        validator: ``(source, inputs, *, proposer, program_source) -> Validation``; default
            ``validate_source`` (ndvm.compile plus the static checks).
    """

    name = "replay"
    traits = ProposerTraits(offline=True, round_size=16)

    def __init__(
        self,
        path: str | Path,
        *,
        default_init: float = 0.1,
        validate: bool = True,
        cycle: bool = False,
        validator: Callable[..., Validation] | None = None,
    ):
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"replay file not found: {self.path}")
        self.default_init = default_init
        self.validate = validate
        self.cycle = cycle
        self.position = 0  # index of the next line to read
        self._lines = self.path.read_text().splitlines()
        self.validator = validator or validate_source
        if validate and validator is None:
            require_compile()  # fail now, not at the first proposal

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def exhausted(self) -> bool:
        return not self.cycle and self.position >= len(self._lines)

    def _candidate(self, index: int) -> tuple[str, dict] | None:
        text = self._lines[index].strip()
        if not text:
            return None
        where = f"{self.path.name}:{index + 1}"
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            self.record_failure(Failure("replay", f"{where}: not JSON ({exc.msg})", text[:200], self.name))
            return None
        if not isinstance(record, dict) or not isinstance(record.get("src"), str):
            self.record_failure(Failure("replay", f"{where}: no string field 'src'", text[:200], self.name))
            return None
        params = record.get("params")
        if params is not None and not isinstance(params, (list, dict)):
            self.record_failure(
                Failure("replay", f"{where}: 'params' must be a list or an object", text[:200], self.name)
            )
            return None
        return with_declarations(record["src"], params, self.default_init), record

    def propose(self, context: ProposalContext | None, n: int) -> list[Proposal]:
        inputs = set(context.task.inputs) if context is not None else None
        wrapper = context.task.program_source if context is not None else None
        out: list[Proposal] = []
        fruitless = 0  # lines read since the last valid one: a whole file of them ends a cycling replay
        while len(out) < n and self._lines and fruitless < len(self._lines):
            if self.position >= len(self._lines):
                if not self.cycle:
                    break
                self.position = 0
            index = self.position
            self.position += 1
            fruitless += 1
            got = self._candidate(index)
            if got is None:
                continue
            source, record = got
            origin = Origin(self.name, None, (), f"replay:{self.path.name}:{index + 1}")
            meta = {k: v for k, v in record.items() if k not in ("src", "params")}
            if not self.validate:
                out.append(Proposal(source, origin, meta=meta))
                fruitless = 0
                continue
            result = self.validator(source, inputs, proposer=self.name, program_source=wrapper)
            if not result.ok:
                self.record_failure(result.failure)
                continue
            out.append(
                Proposal(
                    source, origin, canonical_hash=result.canonical_hash, param_names=result.param_names, meta=meta
                )
            )
            fruitless = 0
        return out


__all__ = ["ReplayProposer", "with_declarations"]
