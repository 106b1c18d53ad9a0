"""``ndvm bench --suite proposer``: what does a hundred LLM requests buy?

The LLM proposer runs against :class:`RecordedModelServer`, a real OpenAI-compatible HTTP server on
127.0.0.1 that answers from recorded LLM output: the 247 co-search candidates of
``../shared/data/ndvm_corpora/cosearch_candidates_valid.jsonl`` (programs a language model wrote
for y = exp(-0.3 x) cos(2 x) + noise). The server behaves like a model in these stated ways, and no
other (it ignores the temperature, the hints, the data card and the residuals):

- it answers the recorded programs in their recorded order, ``per_request`` per reply;
- it repeats itself: each program of a reply is, with probability ``repeat`` (0.5), one of its
  ``favourites`` (the first 6 programs it answered) instead of the next recorded one;
- it heeds the prompt: a favourite that the prompt names as a duplicate is not repeated in that
  reply (when every favourite is named it answers the next recorded program);
- it forgets the ``(param ...)`` declarations of a new program with probability ``forget`` (0.1),
  and answers a repair request with the declared program;
- once the recording is exhausted it only repeats its favourites;
- usage: prompt tokens = prompt characters / 4; cached tokens as OpenAI counts them (the longest
  prefix shared with an earlier request, in 128-token steps from 1,024 tokens up).

``RecordedModelServer(repeat_only=[a, b])`` answers only those two programs (the repeating server of
issue 19).

Three proposers on the same server, for the same request budget:

- ``current``: the proposer as the discover flow drives it: the duplicates named in the prompt (the
  last round's, then the most repeated ones of the run), divergence at a duplicate rate of 0.5, the
  stop after ``max_stale_rounds`` rounds with nothing new, the data card and the residuals of the
  best program;
- ``b46edcf``: the proposer of commit b46edcf (issue 19 part 1 only): the last round's duplicates
  named, divergence, the stale-round stop; no data card, no residuals;
- ``baseline``: the proposer before issue 19: the same prompts without duplicates, data card and
  residuals, no divergence, no stale-round stop.

The driver here plays the discover flow's part: one request per round (``per_request`` programs),
duplicates by canonical hash (the store's exact check; its semantic check is not run), each new
candidate fitted and scored on validation (the best five are the prompt's programs). Per 100
requests it reports new valid candidates, duplicates and invalid programs (failed validation after
the repairs), and tokens.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CORPUS = Path("ndvm_corpora") / "cosearch_candidates_valid.jsonl"
KEY_ENV = "NDVM_RECORDED_MODEL_KEY"
MODES = ("current", "b46edcf", "baseline")
VALIDITY_KINDS = {"parse", "check", "eval", "limit", "static", "contract", "extract"}  # invalid programs
_FENCE = "```"


def load_corpus(path: Path) -> list[tuple[str, str]]:
    """(declared source, bare source) of every recorded program, in file order."""
    from proposers.replay import with_declarations

    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            bare = record["src"].strip()
            params = list(record.get("params") or [])
        except (json.JSONDecodeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}:{number}: not a corpus record ({exc})") from None
        out.append((with_declarations(bare, {p: 0.5 for p in params}), bare))
    if not out:
        raise ValueError(f"{path}: no programs")
    return out


def _prompt_text(messages: list[dict]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # content blocks (cache_control markers)
            content = "".join(block.get("text", "") for block in content)
        parts.append(f"<{m.get('role')}>\n{content}")
    return "\n".join(parts)


def _cached_tokens(prompt: str, earlier: list[str]) -> int:
    """OpenAI's rule: the longest prefix shared with an earlier prompt, counted in 128-token steps
    from 1,024 tokens up (tokens = characters / 4 here)."""
    best = 0
    for old in earlier:
        n = min(len(old), len(prompt))
        i = 0
        while i < n and old[i] == prompt[i]:
            i += 1
        best = max(best, i)
    tokens = best // 4
    return 0 if tokens < 1024 else tokens - tokens % 128


class RecordedModelServer:
    """An OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 that answers from recorded
    programs like a model that repeats itself (see the module docstring). Use as a context manager."""

    def __init__(
        self,
        programs: list[tuple[str, str]],
        *,
        per_request: int = 4,
        repeat: float = 0.5,
        favourites: int = 6,
        forget: float = 0.1,
        seed: int = 0,
        repeat_only: list[str] | None = None,
    ):
        if not 0.0 <= repeat <= 1.0 or not 0.0 <= forget <= 1.0:
            raise ValueError(f"repeat and forget are probabilities in [0, 1]; got {repeat}, {forget}")
        self.programs, self.per_request = list(programs), per_request
        self.repeat, self.n_favourites, self.forget = repeat, favourites, forget
        self.repeat_only = list(repeat_only) if repeat_only else None
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.next_program = 0
        self.favourites: list[str] = []
        self.prompts: list[str] = []
        self.bodies: list[bytes] = []  # every request body as received (the prefix-caching tests read them)
        self.cached: list[int] = []  # the cached tokens reported per request
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # no access log on the console
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server.lock:
                    server.bodies.append(raw)
                payload = json.dumps(server.answer(json.loads(raw))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="recorded-model", daemon=True)
        self.thread.start()
        self.api_base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> RecordedModelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the model ---------------------------------------------------------------------------
    def _fresh(self) -> str:
        """The next recorded program (declared; sometimes without its declarations)."""
        declared, bare = self.programs[self.next_program]
        self.next_program += 1
        if len(self.favourites) < self.n_favourites:
            self.favourites.append(declared)
        return bare if bare != declared and self.rng.random() < self.forget else declared

    def _programs(self, prompt: str, k: int) -> list[str]:
        if self.repeat_only:
            return [self.repeat_only[(self.requests + i) % len(self.repeat_only)] for i in range(k)]
        named = ""
        if "duplicates of programs already stored" in prompt:  # the section naming the last duplicates
            named = prompt.split("duplicates of programs already stored", 1)[1].split("\n\n", 1)[0]
        out: list[str] = []
        for _ in range(k):
            heeded = [f for f in self.favourites if f.strip() not in named and f not in out]
            exhausted = self.next_program >= len(self.programs)
            if heeded and (exhausted or self.rng.random() < self.repeat):
                out.append(self.rng.choice(heeded))
            elif not exhausted:
                out.append(self._fresh())
            elif self.favourites:  # nothing new left and every favourite named: it repeats anyway
                out.append(self.rng.choice(self.favourites))
        return out

    def answer(self, body: dict) -> dict:
        messages = body.get("messages") or []
        prompt = _prompt_text(messages)
        last = _prompt_text(messages[-1:])
        with self.lock:
            cached = _cached_tokens(prompt, self.prompts[-16:])
            self.prompts.append(prompt)
            self.cached.append(cached)
            self.requests += 1
            if "This program is not valid" in last:  # a repair: the program with its declarations
                broken = last.split(_FENCE + "scheme\n", 1)[1].split(_FENCE, 1)[0].strip() if _FENCE in last else ""
                fixed = next((d for d, b in self.programs if b == broken), broken)
                programs = [fixed]
            else:
                programs = self._programs(prompt, self.per_request)
        text = "\n\n".join(f"Candidate {i + 1}:\n{_FENCE}scheme\n{p}\n{_FENCE}" for i, p in enumerate(programs))
        tokens_in, tokens_out = len(prompt) // 4, max(1, len(text) // 4)
        return {
            "id": f"chatcmpl-recorded-{self.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "recorded"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }


# ---------------------------------------------------------------------------- the driver
def cosearch_task(folder: Path, seed: int = 0) -> Any:
    """The corpus's task as a curve task: y = exp(-0.3 x) cos(2 x) + 0.02 N(0, 1) on 64 points of
    [0.1, 6] (a CSV written under ``folder``; the default temporal split of a user file)."""
    import numpy as np

    import datasets
    from datasets.tasks import make_task

    rng = np.random.default_rng(seed)
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2.0 * x) + 0.02 * rng.standard_normal(x.size)
    path = folder / "cosearch.csv"
    path.write_text("x,y\n" + "\n".join(f"{a:.6f},{b:.6f}" for a, b in zip(x, y)) + "\n")
    return make_task(datasets.load(str(path), x="x", y="y"))


@dataclass
class ModeResult:
    mode: str
    requests: int = 0
    rounds: int = 0
    proposals: int = 0
    new: int = 0
    duplicates: int = 0
    invalid: int = 0  # programs that failed validation (each was sent back for repair)
    repaired: int = 0  # proposals that became valid after a repair
    tokens_in: int = 0
    tokens_cached: int = 0
    tokens_out: int = 0
    ended: str = ""
    best_score: float | None = None
    seconds: float = 0.0
    new_sources: list[str] = field(default_factory=list)

    def per_100(self, value: int) -> float:
        return 100.0 * value / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "new_sources"}
        out.update(
            new_per_100=self.per_100(self.new),
            duplicates_per_100=self.per_100(self.duplicates),
            invalid_per_100=self.per_100(self.invalid),
            tokens_per_new=(self.tokens_in + self.tokens_out) / self.new if self.new else None,
            cached_share=self.tokens_cached / self.tokens_in if self.tokens_in else 0.0,
        )
        return out


def run_mode(
    mode: str,
    api_base: str,
    task: Any,
    *,
    max_requests: int,
    per_request: int = 4,
    max_stale_rounds: int = 5,
    fit_steps: int = 40,
    seed: int = 0,
) -> ModeResult:
    """The LLM proposer against the server at ``api_base`` until ``max_requests`` requests (repairs
    included) or, for ``current``, the stale-round stop."""
    from flows.feedback import ResidualNotes, RoundFeedback
    from flows.problem import task_spec
    from proposers import Duplicate, ProposalContext, ScoredProgram
    from proposers.llm import LLMProposer

    if mode not in MODES:
        raise ValueError(f"unknown proposer mode {mode!r}; use one of {', '.join(MODES)}")
    current = mode == "current"
    feedback_on = mode != "baseline"  # issue 19 part 1: named duplicates, divergence, stale stop
    spec = task_spec(task.dataset, task)
    if not current:
        spec.data_card = ""
    os.environ.setdefault(KEY_ENV, "recorded-local")  # litellm's OpenAI client wants some key; the server ignores it
    proposer = LLMProposer(
        "openai/recorded-model",
        api_base=api_base,
        api_key_env=KEY_ENV,
        concurrency=1,
        timeout=30.0,
        max_retries=0,
        per_request=per_request,
        seed=seed,
        cache_markers=False,
        diverge_at=0.5 if feedback_on else 1.0,
    )
    # b46edcf named the last round's duplicates only; current also keeps the most repeated ones named
    feedback = RoundFeedback(
        max_stale_rounds if feedback_on else 0, name_duplicates=False, max_named=8 if current else 0
    )
    residuals = ResidualNotes(task)
    stored: dict[str, tuple[str, float, dict]] = {}  # canonical hash -> (source, score, flat params)
    failures: list[Any] = []
    result = ModeResult(mode)
    duplicates: list[Any] = []  # the last round's
    started = time.perf_counter()
    while proposer.usage.calls < max_requests:
        ranked = sorted(stored.items(), key=lambda kv: kv[1][1])
        best = [ScoredProgram(src, score, canonical_hash=h, params=params) for h, (src, score, params) in ranked[:5]]
        context = ProposalContext(spec, best=best, failures=failures[-8:])
        if feedback_on:
            context.duplicates = list(feedback.last_duplicates) if current else list(duplicates)
            context.duplicate_rate = feedback.duplicate_rate
            context.stale_rounds = feedback.stale_rounds
        if current and ranked:
            h, (src, _, params) = ranked[0]
            context.residuals = residuals.text({"hash": h, "source": src, "parameters": json.dumps(params)})
        proposals = proposer.propose(context, per_request)
        drained = proposer.drain_failures()
        failures += drained
        result.invalid += sum(1 for f in drained if f.kind in VALIDITY_KINDS)
        result.rounds += 1
        result.proposals += len(proposals)
        result.repaired += sum(1 for p in proposals if p.repairs)
        new, duplicates = [], []
        for p in proposals:
            if p.canonical_hash in stored:
                twin = stored[p.canonical_hash]
                duplicates.append(Duplicate(p.source, p.canonical_hash, twin[1]))
                continue
            fit = task.fit(p.source, name=p.canonical_hash, steps=fit_steps, restarts=2, seed=seed)
            score = task.score(fit).get(task.primary_metric, math.inf) if fit.ok else math.inf
            stored[p.canonical_hash] = (
                p.source,
                float(score) if math.isfinite(score) else 1e9,
                task.flat_parameters(fit.params) if fit.ok else {},
            )
            new.append(p)
            result.new_sources.append(p.source)
        result.new += len(new)
        result.duplicates += len(duplicates)
        feedback.record(None, "bench", proposals, {p.source for p in new}, duplicates=duplicates)
        if feedback.stale():
            result.ended = (
                f"stopped after {feedback.stale_rounds} rounds in a row with nothing new "
                f"(request {proposer.usage.calls})"
            )
            break
    else:
        result.ended = f"request budget spent ({max_requests})"
    usage = proposer.usage
    result.requests, result.tokens_in, result.tokens_out = usage.calls, usage.tokens_in, usage.tokens_out
    result.tokens_cached = usage.tokens_cached
    finite = [s for _, s, _ in stored.values() if s < 1e9]
    result.best_score = min(finite) if finite else None
    result.seconds = time.perf_counter() - started
    return result


def compare(
    programs: list[tuple[str, str]],
    task: Any,
    *,
    max_requests: int,
    seed: int = 0,
    repeat: float = 0.5,
    max_stale_rounds: int = 5,
) -> dict[str, Any]:
    """Both modes on a fresh recorded server each (same recording, same seed), then both on the
    repeating server (two programs only)."""
    out: dict[str, Any] = {"recorded": {}, "repeating": {}}
    for mode in MODES:
        with RecordedModelServer(programs, repeat=repeat, seed=seed) as server:
            out["recorded"][mode] = run_mode(
                mode, server.api_base, task, max_requests=max_requests, seed=seed, max_stale_rounds=max_stale_rounds
            )
    pair = [programs[0][0], programs[1][0]]
    for mode in MODES:
        with RecordedModelServer(programs, repeat_only=pair, seed=seed) as server:
            out["repeating"][mode] = run_mode(
                mode, server.api_base, task, max_requests=max_requests, seed=seed, max_stale_rounds=max_stale_rounds
            )
    return out


def _quiet() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # an unpriced model prints litellm's provider list at every reply
    for name in ("LiteLLM", "httpx", "proposers.llm"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run_proposer_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``); ``--quick``: 60 requests instead of 300."""
    from ndvm_bench.common import SuiteResult, SuiteSkipped, find_data_dir

    _quiet()
    data = find_data_dir(config)
    corpus = data / CORPUS if data else None
    if corpus is None or not corpus.is_file():
        raise SuiteSkipped(
            f"{CORPUS} not found under the shared data folder ({data or 'not found'}); set NDVM_SHARED_DATA or --data-dir"
        )
    programs = load_corpus(corpus)
    max_requests = 60 if config.quick else 300
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-proposer-") as tmp:
        task = cosearch_task(Path(tmp), seed=config.seed)
        results = compare(programs, task, max_requests=max_requests, seed=config.seed)
    rows = []
    for server in ("recorded", "repeating"):
        for mode in MODES:
            r = results[server][mode]
            j = r.to_json()
            rows.append(
                [
                    f"{server} / {mode}",
                    r.requests,
                    r.tokens_in,
                    f"{100 * j['cached_share']:.0f}%",
                    r.tokens_out,
                    r.new,
                    f"{r.per_100(r.new):.1f}",
                    f"{r.per_100(r.duplicates):.1f}",
                    f"{r.per_100(r.invalid):.1f}",
                    "-" if j["tokens_per_new"] is None else f"{j['tokens_per_new']:.0f}",
                    r.ended,
                ]
            )
    cur, base = results["recorded"]["current"], results["recorded"]["baseline"]
    ratio = cur.per_100(cur.new) / base.per_100(base.new) if base.new else math.inf
    part1 = results["recorded"]["b46edcf"]
    ratio_part1 = cur.per_100(cur.new) / part1.per_100(part1.new) if part1.new else math.inf
    notes = [
        f"recorded server: {len(programs)} programs of {CORPUS}, repeat 0.5 (favourites 6), forget 0.1; "
        f"repeating server: two programs only; budget {max_requests} requests (repairs included), 4 programs per request",
        f"new valid candidates per 100 requests on the recorded server: current / baseline {ratio:.2f}x, "
        f"current / b46edcf {ratio_part1:.2f}x",
        "tokens: prompt characters / 4 as the server counts them; cached: the server's OpenAI-style prefix count; "
        "invalid: programs that failed validation (each sent back for repair; most came back valid)",
        "the recorded server ignores the data card and the residuals: what they change is the prompt size here, "
        "not what the server answers",
    ]
    data_out = {s: {m: results[s][m].to_json() for m in MODES} for s in results}
    data_out["new_per_100_ratio"] = ratio
    data_out["new_per_100_ratio_vs_b46edcf"] = ratio_part1
    return SuiteResult(
        name="proposer",
        title="LLM proposer against a recorded-output server: what 100 requests buy",
        columns=[
            "server / proposer",
            "requests",
            "prompt tokens",
            "cached",
            "completion tokens",
            "new valid",
            "new / 100 req",
            "duplicates / 100 req",
            "invalid / 100 req",
            "tokens per new",
            "how it ended",
        ],
        rows=rows,
        notes=notes,
        data=data_out,
    )


__all__ = [
    "CORPUS",
    "MODES",
    "ModeResult",
    "RecordedModelServer",
    "compare",
    "cosearch_task",
    "load_corpus",
    "run_mode",
    "run_proposer_suite",
]
