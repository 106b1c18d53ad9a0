"""The report card as text: Markdown (what ``ndvm report`` prints and ``report.md`` holds, and the
progress of a run still running), JSON (``report.json``), and both written under
``reports/<run>/``; the ``formula.md`` of a logged entry."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from flows.report_tests import format_number as _num
from flows.report_tests import paired_test_of_report
from storage.selection import champion_of_run


def formula_markdown(digest: str, formula: Any, source: str) -> str:
    """``formula.md``: the formula as text, one definition per line; its LaTeX; the program.

    MLflow's Markdown preview shows a ``$$`` block as raw source on one wrapped line and a long
    code line behind a scroll bar (seen in the UI at 1600 px), so the text formula is cut at its
    ``;`` and the LaTeX is a code block (rendered: formula.png; source: formula.tex)."""
    lines = [f"# Formula of `{digest}`", ""]
    if formula.ok:
        definitions = [part.strip() for part in formula.text.split(";") if part.strip()]
        lines += ["```text", *definitions, "```", "", "LaTeX (also `formula.tex`):", ""]
        lines += ["```latex", formula.latex, "```", ""]
    else:
        lines += [f"(no formula: {formula.reason})", ""]
    lines += ["Program:", "", "```scheme", source.strip(), "```", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- rendering
def report_markdown(report: dict[str, Any], max_groups: int = 12) -> str:
    """The report card as Markdown (what ``ndvm report`` prints and report.md holds)."""
    c = report["champion"]
    lines = [
        f"# Report card: {report['run_id']}",
        "",
        f"{report['dataset']} / {report['task']}; metric {report['metric']} (lower is better); "
        f"{report['counts']['calibrated']} candidates calibrated. Scores below are on the **{report['split']}** split "
        "(never seen by the search); the champion is chosen on validation alone (see Selection).",
        "",
        *([f"Data split: {report['data_split']}.", ""] if report.get("data_split") else []),
        "## Verdict",
        "",
        report["verdict"],
        "",
        *([report["verdict_detail"], ""] if report.get("verdict_detail") else []),
        *([report["best_model"], ""] if report.get("best_model") else []),
        "## Champion",
        "",
        f"`{c['hash']}`, complexity {c['complexity']}, validation {_num(c['validation_score'])}, "
        f"test {_num(c['test_score'])}",
        "",
    ]
    if c.get("validation_parts"):
        v = c["validation_parts"]
        lines += [
            f"Validation {report['metric']}: {_num(v['in_range'])} inside the training box, {_num(v['edge'])} "
            "at its edges (the edge block: training rows held out of fitting, so the score asks "
            "whether the model extrapolates).",
            "",
        ]
    if report.get("selection"):
        sel = report["selection"]
        lines += [f"Selection: {sel['reason']} ({sel['rule']}.)", ""]
    f = c["formula"]
    lines += [f"    {f['text']}", "", f"LaTeX: `{f['latex']}`", ""] if f["ok"] else [f"({f['reason']})", ""]
    lines += ["```scheme", c["source"].strip(), "```", ""]
    lines += _stderr_markdown(c["stderr"])
    lines += [
        "## Test scores",
        "",
        "| model | test " + report["metric"] + " |",
        "|---|--:|",
        f"| champion | {_num(c['test_score'])} |",
    ]
    for r in report["references"]:
        lines.append(f"| {r['name']} | {_num(r['test_score']) if not r['error'] else 'failed: ' + r['error']} |")
    lines.append("")
    kind = paired_test_of_report(report)
    if kind is not None:
        lines += kind.breakdown_markdown(report[kind.breakdown_key], max_groups=max_groups)
    if "paired_test" in report and kind is not None:
        t = report["paired_test"]
        lines += ["## Paired test against the best reference (" + report["best_reference"] + ")", "", t["test"], ""]
        lines += kind.paired_test_markdown(t)
        lines += [
            "Against every reference (overall):",
            "",
            "| reference | statistic | p (two-sided) | interval |",
            "|---|--:|--:|---|",
        ]
        lines += [kind.versus_row_markdown(row) for row in report["versus_each_reference"]]
        lines.append("")
    if report.get("validation_test_spearman"):
        s = report["validation_test_spearman"]
        lines += [f"Validation vs test (Spearman, {s['over']}, n = {s['n']}): rho = {_num(s['rho'], '.3f')}.", ""]
    lines += [
        "## Pareto front (complexity vs validation " + report["metric"] + ")",
        "",
        report["pareto_rule"],
        "",
        "| complexity | validation | score | | hash | formula |",
        "|--:|--:|--:|---|---|---|",
    ]
    for e in report["pareto_front"]:
        formula = e["formula"]["text"] if e["formula"]["ok"] else e["formula"]["reason"]
        lines.append(
            f"| {e['complexity']} | {_num(e['loss'])} | {_num(e['score'], '.3g')} | "
            f"{'**recommended**' if e['recommended'] else ''} | `{e['hash']}` | {formula.replace('|', '/')} |"
        )
    lines.append("")
    return "\n".join(lines)


def progress_markdown(store: Any, run_id: str, k: int = 5) -> str:
    """What ``ndvm report`` says of a run that is still running: its counters, the best entries on
    validation so far and the Pareto front with the champion so far (``storage.selection``). No
    test score: the test split is read once, when the run finishes (the report card is written then)."""
    from storage.formula import render
    from storage.parsimony import run_front

    status = store.run_status(run_id)
    lines = [
        f"# Run {run_id}: still {status.status}",
        "",
        f"{status.dataset} / {status.task}; metric {status.metric}. So far: {status.proposed} proposed, "
        f"{status.new} new, {status.calibrated} calibrated, {status.failed} failed, {status.pending} pending. "
        "The report card (champion against the references on the test split, with the paired test) is "
        f"written when the run finishes: `ndvm report --run {run_id}` then.",
        "",
        f"## Best so far on validation {status.metric}",
        "",
        f"| rank | validation {status.metric} | hash | formula |",
        "|--:|--:|---|---|",
    ]
    top = store.top(k, run_id=run_id)
    for row in top.iter_rows(named=True):
        values = {n: v for n, v in json.loads(row["parameters"] or "{}").items() if "/" not in n}
        f = render(row["source"], values)
        text = f.text if f.ok else " ".join(row["source"].split())
        lines.append(f"| {row['rank']} | {_num(row['score'])} | `{row['hash']}` | {text.replace('|', '/')} |")
    if top.is_empty():
        lines.append("| | | | (no calibrated candidate yet) |")
    lines.append("")
    if not status.higher_is_better:
        front = run_front(store, run_id)
        choice = champion_of_run(store, run_id)
        if front:
            lines += [
                f"## Pareto front so far (complexity vs validation {status.metric})",
                "",
                "| complexity | validation | | hash |",
                "|--:|--:|---|---|",
            ]
            lines += [
                f"| {e.complexity} | {_num(e.loss)} | "
                f"{'**champion so far**' if choice is not None and e.hash == choice.hash else ''} | `{e.hash}` |"
                for e in front
            ]
            lines.append("")
    return "\n".join(lines)


def _stderr_markdown(se: dict[str, Any]) -> list[str]:
    if "error" in se:
        return [f"Standard errors: not computed ({se['error']}).", ""]
    groups = list(se)
    if not groups:
        return []
    lines = []
    if len(groups) == 1:
        s = se[groups[0]]
        if "error" in s:
            return [f"Standard errors: not computed ({s['error']}).", ""]
        lines += ["| parameter | estimate | std. error | |", "|---|--:|--:|---|"]
        for name, est in s["estimates"].items():
            flag = "" if s["identifiable"][name] else "not identifiable"
            lines.append(f"| {name} | {_num(est)} | {_num(s['stderr'][name], '.3g')} | {flag} |")
        lines += [
            "",
            f"({s['method']}; condition number {_num(s['condition'], '.3g')}"
            + (f"; {s['note']}" if s["note"] else "")
            + ")",
            "",
        ]
        return lines
    # one fit per group: a summary per parameter
    ok = [s for s in se.values() if "error" not in s]
    if not ok:
        return ["Standard errors: not computed for any group.", ""]
    lines += [
        f"Standard errors per group ({len(ok)} of {len(groups)} groups computed): median estimate, "
        "median standard error, groups where the parameter is not identifiable.",
        "",
        "| parameter | median estimate | median std. error | not identifiable |",
        "|---|--:|--:|--:|",
    ]
    for name in ok[0]["estimates"]:
        est = [s["estimates"][name] for s in ok]
        errs = [s["stderr"][name] for s in ok if s["stderr"][name] is not None]
        bad = sum(not s["identifiable"][name] for s in ok)
        lines.append(f"| {name} | {_num(np.median(est))} | {_num(np.median(errs) if errs else None, '.3g')} | {bad} |")
    lines.append("")
    return lines


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def report_json(report: dict[str, Any]) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(report), indent=2, default=_json_default)


def write_report(report: dict[str, Any], folder: str | Path) -> tuple[Path, Path]:
    """report.md and report.json under ``folder/reports/<run>/``."""
    out = Path(folder) / "reports" / report["run_id"]
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    md.write_text(report_markdown(report))
    js.write_text(report_json(report))
    return md, js
