"""The documentation names only files that exist.

Every backticked repository path in README.md and docs/*.md (``flows/discover.py``,
``native/src/prims.h``, ``proposers/prompts/``), and every relative Markdown link, must point at
something in the working tree: a renamed or deleted file otherwise leaves the docs sending the
next engineer to nothing; a link's ``#anchor`` must name a heading of the page it links to.
Paths are written from the repository root; a span counts as a path when it has no spaces and
starts with one of the repository's top-level entries.

Forms the docs use and this test understands: ``file.py:name`` and ``file.py::test`` (the name is
looked up in the file), ``module.name`` written as ``flows/feedback.ResidualNotes`` (the module
``flows/feedback.py`` must define ``ResidualNotes``), globs (``tests/metacircular/*.scm``: at
least one match) and brace lists (``programs_{forms,control}.scm``: each one). Outputs under
the git-ignored folders (``build/``, ``native/build/``, a run's ``runs/``) are made by the tools,
not kept in the repository, and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Folders the tools fill, all git-ignored: `make build` (build/, native/build/) and a run's results
# (runs/: the store, MLflow, reports). What the docs name there is a product, absent from a clone.
BUILD_OUTPUTS = ("build/", "native/build/", "runs/", "mlruns/")

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def top_level_entries() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}


def backticked_paths(text: str, tops: set[str]) -> list[str]:
    """Inline code spans (outside fenced blocks) that are repository paths."""
    paths = []
    for match in INLINE_CODE.finditer(FENCE.sub("", text)):
        span = match.group(1).strip()
        head = span.split("/")[0]
        if " " not in span and head in tops and ("/" in span or "." in span):
            paths.append(span)
    return paths


def expand_braces(path: str) -> list[str]:
    match = BRACES.search(path)
    if not match:
        return [path]
    out = []
    for choice in match.group(1).split(","):
        out += expand_braces(path[: match.start()] + choice + path[match.end() :])
    return out


def defines(source: Path, name: str) -> bool:
    """Whether a Python file defines ``name`` at any level (def, class or assignment)."""
    pattern = rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]"
    return re.search(pattern, source.read_text(), re.M) is not None


def problem_with(path: str) -> str | None:
    """Why ``path`` (as written in the docs) points at nothing, or None when it exists."""
    if path.startswith(BUILD_OUTPUTS):
        return None
    for separator in ("::", ":"):  # tests/test_x.py::test_name, flows/problem.py:entry_extras
        if separator in path:
            path, name = path.split(separator, 1)
            file = ROOT / path
            if not file.is_file():
                return f"no file {path}"
            return None if defines(file, name.split("::")[-1]) else f"{path} defines no {name}"
    problems = []
    for one in expand_braces(path):
        if "*" in one:
            if not list(ROOT.glob(one)):
                problems.append(f"nothing matches {one}")
            continue
        if (ROOT / one).exists():
            continue
        # flows/feedback.ResidualNotes: a name in the module flows/feedback.py
        module, _, name = one.rpartition(".")
        module_file = ROOT / f"{module}.py"
        if module and IDENTIFIER.fullmatch(name) and module_file.is_file():
            if not defines(module_file, name):
                problems.append(f"{module}.py defines no {name}")
            continue
        problems.append(f"no such path {one}")
    return "; ".join(problems) or None


def test_the_checker_tells_existing_paths_from_missing_ones():
    assert problem_with("flows/discover.py") is None
    assert problem_with("proposers/prompts/") is None
    assert problem_with("flows/feedback.ResidualNotes") is None
    assert problem_with("tests/conformance/programs_{forms,control}.scm") is None
    assert problem_with("native/build/anything") is None
    assert problem_with("runs/candidates.duckdb") is None  # a run's output, absent from a clone
    assert problem_with("flows/discover.py:run_discovery") is None
    assert problem_with("flows/no_such_module.py") == "no such path flows/no_such_module.py"
    assert problem_with("flows/discover.py:no_such_function") == "flows/discover.py defines no no_such_function"
    assert problem_with("flows/feedback.NoSuchName") == "flows/feedback.py defines no NoSuchName"
    assert problem_with("tests/conformance/programs_{forms,nothing}.scm") == (
        "no such path tests/conformance/programs_nothing.scm"
    )
    assert problem_with("tests/metacircular/*.nothing") == "nothing matches tests/metacircular/*.nothing"
    assert {"adding-a-primitive", "warnings-and-format"} <= anchors(ROOT / "docs" / "runtime.md")
    assert backticked_paths(
        "see `flows/discover.py`, `ndvm run x`, `x/y` and\n```\n`storage/gone.py`\n```", {"flows", "storage"}
    ) == ["flows/discover.py"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_backticked_paths_exist(doc: Path):
    tops = top_level_entries()
    missing = [f"`{path}`: {why}" for path in backticked_paths(doc.read_text(), tops) if (why := problem_with(path))]
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_their_headings_exist(doc: Path):
    missing = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the same page
        path, _, anchor = target.partition("#")
        file = doc.parent / path
        if not file.exists():
            missing.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            missing.append(f"{target} (no such heading)")
    assert not missing, f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out
