"""What the pipeline commands print on the terminal: the live progress panel of ``ndvm
discover``, the end-of-run summary (leaderboard, report card, counters, where to look next)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def stdout_console():
    from rich.console import Console

    return Console(stderr=False)


def ui_command(folder: str, port: int = 5000) -> str:
    return f"ndvm ui --folder {folder}" + (f" --port {port}" if port != 5000 else "")


# ---------------------------------------------------------------------------- ndvm discover
class ProgressDisplay:
    """A rich live panel: proposals, calibrations, best score, busy fractions, time left."""

    def __init__(self, console, minutes: float | None):
        from rich.live import Live

        self.console = console
        self.minutes = minutes
        self.live = Live(self._render(None), console=console, refresh_per_second=2, transient=False)

    def _render(self, p) -> Any:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        if p is None:
            table.add_row("[bold]ndvm discover[/]", "starting (Prefect, dataset, store, MLflow) ...")
            return table
        limit = f" / {self.minutes:g} min" if self.minutes else ""
        best = "-" if p.best_score is None else f"{p.best_score:.5g} ({p.best_hash})"
        cost = "" if p.cost_usd is None else f"   cost ${p.cost_usd:.4f}"
        table.add_row("[bold]run[/]", f"{p.run_id}   {p.phase}   {p.elapsed / 60:.1f} min{limit}{cost}")
        table.add_row(
            "[bold]proposals[/]", f"{p.proposed} received: {p.new} new, {p.duplicates} duplicates, {p.invalid} invalid"
        )
        reused = f" ({p.reused} reused from earlier runs)" if getattr(p, "reused", 0) else ""
        table.add_row("[bold]calibrations[/]", f"{p.calibrated} ok, {p.failed} failed, {p.queued} queued{reused}")
        table.add_row(f"[bold]best {p.metric}[/]", best)
        table.add_row(
            "[bold]busy[/]", f"proposal {100 * p.proposal_busy:.0f}%   calibration {100 * p.calibration_busy:.0f}%"
        )
        return table

    def update(self, progress) -> None:
        self.live.update(self._render(progress))


def print_run_summary(console, report: dict[str, Any], folder: str) -> None:
    from storage.leaderboard import show_leaderboard

    console.print()
    show_leaderboard(Path(report["store_path"]), run_id=report["run_id"], k=10, console=console)
    print_report_card(console, report, folder)
    best = "-" if report["best_score"] is None else f"{report['best_score']:.5g}"
    console.print(
        f"[bold]{report['run_id']}[/] {report['status']} after {report['elapsed_seconds'] / 60:.1f} min "
        f"({report['stop_reason']}): {report['proposed']} proposed, {report['new']} new, "
        f"{report['duplicates']} duplicates, {report['invalid']} invalid, {report['calibrated']} calibrated, "
        f"{report['failed']} failed, {report['pending']} pending; best validation {report['metric']} {best}"
    )
    console.print(library_line(report))
    if report.get("reference_programs"):
        console.print(references_line(report))
    console.print(
        f"busy fractions: proposal {100 * report['proposal_busy']:.0f}% "
        f"({report['proposal_requests']} requests), calibration {100 * report['calibration_busy']:.0f}% "
        f"({report['calibration_batches']} batches, {report['runner']})"
    )
    if report.get("cost_usd") is not None:
        tokens = report.get("tokens")
        used = "" if not tokens else f", {tokens[0]} prompt + {tokens[1]} completion tokens"
        earlier = report.get("earlier_cost_usd") or 0.0
        before = f"; ${earlier:.4f} of it before this resume" if earlier else ""
        console.print(f"LLM cost of the run: ${report['cost_usd']:.4f}{used}{before}")
    from flows.feedback import llm_summary_line

    llm_line = llm_summary_line(report.get("llm"))  # tokens, cached tokens, cost per new (flows/feedback.py)
    if llm_line:
        console.print(llm_line)
    console.print(
        f"store: {report['store_path']}   MLflow: {report['tracking_uri']} "
        f"({report['logged_entries']} leaderboard entries logged as nested runs)"
    )
    faults = {
        "crashed (killed their worker, then again alone)": report.get("crashed", 0),
        "timed out (--candidate-seconds)": report.get("timeout", 0),
        "retried alone after their batch failed": report.get("retried_alone", 0),
        "worker processes replaced": report.get("workers_replaced", 0),
        "cancelled at the hard deadline (pending)": report.get("cancelled_at_deadline", 0),
        "proposals not stored (store errors, see the log)": report.get("store_errors", 0),
    }
    if any(faults.values()):
        console.print("faults survived: " + ", ".join(f"{n} {what}" for what, n in faults.items() if n))
    if report.get("mlflow_error"):
        console.print(
            f"[yellow]MLflow logging incomplete[/] ({report['mlflow_error'][:200]}); the results are in "
            f"the store. Log them later:  ndvm log --run {report['run_id']} --folder {folder}"
        )
    if report.get("champion"):
        console.print(f"model registry: {report['champion']}")
    page = "http://127.0.0.1:5000/"
    if report.get("mlflow_experiment_id"):  # the experiment's leaderboard view, not MLflow's GenAI start page
        from storage.tracking import leaderboard_path

        page += leaderboard_path(report["mlflow_experiment_id"])
    console.print(f"browse the results:  [bold]{ui_command(folder)}[/]   (then open {page})")
    if report["pending"]:
        console.print(f"continue this run:  ndvm discover --resume {report['run_id']} --folder {folder}")
    for failure in report.get("end_failures") or []:  # last: what the user must not miss
        console.print(
            f"[bold red]end of run: {failure['step']} failed[/] ({failure['message']}); the candidates are "
            f"stored. Once the cause is fixed:  {failure['retry']}",
            soft_wrap=True,
        )


def run_exit_code(report: dict[str, Any]) -> int:
    """``ndvm discover``'s exit code: the first failed end-of-run step's failure class, else 0."""
    failures = report.get("end_failures") or []
    return int(failures[0]["exit_code"]) if failures else 0


def library_line(report: dict[str, Any]) -> str:
    """What the run took from earlier runs on the same data, and its seed (storage/library.py)."""
    seeds = len(report.get("library_seeds") or [])
    return (
        f"library: reused {report.get('reused', 0)} evaluations from earlier runs, started from {seeds} of "
        f"their best programs (dataset fingerprint {report.get('dataset_fingerprint')}); seed {report.get('seed')}"
    )


def references_line(report: dict[str, Any]) -> str:
    """The task's reference programs the run started from (origin ``reference``) and their
    validation scores: the programs the run's best is measured against."""
    parts = []
    for ref in report["reference_programs"]:
        result = f"{ref['score']:.5g}" if ref["score"] is not None else (ref["status"] or "pending")
        parts.append(f"{ref['name']} {result}")
    return (
        f"references: started from {len(parts)} reference programs of the task (validation "
        f"{report['metric']}): " + "; ".join(parts)
    )


def print_report_card(console, report: dict[str, Any], folder: str) -> None:
    """The report card written at the end of the run (flows/report.py), as Markdown."""
    from rich.markdown import Markdown

    path = Path(folder) / "reports" / report["run_id"] / "report.md"
    if path.is_file():
        console.print(Markdown(path.read_text()))
        console.print(f"report card: {path} (and report.json; `ndvm report --run {report['run_id']}`)")
