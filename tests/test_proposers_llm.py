"""LLMProposer through litellm's real HTTP path, against a local OpenAI-compatible server.

The server (a thread running http.server on 127.0.0.1) picks its behaviour from the task name in
the prompt ("Task: <scenario>"): valid programs, programs that need a repair, garbage, 429s, 500s,
slow answers past the timeout. Every test is bounded in time: a proposer must never hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402

from proposers import (  # noqa: E402
    Budget,
    Column,
    Failure,
    ProposalContext,
    ScoredProgram,
    TaskSpec,
    runtime_available,
    validate_source,
    validate_static,
)
from proposers.llm import LLMFatalError, LLMProposer, build_messages, extract_programs, redact  # noqa: E402

KEY_ENV = "NDVM_TEST_LLM_KEY"
SECRET = "sk-test-0123456789abcdef"

VALID_A = "(param a 1.0)\n(param k 0.5 positive)\n(* a (exp (- (* k x))))"
VALID_B = "(param a 1.0)\n(param w 2.0)\n(* a (sin (* w x)))"
BROKEN = "(param a 1.0)\n(* a (exp (* b x)))"  # b is neither declared nor an input
FIXED = "(param a 1.0)\n(param b -0.3)\n(* a (exp (* b x)))"
UNBALANCED = "(param a 1.0)\n(* a (exp x)"


def fenced(*programs: str, tag: str = "scheme") -> str:
    return "\n\n".join(f"Here is one:\n```{tag}\n{p}\n```" for p in programs)


class FakeOpenAI:
    """A minimal /v1/chat/completions server; behaviour chosen by scenario (see module docstring)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.counts: dict[str, int] = {}
        self.inflight = 0
        self.max_inflight = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                tracked = "Task: concurrency" in json.dumps(body)  # in-flight count of that scenario only
                with fake.lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if tracked:
                        fake.inflight += 1
                        fake.max_inflight = max(fake.max_inflight, fake.inflight)
                try:
                    fake.respond(self, body)
                finally:
                    if tracked:
                        with fake.lock:
                            fake.inflight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.api_base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    # -- responses -----------------------------------------------------------------------------
    def send(self, handler, status: int, payload: dict, headers: dict | None = None):
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        handler.end_headers()
        try:
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass

    def reply(self, handler, body, text: str):
        self.send(
            handler,
            200,
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140},
            },
        )

    def count(self, scenario: str) -> int:
        with self.lock:
            self.counts[scenario] = self.counts.get(scenario, 0) + 1
            return self.counts[scenario]

    def respond(self, handler, body):
        messages = body["messages"]
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        scenario = re.search(r"Task: (\S+)", first_user).group(1)
        last = messages[-1]["content"]
        nth = self.count(scenario)
        if scenario == "valid":
            return self.reply(handler, body, fenced(VALID_A) + "\n" + fenced(VALID_B, tag="lisp"))
        if scenario == "repair":
            if "This program is not valid" in last:
                return self.reply(handler, body, fenced(FIXED))
            return self.reply(handler, body, fenced(BROKEN) + "\n" + fenced(VALID_B))
        if scenario == "unrepairable":
            return self.reply(handler, body, fenced(UNBALANCED))
        if scenario == "garbage":
            return self.reply(handler, body, "I am sorry, I cannot write programs today.")
        if scenario == "bare":
            return self.reply(handler, body, VALID_A)
        if scenario == "ratelimit-once" and nth == 1 or scenario == "ratelimit-always":
            return self.send(
                handler, 429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "0"}
            )
        if scenario == "error500-once" and nth == 1 or scenario == "error500-always":
            return self.send(handler, 500, {"error": {"message": "internal failure", "type": "server_error"}})
        if scenario == "slow":
            time.sleep(3.0)
            return self.reply(handler, body, fenced(VALID_A))
        if scenario == "auth":  # a server that echoes the credential it got (some do, in errors)
            return self.send(
                handler,
                401,
                {
                    "error": {
                        "message": f"bad key {handler.headers.get('Authorization')}",
                        "type": "invalid_request_error",
                    }
                },
            )
        if scenario == "forbidden":
            return self.send(
                handler, 403, {"error": {"message": "this key may not use fake-model", "type": "permission_error"}}
            )
        if scenario == "nomodel":
            return self.send(
                handler,
                404,
                {
                    "error": {
                        "message": "The model `fake-model` does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
        if scenario == "concurrency":
            time.sleep(0.3)
            return self.reply(handler, body, fenced(VALID_A))
        if scenario == "throughput":  # a different valid program per request, after 0.2 s
            time.sleep(0.2)
            return self.reply(handler, body, fenced(f"(param a 1.0)\n(* a (expt x {nth}))"))
        if scenario in ("ratelimit-once", "error500-once"):
            return self.reply(handler, body, fenced(VALID_A))
        return self.send(handler, 400, {"error": {"message": f"unknown scenario {scenario}"}})


@pytest.fixture(scope="module")
def server():
    fake = FakeOpenAI()
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


VALIDATORS = [
    pytest.param(validate_static, id="static"),
    pytest.param(
        validate_source, id="ndvm", marks=pytest.mark.skipif(not runtime_available(), reason="ndvm runtime not built")
    ),
]


def context(scenario: str) -> ProposalContext:
    task = TaskSpec(
        dataset=scenario,
        description="Damped response of a sensor.",
        inputs={"x": "vector [n], time in s"},
        contract="one prediction per point of x",
        columns=[Column("x", "s", "time"), Column("y", "V", "reading")],
        sample_rows=[{"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 0.61}],
    )
    return ProposalContext(task, best=[ScoredProgram("(param a 1.0)\n(* a x)", 0.5)], budget=Budget(100))


def proposer(server, validator, **kw) -> LLMProposer:
    options = dict(
        concurrency=4,
        timeout=1.0,
        max_retries=2,
        max_repairs=2,
        api_base=server.api_base,
        api_key_env=KEY_ENV,
        per_request=2,
        backoff=0.01,
        validator=validator,
        seed=0,
    )
    options.update(kw)
    return LLMProposer("openai/fake-model", **options)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("validator", VALIDATORS)
def test_valid_candidates_come_back_with_usage(server, validator):
    llm = proposer(server, validator)
    props = llm.propose(context("valid"), 4)
    # two requests of two programs each; the same two programs twice are deduplicated
    assert sorted(p.source for p in props) == sorted([VALID_A, VALID_B])
    assert all(p.origin.proposer == "llm" and p.origin.model == "openai/fake-model" for p in props)
    assert all(p.repairs == 0 and p.origin.operator == "llm" for p in props)
    assert all(p.tokens_in == 50 and p.tokens_out == 20 for p in props)  # half of one reply each
    assert llm.usage.calls == 2 and llm.usage.tokens_in == 200 and llm.usage.tokens_out == 80
    assert llm.usage.cost_known is False  # an unknown model: litellm cannot price it, and that is fine
    assert llm.drain_failures() == []
    if validator is validate_source:
        assert all(p.canonical_hash for p in props)
        assert {tuple(p.param_names) for p in props} == {("a", "k"), ("a", "w")}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("validator", VALIDATORS)
def test_repair_loop_fixes_an_invalid_candidate(server, validator):
    llm = proposer(server, validator, per_request=2)
    before = len(server.requests)
    props = llm.propose(context("repair"), 2)
    by_source = {p.source: p for p in props}
    assert set(by_source) == {FIXED, VALID_B}
    assert by_source[FIXED].repairs == 1 and by_source[FIXED].origin.operator == "repair"
    assert by_source[VALID_B].repairs == 0
    # the fixed one paid for its share of the first reply and the whole repair reply
    assert by_source[FIXED].tokens_in == 150 and by_source[FIXED].tokens_out == 60
    failures = llm.drain_failures()
    assert len(failures) == 1 and failures[0].kind == "static" and "'b'" in failures[0].message
    # the repair request carried the program and its error back to the model
    repair_requests = [r for r in server.requests[before:] if len(r["messages"]) == 4]
    assert len(repair_requests) == 1
    assert BROKEN in repair_requests[0]["messages"][3]["content"]
    assert "undeclared name 'b'" in repair_requests[0]["messages"][3]["content"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("validator", VALIDATORS)
def test_unrepairable_and_garbage_are_recorded(server, validator):
    llm = proposer(server, validator, per_request=1, max_repairs=2)
    assert llm.propose(context("unrepairable"), 1) == []
    failures = llm.drain_failures()
    assert [f.kind for f in failures] == ["parse"] * 3  # the first try and two repairs
    assert all(f.source == UNBALANCED for f in failures)

    before = len(server.requests)
    assert llm.propose(context("garbage"), 2) == []
    failures = llm.drain_failures()
    assert failures and all(f.kind == "extract" for f in failures)
    # each request asked again for code, max_repairs times, then gave up: 2 requests x 3 calls
    assert len(server.requests) - before == 6


@pytest.mark.timeout(60)
def test_bare_reply_is_taken_as_code(server):
    llm = proposer(server, validate_static, per_request=1)
    props = llm.propose(context("bare"), 1)
    assert [p.source for p in props] == [VALID_A]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scenario,kind", [("ratelimit", "rate_limit"), ("error500", "server")])
def test_backoff_on_429_and_500(server, scenario, kind):
    llm = proposer(server, validate_static, per_request=1, max_retries=2)
    props = llm.propose(context(f"{scenario}-once"), 1)
    assert [p.source for p in props] == [VALID_A]
    assert llm.usage.retries == 1 and llm.usage.failed_calls == 1
    assert llm.drain_failures() == []

    started = time.monotonic()
    assert llm.propose(context(f"{scenario}-always"), 1) == []
    assert time.monotonic() - started < 10
    failures = llm.drain_failures()
    assert [f.kind for f in failures] == [kind]
    assert server.counts[f"{scenario}-always"] == 3  # the first try and max_retries retries


@pytest.mark.timeout(60)
def test_slow_answer_times_out_and_never_hangs(server):
    llm = proposer(server, validate_static, per_request=1, timeout=0.5, max_retries=1)
    started = time.monotonic()
    assert llm.propose(context("slow"), 2) == []
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, elapsed  # 2 requests in parallel, 2 attempts of 0.5 s each, plus backoff
    failures = llm.drain_failures()
    assert [f.kind for f in failures] == ["timeout", "timeout"]


@pytest.mark.timeout(60)
def test_requests_run_concurrently_up_to_the_limit(server):
    llm = proposer(server, validate_static, per_request=1, concurrency=4)
    server.max_inflight = 0
    started = time.monotonic()
    props = llm.propose(context("concurrency"), 12)
    elapsed = time.monotonic() - started
    assert len(props) == 1  # twelve times the same program, deduplicated
    assert server.max_inflight == 4
    assert elapsed < 12 * 0.3  # three waves of four, not twelve calls in a row


@pytest.mark.timeout(60)
def test_api_key_comes_from_the_environment_and_is_never_recorded(server, caplog):
    llm = proposer(server, validate_static, per_request=1, max_retries=3)
    before = len(server.requests)
    with caplog.at_level("DEBUG"), pytest.raises(LLMFatalError, match="authentication failed") as raised:
        llm.propose(context("auth"), 4)
    # fails fast: no retries of a 401, and the other requests of the round are stopped
    assert len(server.requests) - before <= llm.concurrency and llm.usage.retries == 0
    assert server.headers[-1]["authorization"] == f"Bearer {SECRET}"
    message = str(raised.value)
    assert "bad key" in message and "***" in message and SECRET not in message  # the provider's words, redacted
    assert SECRET not in caplog.text
    assert SECRET not in repr(llm) and SECRET not in repr(vars(llm))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "scenario,reason,said",
    [
        ("forbidden", "permission denied", "may not use fake-model"),
        ("nomodel", "model or endpoint not found", "does not exist"),
    ],
)
def test_permission_and_unknown_model_stop_at_once(server, scenario, reason, said):
    llm = proposer(server, validate_static, per_request=1, max_retries=3, concurrency=1)
    before = len(server.requests)
    with pytest.raises(LLMFatalError, match=reason) as raised:
        llm.propose(context(scenario), 3)
    assert said in str(raised.value)
    assert len(server.requests) - before == 1, "one request, no retries, no further requests"


def test_temperature_is_the_providers_unless_given_and_prices_per_token(server):
    llm = proposer(server, validate_static, per_request=1)
    assert len(llm.propose(context("valid"), 1)) == 1
    assert "temperature" not in server.requests[-1], "no temperature sent: the provider's default applies"
    assert llm.usage.cost_known is False and llm.cost_limit_problem() is not None
    assert "openai/fake-model" in llm.cost_limit_problem()
    priced = proposer(server, validate_static, per_request=1, temperature=0.3, price_per_token=(2e-6, 8e-6))
    [proposal] = priced.propose(context("valid"), 1)
    assert server.requests[-1]["temperature"] == 0.3
    assert priced.cost_limit_problem() is None
    assert priced.usage.cost_usd == pytest.approx(100 * 2e-6 + 40 * 8e-6) and priced.usage.cost_known
    with pytest.raises(ValueError, match="price_per_token"):
        proposer(server, validate_static, price_per_token=(1e-6, -1.0))


def test_missing_key_variable_is_a_clear_error(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    llm = proposer(server, validate_static)
    with pytest.raises(RuntimeError, match=KEY_ENV):
        llm.propose(context("valid"), 1)


def test_keys_are_refused_in_completion_kwargs():
    with pytest.raises(ValueError, match="environment"):
        LLMProposer("openai/x", completion_kwargs={"api_key": "k"})


@pytest.mark.timeout(60)
def test_apropose_inside_a_running_loop_and_propose_from_one(server):
    llm = proposer(server, validate_static)

    async def main():
        direct = await llm.apropose(context("valid"), 2)
        nested = llm.propose(context("valid"), 2)  # sync API called from inside a loop: runs in a thread
        return direct, nested

    direct, nested = asyncio.run(main())
    assert {p.source for p in direct} == {p.source for p in nested} == {VALID_A, VALID_B}


# -- prompt assembly and extraction, with litellm's mock_response (no server) ---------------------


def rich_context() -> ProposalContext:
    task = TaskSpec(
        dataset="NASA PCoE battery capacity",
        description="Capacity fade of Li-ion cells over discharge cycles.",
        inputs={"cycle": "vector [n], discharge cycle index", "temp": "vector [n], ambient temperature in C"},
        contract="return one predicted capacity (Ah) per point of cycle",
        columns=[Column("cycle", "", "discharge cycle"), Column("capacity", "Ah", "measured capacity")],
        sample_rows=[{"cycle": 1, "capacity": 1.856}, {"cycle": 2, "capacity": 1.846}],
        score_label="held-out R^2 (higher is better)",
    )
    return ProposalContext(
        task,
        best=[
            ScoredProgram(
                "(param c0 1.9)\n(param k 0.01 positive)\n(* c0 (exp (- (* k cycle))))",
                0.912,
                params={"c0": 1.87, "k": 0.0031},
            )
        ],
        failures=[
            Failure("check", "unknown operator logistic", "(logistic x)", line=3, column=5),
            Failure("timeout", "Timeout: request took too long"),
        ],
        budget=Budget(proposals_left=500, seconds_left=120.0, cost_left_usd=1.5),
    )


def test_prompt_assembly_contains_every_part_of_the_context():
    messages = build_messages(rich_context(), 3)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "(param k 1.0 positive)" in system and "(loop ((var init) ...)" in system  # language reference
    assert "$" not in system.replace("$language", "")  # every placeholder filled
    for expected in [
        "Task: NASA PCoE battery capacity",
        "Capacity fade of Li-ion",
        "- capacity [Ah]: measured",
        "cycle,capacity",
        "1,1.856",
        "- temp: vector [n], ambient temperature in C",
        "return one predicted capacity (Ah) per point of cycle",
        "held-out R^2 (higher is better)",
        "score 0.912",
        "(* c0 (exp (- (* k cycle))))",
        "fitted: c0=1.87, k=0.0031",
        "[check] at line 3, column 5 unknown operator logistic",
        "(logistic x)",
        "500 proposals, 120 s, $1.50",
        "Propose 3 new candidate programs",
    ]:
        assert expected in user, expected


def test_mock_response_end_to_end_with_cost(monkeypatch):
    reply = (
        "Two ideas.\n```scheme\n(param c0 1.9)\n(param k 0.01 positive)\n(* c0 (exp (- (* k cycle))))\n```\n"
        "```lisp\n(param c0 1.9)\n(param a 0.001)\n(- c0 (* a cycle temp))\n```\n```python\nprint(1)\n```"
    )
    llm = LLMProposer(
        "gpt-4o-mini", per_request=2, validator=validate_static, completion_kwargs={"mock_response": reply}
    )
    props = llm.propose(rich_context(), 2)
    assert len(props) == 2 and all(p.source.startswith("(param c0 1.9)") for p in props)
    assert props[1].source.endswith("(- c0 (* a cycle temp))")
    # a known model: litellm prices the call from its local cost map
    assert llm.usage.cost_known and llm.usage.cost_usd > 0
    assert all(p.cost_usd and p.cost_usd > 0 for p in props)


def test_mock_response_candidate_with_undeclared_input_is_rejected():
    llm = LLMProposer(
        "gpt-4o-mini",
        per_request=1,
        max_repairs=0,
        validator=validate_static,
        completion_kwargs={"mock_response": "```scheme\n(param a 1.0)\n(* a voltage)\n```"},
    )
    assert llm.propose(rich_context(), 1) == []
    (failure,) = llm.drain_failures()
    assert failure.kind == "static" and "voltage" in failure.message and "cycle" in failure.message


@pytest.mark.parametrize(
    "text,expected",
    [
        ("```scheme\n(+ 1 2)\n```", ["(+ 1 2)"]),
        ("```lisp\n(a)\n```\ntext\n```\n(b)\n```", ["(a)", "(b)"]),
        ("```Scheme title\n(a)\n```", ["(a)"]),
        ("```python\nx = 1\n```", []),
        ("(param a 1)\n(* a x)", ["(param a 1)\n(* a x)"]),
        ("Sure! Here it is: (* a x)", []),
        ("```scheme\n(param a 1)\n(* a x", ["(param a 1)\n(* a x"]),  # cut by max_tokens: kept, compile decides
        ("", []),
    ],
)
def test_extract_programs(text, expected):
    assert extract_programs(text) == expected


def test_redact_hides_secret_environment_values(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "abcdef123456")
    assert redact("key abcdef123456 rejected") == "key *** rejected"


@pytest.mark.timeout(60)
def test_concurrent_requests_get_different_hints(server):
    from proposers.llm import load_hints

    hints = load_hints()
    assert len(hints) >= 4
    llm = proposer(server, validate_static, per_request=1)
    before = len(server.requests)
    llm.propose(context("valid"), 3)
    sent = [r["messages"][1]["content"] for r in server.requests[before:]]
    used = sorted(hints.index(h) for text in sent for h in hints if h in text)
    assert used == [0, 1, 2]  # one different suggestion per request, in turn
    assert LLMProposer("gpt-4o-mini", hints=False).hints == []


def test_cost_budget_stops_new_calls():
    reply = "```scheme\n(param a 1.0)\n(* a cycle)\n```"
    context = rich_context()
    context.budget = Budget(cost_left_usd=0.0)
    llm = LLMProposer(
        "gpt-4o-mini", per_request=1, validator=validate_static, completion_kwargs={"mock_response": reply}
    )
    assert llm.propose(context, 3) == [] and llm.usage.calls == 0
    assert [f.kind for f in llm.drain_failures()] == ["budget"]

    context.budget = Budget(cost_left_usd=1e-12)  # less than one call: the first one spends it
    llm = LLMProposer(
        "gpt-4o-mini",
        per_request=1,
        concurrency=1,
        validator=validate_static,
        completion_kwargs={"mock_response": reply},
    )
    props = llm.propose(context, 3)
    assert len(props) == 1 and llm.usage.calls == 1
    assert [f.kind for f in llm.drain_failures()] == ["budget", "budget"]


@pytest.fixture
def sent_messages():
    """The messages litellm is about to send, captured with a litellm callback (pre-API-call hook)."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    class Capture(CustomLogger):
        def __init__(self):
            super().__init__()
            self.calls: list[list[dict]] = []

        def log_pre_api_call(self, model, messages, kwargs):
            self.calls.append(messages)

    capture = Capture()
    saved = litellm.callbacks
    litellm.callbacks = [capture]
    try:
        yield capture.calls
    finally:
        litellm.callbacks = saved


def test_mock_response_prompt_and_repair_conversation_as_sent(sent_messages):
    broken = "```scheme\n(param a 1.0)\n(* a (expt cycle b))\n```"
    llm = LLMProposer(
        "gpt-4o-mini",
        per_request=1,
        max_repairs=1,
        validator=validate_static,
        hints=False,
        completion_kwargs={"mock_response": broken},
    )
    assert llm.propose(rich_context(), 1) == []
    assert len(sent_messages) == 2  # the request and one repair
    first, repair = sent_messages
    assert first == build_messages(rich_context(), 1)
    assert [m["role"] for m in repair] == ["system", "user", "assistant", "user"]
    assert repair[:2] == first and repair[2]["content"] == broken
    assert "(* a (expt cycle b))" in repair[3]["content"]
    assert "undeclared name 'b'" in repair[3]["content"] and "Error (static)" in repair[3]["content"]
    assert [f.kind for f in llm.drain_failures()] == ["static", "static"]


@pytest.mark.timeout(60)
def test_command_line_llm_against_the_local_server(server, tmp_path, capsys):
    from proposers.__main__ import main

    out = tmp_path / "llm.jsonl"
    code = main(
        [
            "llm",
            "--model",
            "openai/fake-model",
            "--api-base",
            server.api_base,
            "--api-key-env",
            KEY_ENV,
            "--dataset",
            "valid",
            "-n",
            "2",
            "--per-request",
            "2",
            "--timeout",
            "5",
            "--out",
            str(out),
            "--no-validate",
        ]
    )
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["src"] for r in records) == sorted([VALID_A, VALID_B])
    assert all(r["model"] == "openai/fake-model" and r["tokens_in"] == 50 for r in records)
    err = capsys.readouterr().err
    assert '"usage"' in err and SECRET not in err


@pytest.mark.timeout(120)
def test_many_requests_in_flight(server):
    """200 requests, 32 in flight, against a server that answers each in 0.2 s."""
    llm = proposer(server, validate_static, per_request=1, concurrency=32, timeout=10)
    started = time.monotonic()
    props = llm.propose(context("throughput"), 200)
    elapsed = time.monotonic() - started
    print(f"\n200 requests, 32 in flight: {elapsed:.2f} s, {len(props)} proposals")
    assert len(props) == 200 and llm.drain_failures() == []
    assert llm.usage.calls == 200
    assert elapsed < 200 * 0.2 / 4  # far from serial (40 s); ideal is 200 / 32 * 0.2 = 1.3 s


def test_duplicates_are_named_in_the_prompt_with_the_stored_hash_and_score():
    from proposers import Duplicate

    ctx = context("valid")
    ctx.duplicates = [Duplicate(VALID_A, "a" * 64, score=0.123456), Duplicate(VALID_B, "b" * 64, semantic=True)]
    user = build_messages(ctx, 2)[1]["content"]
    assert "duplicates of programs already stored" in user
    assert f"is the same program as stored {'a' * 12} (validation score 0.1235)" in user
    assert f"computes the same values as stored {'b' * 12} (not calibrated yet)" in user
    assert VALID_A.splitlines()[-1] in user and VALID_B.splitlines()[-1] in user
    assert "duplicates of programs" not in build_messages(context("valid"), 2)[1]["content"]


@pytest.mark.timeout(60)
def test_mostly_duplicates_change_the_hint_and_raise_the_temperature(server):
    from proposers.llm import accepts_temperature, load_hints

    hints, diverge = load_hints(), load_hints("hints_diverge.md")
    assert diverge and not set(hints) & set(diverge)
    llm = proposer(server, validate_static, per_request=1)
    before = len(server.requests)
    llm.propose(context("valid"), 2)  # nothing known about duplicates yet
    calm = server.requests[before:]
    assert all("temperature" not in r for r in calm)
    assert all(any(h in r["messages"][1]["content"] for h in hints) for r in calm)
    repeating = context("valid")
    repeating.duplicate_rate = 1.0
    before = len(server.requests)
    llm.propose(repeating, 2)
    hot = server.requests[before:]
    assert len(hot) == 2
    assert all(any(h in r["messages"][1]["content"] for h in diverge) for r in hot)
    assert all(r["temperature"] == pytest.approx(llm.max_temperature) for r in hot)
    # in proportion to the rate: 1.0 (most providers' default) plus a share of the way to the cap
    assert llm._diverge_temperature(0.5) == pytest.approx(1.0 + 0.5 * (llm.max_temperature - 1.0))
    # a temperature the user fixed is kept; a model that takes none keeps the provider's default
    fixed = proposer(server, validate_static, per_request=1, temperature=0.2)
    before = len(server.requests)
    fixed.propose(repeating, 1)
    assert server.requests[before]["temperature"] == 0.2
    assert not accepts_temperature("o1-mini") and accepts_temperature("openai/fake-model")
    assert LLMProposer("o1-mini")._diverge_temperature(1.0) is None
    assert LLMProposer("anthropic/claude-3-5-sonnet-20241022")._diverge_temperature(1.0) == 1.0
