"""Every Python block of README.md runs as written (issue 30, part 6), so the examples cannot rot.

Each block runs in a fresh interpreter in an empty folder. A block introduced as "continuing the
example above" runs after the block before it, in one script. The model-loading blocks need what
they name: the ENSO champion's block runs in a folder whose ``runs/`` is a real discovery run's
(the session's ``enso_run``, as after ``make run``); the battery block needs a battery-severson run
on the Severson data (3 GB download), which a test session does not make, and says so."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)
CONTINUES = "continuing the example above"


def readme_scripts() -> list[tuple[int, str]]:
    """(line of the first block, script) for each runnable example: a block that continues the
    one above is appended to it."""
    text = README.read_text()
    scripts: list[tuple[int, str]] = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        code = textwrap.dedent(match.group("code"))
        before = text[: match.start()].rstrip().rsplit("\n\n", 1)[-1]
        if scripts and CONTINUES in " ".join(before.split()):
            scripts[-1] = (scripts[-1][0], scripts[-1][1] + "\n" + code)
        else:
            scripts.append((line, code))
    return scripts


SCRIPTS = readme_scripts()


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_the_readme_has_the_examples_it_should():
    assert len(SCRIPTS) >= 3
    assert any("ndvm.torch" in code and "ndvm.compile" in code for _, code in SCRIPTS)  # torch joined to its setup
    assert any("ndvm-enso-forecast@champion" in code for _, code in SCRIPTS)


def _runnable(line: int, code: str):
    """A block that runs a discovery (minutes on two cores) is heavy: make test-heavy runs it."""
    return pytest.param(line, code, marks=[pytest.mark.heavy] if "discover(" in code else [])


@pytest.mark.parametrize(
    "line,code", [_runnable(*s) for s in SCRIPTS if "models:/" not in s[1]], ids=lambda v: str(v)[:12]
)
def test_readme_block_runs(line, code, tmp_path):
    out = run(code, tmp_path)
    assert out.returncode == 0, f"README.md line {line}:\n{out.stderr[-3000:]}"


def test_readme_enso_champion_block_forecasts(enso_run, tmp_path):
    _, folder = enso_run
    [(line, code)] = [s for s in SCRIPTS if "ndvm-enso-forecast@champion" in s[1]]
    (tmp_path / "runs").symlink_to(folder, target_is_directory=True)
    out = run(code, tmp_path)
    assert out.returncode == 0, f"README.md line {line}:\n{out.stderr[-3000:]}"
    rows = [r.split() for r in out.stdout.splitlines() if re.match(r"^\s*\d+\s+\d+\s+-?\d", r)]
    # leads 1..12 from the whole history, then 1..3 from a hand-typed one (int months), one forecast each
    assert [int(r[1]) for r in rows] == [*range(1, 13), 1, 2, 3], out.stdout


@pytest.mark.parametrize("line,code", SCRIPTS, ids=lambda v: str(v)[:12])
def test_readme_block_names_everything_it_uses(line, code, tmp_path):
    """ruff's undefined-name check on every script, the ones that need a run included: no
    fragment that stops at `NameError: y`."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.is_file():
        pytest.skip(f"ruff is not installed beside {sys.executable} (make venv installs it)")
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(code)
    out = subprocess.run(
        [str(ruff), "check", "--no-cache", "--isolated", "--select", "F821,F822,F823", str(script)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"README.md line {line}:\n{out.stdout}"


def test_readme_battery_block(tmp_path):
    blocks = [s for s in SCRIPTS if "ndvm-battery-severson-curve@champion" in s[1]]
    assert blocks
    pytest.skip(
        "README's battery block loads the champion of a battery-severson run (`ndvm datasets fetch severson`, "
        "3 GB, then `ndvm discover --task battery-severson`); a test session makes no such run"
    )
