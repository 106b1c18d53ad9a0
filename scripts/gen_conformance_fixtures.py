"""Generate the expected values of the NDVM conformance suite by running every program through Guile.

The programs live in ``tests/conformance/programs_*.scm``; each starts with a line ``;;; NAME`` and
runs up to the next such line. Every program is evaluated by a fresh Guile process in a fresh
module, form by form as at the top level of a Scheme file, and the value of its last form is
printed with ``write``. The results go to ``tests/conformance/expected.jsonl`` (one JSON object a
line: name, file, source, expected, guile), which is reviewed and committed: the conformance test
compares NDVM against it, whether or not Guile is installed where the tests run.

Usage:
    python scripts/gen_conformance_fixtures.py            # regenerate expected.jsonl
    python scripts/gen_conformance_fixtures.py --check    # compare Guile's answers with the fixture
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_DIR = ROOT / "tests" / "conformance"
FIXTURE = CONFORMANCE_DIR / "expected.jsonl"

# Guile evaluates the program's forms one by one in a fresh module, like a Scheme file's top level,
# and writes the last value. R7RS `square` is not in Guile's default environment, so it is defined
# first (the program may redefine it). Only plain data may come out; the generator rejects the rest.
GUILE_DRIVER = r"""
(define module (make-fresh-user-module))
(eval '(define (square x) (* x x)) module)
(define port (open-input-file (cadr (command-line))))
(let loop ((last (if #f #f)))
  (let ((form (read port)))
    (if (eof-object? form)
        (begin (write last) (newline))
        (loop (eval form module)))))
"""

HEADER = re.compile(r"^;;; (\S+)\s*$")


@dataclass(frozen=True)
class Program:
    name: str
    file: str  # file name inside tests/conformance/
    source: str


class ConformanceSetupError(Exception):
    """The program files or Guile's answers are not usable as a fixture."""


def load_programs(directory: Path = CONFORMANCE_DIR) -> list[Program]:
    """All programs of ``programs_*.scm`` in file order; names must be unique."""
    programs: list[Program] = []
    for path in sorted(directory.glob("programs_*.scm")):
        name: str | None = None
        lines: list[str] = []

        def flush() -> None:
            if name is not None:
                source = "\n".join(lines).strip() + "\n"
                if not source.strip():
                    raise ConformanceSetupError(f"{path.name}: program {name!r} is empty")
                programs.append(Program(name, path.name, source))

        for line in path.read_text().splitlines():
            match = HEADER.match(line)
            if match:
                flush()
                name, lines = match.group(1), []
            elif name is not None:
                lines.append(line)
        flush()
    seen: set[str] = set()
    for program in programs:
        if program.name in seen:
            raise ConformanceSetupError(f"duplicate program name {program.name!r}")
        seen.add(program.name)
    return programs


def guile_binary() -> str | None:
    return shutil.which("guile") or shutil.which("guile3.0")


def guile_version(guile: str) -> str:
    first = subprocess.run([guile, "--version"], capture_output=True, text=True, check=True).stdout
    return first.splitlines()[0].strip()


# What Guile may print for a data value: numbers, booleans, symbols, lists, dotted pairs.
# Anything else (#<unspecified>, #<procedure ...>, strings, rationals like 1/2) is rejected.
_UNSUPPORTED_OUTPUT = re.compile(r'#<|"|\d/\d|#\\')


def run_guile(program: Program, guile: str, timeout_s: float = 30.0) -> str:
    """Guile's `write` of the program's value, or ConformanceSetupError."""
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.scm"
        driver.write_text(GUILE_DRIVER)
        prog_file = Path(tmp) / "program.scm"
        prog_file.write_text(program.source)
        proc = subprocess.run(
            [guile, "--no-auto-compile", "-s", str(driver), str(prog_file)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if proc.returncode != 0:
        raise ConformanceSetupError(f"{program.name}: guile failed: {proc.stderr.strip()[-800:]}")
    output = proc.stdout.strip()
    if not output or _UNSUPPORTED_OUTPUT.search(output):
        raise ConformanceSetupError(f"{program.name}: value is not plain data: {output!r}")
    return output


def generate(programs: list[Program], guile: str) -> list[dict]:
    version = guile_version(guile)
    return [
        {"name": p.name, "file": p.file, "source": p.source, "expected": run_guile(p, guile), "guile": version}
        for p in programs
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture instead of writing it")
    args = parser.parse_args(argv)
    guile = guile_binary()
    if guile is None:
        print("guile not found: install it (apt-get install -y guile-3.0)", file=sys.stderr)
        return 2
    records = generate(load_programs(), guile)
    if args.check:
        old = {r["name"]: r for r in map(json.loads, FIXTURE.read_text().splitlines())}
        bad = [
            r["name"]
            for r in records
            if r["name"] not in old
            or (old[r["name"]]["source"], old[r["name"]]["expected"]) != (r["source"], r["expected"])
        ]
        bad += [name for name in old if name not in {r["name"] for r in records}]
        print(f"{len(records)} programs, {len(bad)} differ from the fixture: {bad}")
        return 1 if bad else 0
    FIXTURE.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"wrote {len(records)} expected values to {FIXTURE.relative_to(ROOT)} ({records[0]['guile']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
