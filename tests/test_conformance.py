"""NDVM against a real Scheme: every program of tests/conformance/programs_*.scm must give the value
Guile gives (stored in tests/conformance/expected.jsonl by scripts/gen_conformance_fixtures.py).

Values are compared as Scheme data: exactness must match (3 is not 3.0), floats agree to a relative
1e-12, booleans, symbols, proper lists and dotted pairs must match exactly. The converter from the
Python value NDVM returns to Scheme notation lives here (`to_scheme`), and so does a small reader of
Guile's `write` output (`read_datum`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ndvm

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "conformance" / "expected.jsonl"
REL_TOL = 1e-12
ABS_TOL = 1e-300  # only so that 0.0 and -0.0 (and tiny underflows) compare equal


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "gen_conformance_fixtures", ROOT / "scripts" / "gen_conformance_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered while it executes
    spec.loader.exec_module(module)
    return module


generator = _load_generator()
RECORDS = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Scheme data in Python: int (exact), float (inexact), bool, Symbol, SList (proper or dotted list).


class Symbol(str):
    """A Scheme symbol (distinct from the Python str NDVM uses for symbols only by type)."""


@dataclass(frozen=True)
class SList:
    """A list: items, and the final cdr (None for a proper list, else the atom after the dot)."""

    items: tuple
    tail: object = None


_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_INT = re.compile(r"[+-]?\d+$")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$", re.IGNORECASE)
_SPECIAL_FLOATS = {"+inf.0": math.inf, "-inf.0": -math.inf, "+nan.0": math.nan, "-nan.0": math.nan}


def read_datum(text: str):
    """Parse Guile's `write` output of plain data into Python Scheme data."""
    tokens = _TOKEN.findall(text.strip())
    pos = 0

    def atom(tok: str):
        if tok in ("#t", "#true"):
            return True
        if tok in ("#f", "#false"):
            return False
        if tok in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[tok]
        if _INT.match(tok):
            return int(tok)
        if _FLOAT.match(tok):
            return float(tok)
        if tok.startswith("#") or "/" in tok and _INT.match(tok.replace("/", "")):
            raise ValueError(f"unsupported datum {tok!r}")
        return Symbol(tok)

    def parse():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            if tok == ")":
                raise ValueError(f"unexpected ) in {text!r}")
            return atom(tok)
        items, tail = [], None
        while tokens[pos] != ")":
            if tokens[pos] == ".":
                pos += 1
                tail = parse()
                if tokens[pos] != ")":
                    raise ValueError(f"bad dotted list in {text!r}")
                break
            items.append(parse())
        pos += 1
        if isinstance(tail, SList):  # (a . (b c)) is (a b c)
            return SList(tuple(items) + tail.items, tail.tail)
        return SList(tuple(items), tail)

    datum = parse()
    if pos != len(tokens):
        raise ValueError(f"trailing text after datum in {text!r}")
    return datum


