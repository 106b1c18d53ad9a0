"""The LLM proposer: candidate programs from any litellm model, many requests in flight.

One call of ``apropose(context, n)`` sends ``ceil(n / per_request)`` requests concurrently (at most
``concurrency`` in flight), each asking for ``per_request`` programs. Every program found in a reply
(fenced ```scheme / ```lisp / bare ``` blocks, or a bare reply that is only code) is validated with
``ndvm.compile`` and the static checks; an invalid one is sent back with its error message, up to
``max_repairs`` times. Rate limits (429), server errors (5xx), connection errors and timeouts are
retried with exponential backoff up to ``max_retries`` times; every call has a timeout, so a
proposal round always ends. What did not become a proposal is recorded in ``failures`` (drain them
into the next context). Errors no retry can fix (authentication, permission, unknown model) raise
:class:`LLMFatalError` at once with the provider's message, redacted: a run with a wrong key stops
instead of sending requests all night.

Cost: litellm's price list, or ``price_per_token=(input, output)`` in USD per token for models it
does not price (local servers, new names). ``cost_limit_problem()`` says when neither is known, so
that a caller can warn that a cost limit cannot be enforced.

API keys come only from the environment: either the provider's own variable that litellm reads
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``...) or the variable named by ``api_key_env``. They are
never stored on the proposer, and error messages are redacted before being logged or recorded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from string import Template
from typing import Any

# litellm fetches a model price list from the internet at import unless told not to; on a network
# that drops packets that hangs. A value set by the user wins.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm  # noqa: E402

from .base import (  # noqa: E402
    Failure,
    LLMFatalError,
    Origin,
    Proposal,
    ProposalContext,
    Proposer,
    ProposerTraits,
    TaskSpec,
    load_prompt,
)
from .validate import Validation, validate_source  # noqa: E402

log = logging.getLogger("proposers.llm")

# Fenced blocks: ```scheme, ```lisp, ```racket, ```scm, or a bare ```; an unclosed last fence
# (a reply cut by max_tokens) is taken to the end of the text.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_SCHEME_TAGS = {"", "scheme", "lisp", "racket", "scm", "ss", "clojure", "elisp", "commonlisp", "ndvm"}


def extract_programs(text: str) -> list[str]:
    """The Scheme programs in a model reply, in order (empty when there is none)."""
    if not text:
        return []
    programs = []
    for match in _FENCE.finditer(text):
        tag, body = match.group(1).lower(), match.group(2).strip()
        if tag in _SCHEME_TAGS and body:
            programs.append(body)
    if programs or "```" in text:
        return programs
    bare = text.strip()
    if bare.startswith("(") or bare.startswith(";"):
        return [bare]
    return []


_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def redact(text: str, extra_secrets: tuple[str, ...] = ()) -> str:
    """``text`` with the values of secret-looking environment variables replaced by ``***``."""
    secrets = [v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= 6]
    secrets += [s for s in extra_secrets if s and len(s) >= 6]
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


@dataclass
class Usage:
    """Totals over every call a proposer made."""

    calls: int = 0
    failed_calls: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0  # prompt tokens the provider served from its prompt cache (part of tokens_in)
    cost_usd: float = 0.0
    cost_known: bool = True  # False as soon as one call's cost could not be computed
    seconds: float = 0.0


@dataclass
class _Reply:
    text: str
    tokens_in: int | None
    tokens_out: int | None
    cost_usd: float | None


@dataclass
class _Cost:
    """Accounting for one proposal: the share of the reply it came from plus its repairs."""

    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None

    def add(self, reply: _Reply, share: int = 1) -> None:
        def plus(a, b):
            if b is None:
                return a
            return (a or 0) + b / share

        self.tokens_in = plus(self.tokens_in, reply.tokens_in)
        self.tokens_out = plus(self.tokens_out, reply.tokens_out)
        self.cost_usd = plus(self.cost_usd, reply.cost_usd)


def _no_code(text: str, proposer: str, model: str) -> Failure:
    start = " ".join(text.split())[:160]
    return Failure(
        "extract", f"no program in a fenced ```scheme block in the reply (it began: {start!r})", None, proposer, model
    )


@dataclass
class _Round:
    """State shared by the requests of one ``apropose`` call."""

    semaphore: asyncio.Semaphore
    cost_limit: float | None  # USD this round may spend (the context's budget), None: unlimited
    cost_start: float  # proposer.usage.cost_usd when the round started
    temperature: float | None = None  # sent when the user fixed none (raised as duplicates rise)

    def over_budget(self, usage: Usage) -> bool:
        return self.cost_limit is not None and usage.cost_usd - self.cost_start >= self.cost_limit


def _render_rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(str(r.get(c, "")) for c in cols) for r in rows]
    return "A few rows:\n" + "\n".join(lines) + "\n"


def cached_tokens(usage: Any) -> int:
    """Prompt tokens served from the provider's prompt cache, from a litellm usage object: OpenAI's
    ``prompt_tokens_details.cached_tokens`` (litellm maps Anthropic's ``cache_read_input_tokens``
    onto it too); 0 when the provider reports none."""
    details = getattr(usage, "prompt_tokens_details", None) if usage is not None else None
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if cached is None and usage is not None:
        cached = getattr(usage, "cache_read_input_tokens", None)
    return int(cached or 0)


def load_hints(name: str = "hints.md") -> list[str]:
    """The per-request suggestions of ``prompts/<name>``, one per line (``hints_diverge.md``: the
    ones used once most recent proposals were duplicates)."""
    return [line.strip() for line in load_prompt(name).splitlines() if line.strip()]


def accepts_temperature(model: str) -> bool:
    """Whether litellm says the model takes a temperature (reasoning models such as o1 do not)."""
    try:
        return "temperature" in (litellm.get_supported_openai_params(model=model) or [])
    except Exception:  # a provider litellm does not know: keep its default rather than risk a 400
        return False


def needs_cache_markers(model: str) -> bool:
    """Whether the provider caches a prompt prefix only where the request marks it (litellm's
    ``cache_control`` blocks): Anthropic's API and Claude on Bedrock or Vertex. OpenAI, DeepSeek and
    most OpenAI-compatible servers cache a repeated prefix on their own and get plain strings."""
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # a name litellm cannot place: plain strings are always accepted
        provider = ""
    return provider == "anthropic" or (provider in ("bedrock", "vertex_ai", "vertex_ai_beta") and "claude" in model)


def prompt_parts(
    context: ProposalContext,
    n: int,
    *,
    max_best: int = 5,
    max_failures: int = 8,
    hint: str | None = None,
    system_template: str | None = None,
    task_template: str | None = None,
    user_template: str | None = None,
) -> tuple[str, str, str]:
    """(system, task, request): the prompt in the order it is sent.

    ``system`` (system text + language reference) and ``task`` (description, columns, sample rows,
    data card, inputs, contract) depend only on the run, so they are byte-identical in every
    request of a run: the prefix a provider caches. ``request`` holds what changes: the best
    programs, the residuals of the best, recent failures and duplicates, the budget, ``n`` and
    the hint.
    """
    task = context.task
    system = Template(system_template or load_prompt("system.md")).substitute(language=context.reference().strip())
    columns = ""
    if task.columns:
        columns = (
            "Columns:\n"
            + "\n".join(
                f"- {c.name}" + (f" [{c.unit}]" if c.unit else "") + (f": {c.description}" if c.description else "")
                for c in task.columns
            )
            + "\n"
        )
    fixed = Template(task_template or load_prompt("task.md")).substitute(
        dataset=task.dataset,
        description=task.description.strip(),
        columns=columns,
        rows=_render_rows(task.sample_rows),
        datacard=task.data_card.strip() + "\n" if task.data_card.strip() else "",
        inputs="\n".join(f"- {name}: {desc}" for name, desc in task.inputs.items())
        or "(none: the program receives no data directly; see the contract)",
        contract=task.contract.strip(),
        score_label=task.score_label,
    )
    request_template = user_template or load_prompt("propose.md")
    # (a custom request template without $references shows no reference block)
    references = reference_text(context) if "$references" in request_template else ""
    best = ""
    if context.best:
        parts = ["Best programs so far (best first):"]
        shown = {r.canonical_hash: r.name for r in context.references if r.canonical_hash and references}
        for k, prog in enumerate(context.best[:max_best], start=1):
            if prog.canonical_hash in shown:  # its program and fitted values are in the references above
                parts.append(f"{k}. score {prog.score:.6g}: the reference {shown[prog.canonical_hash]} above")
                continue
            fitted = ""
            if prog.params:
                fitted = "\nfitted: " + ", ".join(f"{name}={value:.4g}" for name, value in prog.params.items())
            parts.append(f"{k}. score {prog.score:.6g}\n```scheme\n{prog.source.strip()}\n```{fitted}")
        best = "\n".join(parts) + "\n\n"
    residuals = ""
    if context.residuals.strip():
        residuals = (
            "Where the best program fails on the validation data (propose a mechanism for it):\n"
            + context.residuals.strip()
            + "\n\n"
        )
    failures = ""
    if context.failures:
        recent = context.failures[-max_failures:]
        failures = "Recent failures (avoid these mistakes):\n" + "\n".join(f"- {f.brief()}" for f in recent) + "\n\n"
    if context.duplicates:  # each one cost a request and taught nothing: say so, with the stored twin
        failures += (
            "Your previous proposals that were duplicates of programs already stored (nothing new; do not "
            "propose these again or a renaming of them):\n"
            + "\n".join(f"- {d.brief()}" for d in context.duplicates[-max_failures:])
            + "\n\n"
        )
    request = Template(request_template).substitute(
        references=references,
        best=best,
        residuals=residuals,
        failures=failures,
        budget=context.budget.describe(),
        n=n,
    )
    if hint:
        request += f"\nSuggestion for this request (ignore it if it does not fit the contract): {hint}\n"
    return system, fixed, request


def reference_text(context: ProposalContext) -> str:
    """The task's reference models as programs, with their validation scores: the programs to beat
    and to build on ("" when the task has none). A reference that is not calibrated yet is shown
    without a score, a failed one says so."""
    if not context.references:
        return ""
    parts = [
        "The task's reference models, written as programs (the textbook models of this data; the "
        "search started from them). Beat their validation scores; a good way is to build on one: "
        "keep its structure and add a mechanism, a lag, a term or an input it lacks:"
    ]
    for ref in context.references:
        if ref.score is not None:
            result = f"validation score {ref.score:.6g}"
        elif ref.status is not None:
            result = f"calibration {ref.status}: no score"
        else:
            result = "not calibrated yet"
        fitted = ""
        if ref.params:
            fitted = "\nfitted: " + ", ".join(f"{name}={value:.4g}" for name, value in ref.params.items())
        parts.append(f"- {ref.name}: {result}\n```scheme\n{ref.source.strip()}\n```{fitted}")
    return "\n".join(parts) + "\n\n"


def build_messages(
    context: ProposalContext,
    n: int,
    *,
    max_best: int = 5,
    max_failures: int = 8,
    hint: str | None = None,
    system_template: str | None = None,
    task_template: str | None = None,
    user_template: str | None = None,
    cache_markers: bool = False,
) -> list[dict]:
    """The chat messages asking for ``n`` programs (templates from ``proposers/prompts/``): the
    system text, then one user message that starts with the run's fixed task text and ends with
    this request's part (see :func:`prompt_parts`).

    ``hint``: a suggestion for this request only; concurrent requests get different hints so that
    identical prompts do not return the same few programs. ``cache_markers``: the user message as
    two content blocks, the fixed one with ``cache_control`` (providers that cache only marked
    prefixes; see :func:`needs_cache_markers`); otherwise plain strings, the fixed text first.
    """
    system, fixed, request = prompt_parts(
        context,
        n,
        max_best=max_best,
        max_failures=max_failures,
        hint=hint,
        system_template=system_template,
        task_template=task_template,
        user_template=user_template,
    )
    if cache_markers:
        user: Any = [
            {"type": "text", "text": fixed, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": request},
        ]
    else:
        user = fixed + "\n" + request
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def repair_message(failure: Failure) -> dict:
    where = f", line {failure.line}, column {failure.column}" if failure.line else ""
    text = Template(load_prompt("repair.md")).substitute(
        source=(failure.source or "").strip(), kind=failure.kind, where=where, message=failure.message
    )
    return {"role": "user", "content": text}


def _fatal(exc: BaseException) -> str | None:
    """What is fatally wrong, or None for errors worth retrying or recording."""
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.AuthenticationError) or status == 401:
        return "authentication failed (check the API key)"
    if isinstance(exc, litellm.PermissionDeniedError) or status == 403:
        return "permission denied (the key may not use this model)"
    if isinstance(exc, litellm.NotFoundError) or status == 404:
        return "model or endpoint not found (check --model and --api-base)"
    return None


# litellm exception classes -> (failure kind, retry?)
def _classify(exc: BaseException) -> tuple[str, bool]:
    if isinstance(exc, (asyncio.TimeoutError, litellm.Timeout)):
        return "timeout", True
    if isinstance(exc, litellm.RateLimitError):
        return "rate_limit", True
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.APIConnectionError)):
        return "server", True
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 500:
        return "server", True
    return "api", False


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class LLMProposer(Proposer):
    """Candidate programs from a litellm model (see the module docstring).

    Args:
        model: a litellm model name: ``"gpt-4o-mini"``, ``"anthropic/claude-..."``,
            ``"ollama/llama3.1"``, or ``"openai/<name>"`` with ``api_base`` for any
            OpenAI-compatible server.
        temperature: sampling temperature; None (default) sends none, so the provider's default
            applies (some models accept no other value).
        concurrency: requests in flight at once.
        timeout: seconds per call (each retry gets its own timeout).
        price_per_token: (input, output) USD per token, for a model litellm cannot price; when
            given it is used instead of litellm's price list.
        max_retries: retries of one call after a 429, a 5xx, a connection error or a timeout.
        max_repairs: how many times an invalid program is sent back with its error.
        api_base: the server URL for local or self-hosted models.
        api_key_env: name of an environment variable holding the key (read at each call, never
            stored); None lets litellm read the provider's usual variable.
        per_request: programs asked for in one request.
        max_tokens: cap on the reply length (None: the provider's default).
        hints: give each concurrent request a different suggestion from ``prompts/hints.md``
            (in turn), for diversity; False sends the same prompt to every request.
        diverge_at: when at least this share of the recent proposals were duplicates
            (``context.duplicate_rate``), the proposer changes course: the hints come from
            ``prompts/hints_diverge.md`` and, where the user fixed no temperature and the model
            takes one, the temperature is ``1.0 + (max_temperature - 1.0) * rate``.
        backoff: first backoff delay in seconds (doubled at each retry, with jitter, capped at
            ``max_backoff``; a Retry-After header wins when shorter than the cap).
        completion_kwargs: extra keyword arguments for ``litellm.acompletion`` (``top_p``,
            ``mock_response`` in tests...); never put a key here.
        validator: ``(source, inputs, *, proposer, model, program_source) -> Validation``; default
            ``validate_source`` (ndvm.compile plus the static checks).
        cache_markers: mark the prompt's fixed prefix with litellm ``cache_control`` blocks; None
            (default): where the provider needs them (:func:`needs_cache_markers`: Anthropic).
    """

    name = "llm"
    # the prompt names the duplicates and shows where the best fails (proposers/prompts/)
    traits = ProposerTraits(wants_residuals=True, names_duplicates=True)

    def __init__(
        self,
        model: str,
        temperature: float | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_repairs: int = 2,
        api_base: str | None = None,
        *,
        api_key_env: str | None = None,
        per_request: int = 4,
        max_tokens: int | None = None,
        hints: bool = True,
        diverge_at: float = 0.5,
        max_temperature: float = 1.3,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        max_best: int = 5,
        max_failures: int = 8,
        completion_kwargs: dict[str, Any] | None = None,
        validator: Callable[..., Validation] | None = None,
        seed: int | None = None,
        price_per_token: tuple[float, float] | None = None,
        cache_markers: bool | None = None,
    ):
        super().__init__()
        if price_per_token is not None and (len(price_per_token) != 2 or min(price_per_token) < 0):
            raise ValueError(f"price_per_token must be (input, output) USD per token, both >= 0; got {price_per_token}")
        if concurrency < 1 or per_request < 1 or timeout <= 0 or max_retries < 0 or max_repairs < 0:
            raise ValueError("concurrency and per_request must be >= 1, timeout > 0, retries/repairs >= 0")
        if completion_kwargs and "api_key" in completion_kwargs:
            raise ValueError("pass API keys through the environment (api_key_env), not completion_kwargs")
        self.model = model
        self.temperature = temperature
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_repairs = max_repairs
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.per_request = per_request
        self.max_tokens = max_tokens
        self.hints = load_hints() if hints else []
        self.diverge_hints = load_hints("hints_diverge.md") if hints else []
        self._next_hint = 0
        if not 0.0 < diverge_at <= 1.0:
            raise ValueError(f"diverge_at must be in (0, 1], got {diverge_at}")
        self.diverge_at = diverge_at
        self.max_temperature = max_temperature
        self._accepts_temperature: bool | None = None  # asked of litellm once, when first needed
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_best = max_best
        self.max_failures = max_failures
        self.completion_kwargs = dict(completion_kwargs or {})
        self.cache_markers = needs_cache_markers(model) if cache_markers is None else bool(cache_markers)
        self.validator = validator or validate_source
        self.usage = Usage()
        self.price_per_token = (
            None if price_per_token is None else (float(price_per_token[0]), float(price_per_token[1]))
        )
        self._jitter = random.Random(seed)

    def __repr__(self) -> str:
        return (
            f"LLMProposer(model={self.model!r}, concurrency={self.concurrency}, timeout={self.timeout}, "
            f"api_base={self.api_base!r})"
        )

    # -- one call with retries -------------------------------------------------------------
    def _key(self) -> str | None:
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise RuntimeError(f"environment variable {self.api_key_env} (the API key) is not set")
        return value

    async def _call(self, messages: list[dict], round_: _Round) -> _Reply | None:
        """One completion with retries; None (and a recorded failure) when it could not be had."""
        kwargs: dict[str, Any] = dict(
            model=self.model, messages=messages, timeout=self.timeout, max_retries=0, num_retries=0
        )
        temperature = self.temperature if self.temperature is not None else round_.temperature
        if temperature is not None:
            kwargs["temperature"] = temperature
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.max_tokens:
            kwargs["max_tokens"] = self.max_tokens
        kwargs.update(self.completion_kwargs)
        key = self._key()
        if key is not None:
            kwargs["api_key"] = key
        last: tuple[str, str] = ("api", "no attempt")
        for attempt in range(self.max_retries + 1):
            started = time.monotonic()
            try:
                async with round_.semaphore:
                    # checked once a slot is free: calls that were waiting see what the others spent
                    if round_.over_budget(self.usage):
                        last = ("budget", f"cost budget of {round_.cost_limit} USD spent in this round")
                        break
                    started = time.monotonic()
                    self.usage.calls += 1
                    # litellm enforces `timeout`; wait_for is the backstop for providers that ignore it
                    response = await asyncio.wait_for(litellm.acompletion(**kwargs), self.timeout + 5.0)
                self.usage.seconds += time.monotonic() - started
                return self._reply(response)  # synchronous: the cost is counted before a waiter runs
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # classified below: every API error becomes a Failure or a retry
                self.usage.seconds += time.monotonic() - started
                self.usage.failed_calls += 1
                kind, retry = _classify(exc)
                message = redact(f"{type(exc).__name__}: {exc}", (key,) if key else ())
                fatal = _fatal(exc)
                if fatal is not None:
                    raise LLMFatalError(f"{self.model}: {fatal}; the provider said: {message[:500]}") from None
                last = (kind, message[:500])
                log.warning(
                    "model call failed (%s, attempt %d/%d): %s", kind, attempt + 1, self.max_retries + 1, last[1][:200]
                )
                if not retry or attempt == self.max_retries:
                    break
                self.usage.retries += 1
                delay = min(self.max_backoff, self.backoff * (2**attempt)) * (0.5 + self._jitter.random())
                hinted = _retry_after(exc)
                if hinted is not None:
                    delay = min(max(hinted, 0.0), self.max_backoff)
                await asyncio.sleep(delay)
        self.record_failure(Failure(last[0], last[1], None, self.name, self.model))
        return None

    def _diverge_temperature(self, duplicate_rate: float) -> float | None:
        """The temperature for a round whose recent proposals were mostly duplicates: None when the
        user fixed one (theirs is sent) or the model takes none (the provider's default stays)."""
        if self.temperature is not None:
            return None
        if self._accepts_temperature is None:
            self._accepts_temperature = accepts_temperature(self.model)
        if not self._accepts_temperature:
            return None
        # 1.0 is most providers' default: above it in proportion to the rate, the cap at rate 1
        top = self.max_temperature
        if self.model.startswith("anthropic/") or "claude" in self.model:
            top = min(top, 1.0)  # Anthropic's range ends at 1.0 (its default): nothing to raise
        return round(1.0 + (top - 1.0) * min(1.0, max(0.0, duplicate_rate)), 3)

    def _reply(self, response: Any) -> _Reply:
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None) if usage else None
        tokens_out = getattr(usage, "completion_tokens", None) if usage else None
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if self.price_per_token is not None:  # the user's price wins over litellm's list
            cost = (tokens_in or 0) * self.price_per_token[0] + (tokens_out or 0) * self.price_per_token[1]
        elif cost is None:
            try:
                cost = litellm.completion_cost(completion_response=response)
            except Exception:  # unknown model (local servers, new names): the cost is simply unknown
                cost = None
        self.usage.tokens_in += tokens_in or 0
        self.usage.tokens_out += tokens_out or 0
        self.usage.tokens_cached += cached_tokens(usage)
        if cost is None:
            self.usage.cost_known = False
        else:
            self.usage.cost_usd += float(cost)
        return _Reply(text, tokens_in, tokens_out, None if cost is None else float(cost))

    def cost_limit_problem(self) -> str | None:
        """Why a cost limit cannot be enforced for this model (None when it can)."""
        if self.price_per_token is not None:
            return None
        try:
            litellm.cost_per_token(model=self.model, prompt_tokens=1, completion_tokens=1)
            return None
        except Exception:  # litellm raises its own "not mapped" errors for unknown models
            return (
                f"litellm has no price for {self.model!r}, so the cost limit cannot be enforced; give the "
                "prices (--input-price / --output-price, USD per million tokens)"
            )

    # -- one request: ask, extract, validate, repair ------------------------------------------
    async def _request(self, messages: list[dict], k: int, task: TaskSpec, round_: _Round) -> list[Proposal]:
        reply = await self._call(messages, round_)
        if reply is None:
            return []
        programs = extract_programs(reply.text)
        rounds = 0
        while not programs and rounds < self.max_repairs:  # ask again once the model forgot the fences
            self.record_failure(_no_code(reply.text, self.name, self.model))
            rounds += 1
            retry = messages + [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": Template(load_prompt("no_code.md")).substitute(n=k)},
            ]
            reply = await self._call(retry, round_)
            if reply is None:
                return []
            programs = extract_programs(reply.text)
        if not programs:
            self.record_failure(_no_code(reply.text, self.name, self.model))
            return []
        programs = programs[:k]
        share = len(programs)
        tasks = [self._validate_and_repair(src, messages, reply, share, task, round_) for src in programs]
        return [p for p in await asyncio.gather(*tasks) if p is not None]

    async def _validate_and_repair(
        self, source: str, messages: list[dict], reply: _Reply, share: int, task: TaskSpec, round_: _Round
    ) -> Proposal | None:
        cost = _Cost()
        cost.add(reply, share)
        conversation = messages + [{"role": "assistant", "content": reply.text}]
        for repair in range(self.max_repairs + 1):
            # validation compiles the program: cheap (microseconds to milliseconds), done inline
            result = self.validator(
                source, set(task.inputs), proposer=self.name, model=self.model, program_source=task.program_source
            )
            if result.ok:
                return Proposal(
                    source=source,
                    origin=Origin(self.name, self.model, (), "repair" if repair else "llm"),
                    canonical_hash=result.canonical_hash,
                    param_names=result.param_names,
                    tokens_in=None if cost.tokens_in is None else round(cost.tokens_in),
                    tokens_out=None if cost.tokens_out is None else round(cost.tokens_out),
                    cost_usd=cost.cost_usd,
                    repairs=repair,
                )
            self.record_failure(result.failure)
            if repair == self.max_repairs:
                return None
            conversation = conversation + [repair_message(result.failure)]
            fixed = await self._call(conversation, round_)
            if fixed is None:
                return None
            cost.add(fixed)
            conversation = conversation + [{"role": "assistant", "content": fixed.text}]
            candidates = extract_programs(fixed.text)
            if not candidates:
                self.record_failure(_no_code(fixed.text, self.name, self.model))
                return None
            source = candidates[0]
        return None

    async def apropose(self, context: ProposalContext, n: int) -> list[Proposal]:
        if n <= 0:
            return []
        diverging = context.duplicate_rate >= self.diverge_at
        round_ = _Round(
            asyncio.Semaphore(self.concurrency),
            context.budget.cost_left_usd,
            self.usage.cost_usd,
            self._diverge_temperature(context.duplicate_rate) if diverging else None,
        )
        if round_.over_budget(self.usage):
            self.record_failure(
                Failure(
                    "budget", f"no cost budget left ({context.budget.cost_left_usd} USD)", None, self.name, self.model
                )
            )
            return []
        requests = math.ceil(n / self.per_request)
        sizes = [min(self.per_request, n - i * self.per_request) for i in range(requests)]
        tasks = []
        for k in sizes:
            hint = None
            hints = self.diverge_hints if diverging and self.diverge_hints else self.hints
            if hints:  # rotate across calls too, so every hint gets used over a run
                hint = hints[self._next_hint % len(hints)]
                self._next_hint += 1
            messages = build_messages(
                context,
                k,
                max_best=self.max_best,
                max_failures=self.max_failures,
                hint=hint,
                cache_markers=self.cache_markers,
            )
            tasks.append(asyncio.ensure_future(self._request(messages, k, context.task, round_)))
        try:
            batches = await asyncio.gather(*tasks)
        except LLMFatalError:  # the other requests would fail the same way: stop them now
            for pending in tasks:
                pending.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        out: list[Proposal] = []
        seen: set[str] = set()
        for batch in batches:
            for proposal in batch:
                key = proposal.canonical_hash or proposal.source
                if key in seen:
                    continue
                seen.add(key)
                out.append(proposal)
        log.info(
            "%s: %d proposals from %d requests (%d failures so far)", self.model, len(out), requests, len(self.failures)
        )
        return out[:n]


__all__ = [
    "LLMFatalError",
    "LLMProposer",
    "Usage",
    "accepts_temperature",
    "build_messages",
    "cached_tokens",
    "extract_programs",
    "needs_cache_markers",
    "prompt_parts",
    "reference_text",
    "repair_message",
    "redact",
]
