"""Shared pieces of the pipeline tests (tests/test_flows*.py, test_cli*.py, test_ui_browser.py).

- the session fixtures ``prefect_api`` (one Prefect test server) and ``enso_run`` (one real
  discovery run on the enso task) live in tests/conftest.py; ``ENSO_RUN_BUDGET`` is the latter's budget.
- ``FakeOpenAI``: a local OpenAI-compatible chat server on 127.0.0.1 returning forecast candidates.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from flows.environment import OFFLINE_ENV, apply_offline_env

# The offline environment (flows/offline.env) for this process and every subprocess it starts.
QUIET = dict(OFFLINE_ENV)
apply_offline_env()

REPO = Path(__file__).resolve().parents[1]
ENSO_RUN_BUDGET = {"minutes": 3.0, "max_candidates": 40}


def subprocess_env(prefect_api: str, **extra: str) -> dict[str, str]:
    """Environment for an ``ndvm`` subprocess: quiet, offline, on the session's Prefect server."""
    env = {**os.environ, **QUIET, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(REPO)}
    env.update(extra)
    return env


# Structurally different forecast candidates (distinct canonical hashes), as an LLM might write them.
LLM_PROGRAMS = [
    "(param phi 0.8 (between -1 1))\n(define (init) 0.0)\n(define (predict s) (* phi s))\n(define (update s y) y)",
    "(param phi 0.8 (between -1 1))\n(param c 0.0)\n(define (init) 0.0)\n(define (predict s) (+ c (* phi s)))\n"
    "(define (update s y) y)",
    "(param phi 0.8 (between -1 1))\n(param g 0.05 positive)\n(define (init) 0.0)\n"
    "(define (predict s) (- (* phi s) (* g s s s)))\n(define (update s y) y)",
    "(param a 0.8)\n(param b 0.1)\n(define (init) 0.0)\n(define (predict s) (+ (* a s) (* b (tanh s))))\n"
    "(define (update s y) y)",
    "(param phi 0.8 (between -1 1))\n(param g 0.1 positive)\n(define (init) 0.0)\n"
    "(define (predict s) (* phi s (exp (- (* g s s)))))\n(define (update s y) y)",
    "(param a1 0.9)\n(param a2 -0.1)\n(define (init) (list 0.0 0.0))\n"
    "(define (predict s) (+ (* a1 (car s)) (* a2 (cadr s))))\n(define (update s y) (list y (car s)))",
    "(param phi 0.8 (between -1 1))\n(param k 0.5 positive)\n(define (init) 0.0)\n"
    "(define (predict s) (* phi (/ s (+ 1.0 (* k (abs s))))))\n(define (update s y) y)",
    "(param a 0.7)\n(param w 0.3)\n(define (init) (list 0.0 0.0))\n"
    "(define (predict s) (+ (* a (car s)) (* w (- (car s) (cadr s)))))\n(define (update s y) (list y (car s)))",
]


class FakeOpenAI:
    """/v1/chat/completions on 127.0.0.1: each reply carries the next programs of LLM_PROGRAMS (as
    many as the prompt asks for, in fenced blocks); the first reply has no code at all. Each answer
    takes ``delay`` seconds, so concurrent requests overlap; the peak overlap is recorded.
    ``programs``: the list to cycle through instead (two programs: a server that repeats itself)."""

    def __init__(self, delay: float = 0.3, programs: list[str] | None = None):
        self.programs = list(programs or LLM_PROGRAMS)
        self.lock = threading.Lock()
        self.requests: list[dict] = []
        self.authorization: list[str] = []
        self.next_program = 0
        self.inflight = 0
        self.max_inflight = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with fake.lock:
                    fake.requests.append(body)
                    fake.authorization.append(self.headers.get("Authorization", ""))
                    fake.inflight += 1
                    fake.max_inflight = max(fake.max_inflight, fake.inflight)
                    first = len(fake.requests) == 1
                try:
                    time.sleep(delay)
                    fake.answer(self, body, first)
                finally:
                    with fake.lock:
                        fake.inflight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.api_base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, handler, body: dict, first: bool) -> None:
        if first:
            text = "I would start from persistence, but let me think about it more."
        else:
            with self.lock:
                picks = [self.programs[(self.next_program + i) % len(self.programs)] for i in range(2)]
                self.next_program += 2
            text = "\n\n".join(f"Candidate:\n```scheme\n{p}\n```" for p in picks)
        payload = json.dumps(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 120, "total_tokens": 1020},
            }
        ).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------ the MLflow UI (ndvm ui)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(folder, port: int, prefect_api: str) -> subprocess.Popen:
    """``ndvm ui`` in a subprocess; returns once the MLflow server answers /health.

    Its output goes to ``ui.log`` in ``folder``, not to a pipe: the server logs every request, and
    a pipe nobody reads fills (64 KiB) and blocks the server's only worker in its next write (seen
    as Chromium hanging on the fifth or sixth MLflow page of tests/test_ui_browser.py)."""
    log = open(Path(folder) / "ui.log", "a")  # noqa: SIM115 (the child holds it for its life)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ndvm.cli", "ui", "--folder", str(folder), "--port", str(port)],
        env=subprocess_env(prefect_api),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    log.close()  # the child has its own descriptor
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ndvm ui exited: {(Path(folder) / 'ui.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop_ui(proc)
    raise AssertionError("the MLflow server did not become healthy in 90 s")


def stop_ui(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its worker (own session)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