def from_python(value):
    """The Scheme datum for a value returned by `Program.run`."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return Symbol(value)
    if isinstance(value, list):
        return SList(tuple(from_python(v) for v in value))
    if isinstance(value, tuple) and len(value) == 3 and value[1] == ".":
        # A dotted pair spelled as (car, ".", cdr) -- accepted in case the runtime uses it.
        head, tail = from_python(value[0]), from_python(value[2])
        return SList((head,) + tail.items, tail.tail) if isinstance(tail, SList) else SList((head,), tail)
    if hasattr(value, "car") and hasattr(value, "cdr"):
        head, tail = from_python(value.car), from_python(value.cdr)
        return SList((head,) + tail.items, tail.tail) if isinstance(tail, SList) else SList((head,), tail)
    raise TypeError(f"NDVM returned a value with no Scheme data notation: {type(value).__name__} {value!r}")


def to_scheme(value) -> str:
    """Scheme notation of a Python value returned by NDVM (the converter used in failure messages)."""
    return write_datum(from_python(value))


def write_datum(datum) -> str:
    if isinstance(datum, bool):
        return "#t" if datum else "#f"
    if isinstance(datum, int):
        return str(datum)
    if isinstance(datum, float):
        if math.isnan(datum):
            return "+nan.0"
        if math.isinf(datum):
            return "+inf.0" if datum > 0 else "-inf.0"
        return repr(datum)
    if isinstance(datum, SList):
        inner = " ".join(write_datum(d) for d in datum.items)
        if datum.tail is not None:
            inner += " . " + write_datum(datum.tail)
        return f"({inner})"
    return str(datum)


def same_datum(expected, got) -> bool:
    """Structural equality of Scheme data; exactness must agree, floats to REL_TOL."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, int) or isinstance(got, int):
        return type(expected) is type(got) and expected == got
    if isinstance(expected, float):
        if not isinstance(got, float):
            return False
        if math.isnan(expected):
            return math.isnan(got)
        return math.isclose(expected, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(expected, Symbol):
        return isinstance(got, Symbol) and str(expected) == str(got)
    if isinstance(expected, SList):
        return (
            isinstance(got, SList)
            and len(expected.items) == len(got.items)
            and all(same_datum(e, g) for e, g in zip(expected.items, got.items))
            and (expected.tail is None) == (got.tail is None)
            and (expected.tail is None or same_datum(expected.tail, got.tail))
        )
    raise TypeError(f"unexpected datum {expected!r}")


# ---------------------------------------------------------------------------------------------
# The helpers themselves (cheap, run without the runtime's help).


def test_reader_and_writer_round_trip():
    for text in ["(1 2.5 #t #f sym (nested (deep)) ())", "(1 2 . 3)", "(a . b)", "1.0e-5", "-17", "+inf.0"]:
        assert write_datum(read_datum(text)) == write_datum(read_datum(write_datum(read_datum(text))))
    assert read_datum("(1 . (2 3))") == SList((1, 2, 3))
    assert same_datum(read_datum("3"), 3) and not same_datum(read_datum("3"), 3.0)
    assert same_datum(read_datum("(0.1 x)"), from_python([0.1 + 1e-17, "x"]))
    assert not same_datum(read_datum("(1 2)"), from_python([1, 2, 3]))
    assert not same_datum(read_datum("(1 . 2)"), from_python([1, 2]))
    assert to_scheme([1, 2.5, True, "a", []]) == "(1 2.5 #t a ())"


def test_fixture_is_complete_and_current():
    """The fixture holds every program of the program files, with the same source, and enough of them."""
    programs = generator.load_programs()
    assert len(programs) >= 150
    by_name = {r["name"]: r for r in RECORDS}
    stale = [p.name for p in programs if p.name not in by_name or by_name[p.name]["source"] != p.source]
    assert not stale, f"regenerate with scripts/gen_conformance_fixtures.py; stale: {stale}"
    assert len(by_name) == len(programs) == len(RECORDS)
    for record in RECORDS:
        read_datum(record["expected"])  # every expected value is readable plain data


# ---------------------------------------------------------------------------------------------
# The conformance check proper.


@pytest.mark.timeout(60)
@pytest.mark.parametrize("record", RECORDS, ids=[r["name"] for r in RECORDS])
def test_program_matches_guile(record):
    expected = read_datum(record["expected"])
    value = ndvm.compile(record["source"]).run()
    got = from_python(value)
    assert same_datum(expected, got), (
        f"{record['name']}: Guile gives {record['expected']}, NDVM gives {write_datum(got)} "
        f"(Python {value!r})\n{record['source']}"
    )


@pytest.mark.timeout(300)
def test_fixture_matches_live_guile():
    """When Guile is installed, its answers today equal the committed fixture (skip otherwise)."""
    guile = generator.guile_binary()
    if guile is None:
        pytest.skip("guile is not installed; the committed fixture is used")
    programs = generator.load_programs()
    live = {p.name: generator.run_guile(p, guile) for p in programs}
    differ = {
        r["name"]: (r["expected"], live.get(r["name"]))
        for r in RECORDS
        if not same_datum(read_datum(r["expected"]), read_datum(live[r["name"]]))
    }
    assert not differ, f"Guile now disagrees with the fixture: {differ}"


# ---------------------------------------------------------------------------------------------
# The runtime's own Scheme printer (ndvm.values.to_scheme, used by `ndvm run`) against Guile's.


def test_runtime_printer_agrees_with_python_values():
    """For every program that runs, the runtime's printed value reads back as the same datum."""
    from ndvm.values import to_scheme as runtime_to_scheme

    mismatches = []
    for record in RECORDS:
        try:
            value = ndvm.compile(record["source"]).run()
        except ndvm.NDVMError:
            continue  # reported by test_program_matches_guile
        printed = runtime_to_scheme(value)
        if not same_datum(from_python(value), read_datum(printed)):
            mismatches.append((record["name"], printed, write_datum(from_python(value))))
    assert not mismatches, mismatches[:10]


CLI_SAMPLE = [
    "list-cons-dotted",
    "list-build-with-cons-dotted-chain",
    "num-float-literals",
    "quote-numbers-and-booleans",
    "symbols-with-punctuation",
    "num-round-to-even",
    "list-of-pairs",
    "hof-map-nested",
]


@pytest.mark.timeout(120)
def test_cli_run_prints_what_guile_writes(tmp_path):
    """`ndvm run FILE` prints the value in Scheme notation: the same datum as Guile's `write`."""
    import subprocess

    by_name = {r["name"]: r for r in RECORDS}
    ndvm_cli = Path(sys.executable).with_name("ndvm")
    for name in CLI_SAMPLE:
        path = tmp_path / f"{name}.scm"
        path.write_text(by_name[name]["source"])
        proc = subprocess.run([str(ndvm_cli), "run", str(path)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-1000:]}"
        assert same_datum(read_datum(by_name[name]["expected"]), read_datum(proc.stdout.strip())), (
            f"{name}: Guile {by_name[name]['expected']}, ndvm run printed {proc.stdout.strip()}"
        )


# ---------------------------------------------------------------------------------------------
# Differential run on random programs (needs Guile: skipped where it is not installed).


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_programs_match_live_guile(seed):
    guile = generator.guile_binary()
    if guile is None:
        pytest.skip("guile is not installed")
    spec = importlib.util.spec_from_file_location(
        "random_programs", ROOT / "tests" / "conformance" / "random_programs.py"
    )
    random_programs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(random_programs)
    programs = random_programs.generate(seed, 1500)
    expected = random_programs.run_guile_batch(programs, guile)
    differ = []
    for source, want in zip(programs, expected):
        if want == "ERROR":
            continue  # e.g. an exactness corner Guile itself rejects; not a conformance question
        try:
            got = write_datum(from_python(ndvm.compile(source).run()))
        except ndvm.NDVMError as exc:
            got = f"{type(exc).__name__}: {exc}"
        if got.startswith(("ParseError", "CheckError", "EvalError", "LimitError")) or not same_datum(
            read_datum(want), read_datum(got)
        ):
            differ.append((source, want, got))
    assert not differ, f"{len(differ)} of {len(programs)} differ; first: {differ[0]}"


# ---------------------------------------------------------------------------------------------
# Exact integers past 64 bits: NDVM has no bignums, so a result that leaves int64 may become
# inexact, but it must never be a wrong number (wrapped, wrong sign).

OVERFLOW_PROGRAMS = {
    "(define (fact n) (if (= n 0) 1 (* n (fact (- n 1)))))\n(fact 25)": 15511210043330985984000000,
    "(+ 9223372036854775807 1)": 9223372036854775808,
    "(* 99999999999 99999999999)": 9999999999800000000001,
    "(- -9223372036854775808)": 9223372036854775808,
    "(quotient -9223372036854775808 -1)": 9223372036854775808,
    "(quotient (- -9223372036854775807 1) -1)": 9223372036854775808,
    "(* -1 (- -9223372036854775807 1))": 9223372036854775808,
    "(abs -9223372036854775808)": 9223372036854775808,
    "(expt 2 100)": 1267650600228229401496703205376,
    "(square 4294967296)": 18446744073709551616,
    "(- (- -9223372036854775807 1) 1)": -9223372036854775809,
    "(let loop ((i 0) (x 1)) (if (= i 70) x (loop (+ i 1) (* x 2))))": 2**70,
}


@pytest.mark.parametrize("source", OVERFLOW_PROGRAMS, ids=range(len(OVERFLOW_PROGRAMS)))
def test_integer_overflow_is_exact_or_inexact_never_wrong(source):
    want = OVERFLOW_PROGRAMS[source]
    got = ndvm.compile(source).run()
    if isinstance(got, int) and not isinstance(got, bool):
        assert got == want, f"exact result {got} but Scheme gives {want}"
    else:
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-15), f"{got!r} but Scheme gives {want}"


def test_reader_accepts_crlf_and_tabs():
    """Windows line ends and tabs are whitespace (the program files cannot carry them)."""
    assert ndvm.compile("(define x 2)\r\n(+\tx\r\n   1)\r\n").run() == 3
    assert ndvm.compile("(+ 1 2) ; a comment without a final newline").run() == 3


# ---------------------------------------------------------------------------------------------
# The bounded loop form (NDVM's own, so no Guile fixture): recur in every tail context of its loop.

LOOP_PROGRAMS = {
    "(loop ((i 0) (acc '())) (if (= i 3) acc (recur (+ i 1) (cons (loop ((j 0) (s 0)) (if (= j i) s (recur (+ j 1) (+ s j)))) acc))))": [
        1,
        0,
        0,
    ],
    "(loop ((i 0)) (cond ((= i 5) 'done) (else (recur (+ i 1)))))": "done",
    "(loop ((i 0)) (let ((j (+ i 1))) (if (> j 5) j (recur j))))": 6,
    "(loop ((i 0)) (begin 1 (if (> i 5) i (recur (+ i 1)))))": 6,
    "(loop ((i 0)) (and (< i 5) (recur (+ i 1))))": False,
    "(loop ((i 0)) (or (> i 5) (recur (+ i 1))))": True,
    "(loop ((i 0)) (case i ((5) 'five) (else (recur (+ i 1)))))": "five",
    "(loop ((i 0)) (when (< i 5) (if (= i 4) 'last (recur (+ i 1)))))": "last",
    "(define (f n) (loop ((i n)) (if (= i 0) 'z (recur (- i 1)))))\n(f 1000000)": "z",
    "(loop () 5)": 5,
    "(loop ((i 0)) (do ((k 0 (+ k 1))) ((= k 1) (if (> i 2) i (recur (+ i 1))))))": 3,  # do's result is a tail context
    "(let ((loop 3)) (* loop 2))": 6,
    "(define (recur x) (* x 10))\n(recur 4)": 40,
}


@pytest.mark.parametrize("source", LOOP_PROGRAMS, ids=range(len(LOOP_PROGRAMS)))
def test_loop_recur_form(source):
    got = from_python(ndvm.compile(source).run())
    want = from_python(LOOP_PROGRAMS[source])
    assert same_datum(want, got), f"{write_datum(got)} != {write_datum(want)}"
