"""The MLflow UI over a run folder, in a real browser: ``ndvm ui`` serves the store that a
discovery run wrote, and headless Chromium (Debian package ``chromium``) renders the experiment's
runs page and the parent run's page; the DOM (``--dump-dom``) must show the run names and the
leaderboard metric.

Chromium is installed with apt when missing; the test is skipped only when that is impossible.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest

from test_flows_support import enso_run, free_port, prefect_api, start_ui, stop_ui  # noqa: F401  (fixtures)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("chromium is not installed and cannot be installed here (no apt-get or not root)")
    result = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True,
                            timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    found = shutil.which("chromium")
    if result.returncode != 0 or not found:
        pytest.skip(f"chromium could not be installed with apt: {result.stderr[-500:]}")
    return found


def page_text(browser: str, url: str) -> str:
    """The rendered page as plain text (scripts and styles dropped, tags stripped)."""
    with tempfile.TemporaryDirectory(prefix="ndvm-chromium-") as profile:
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--window-size=1600,1000",
             "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = re.sub(r"<script.*?</script>|<style.*?</style>", " ", result.stdout, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", dom)).split())


def test_mlflow_ui_shows_runs_and_leaderboard_metric(enso_run, prefect_api):
    browser = chromium()
    report, folder = enso_run
    experiment, parent = report["mlflow_experiment_id"], report["mlflow_run_id"]
    port = free_port()
    proc = start_ui(folder, port, prefect_api)
    try:
        base = f"http://127.0.0.1:{port}/#/experiments/{experiment}"
        # The runs page, filtered to this run's leaderboard entries (nested runs), sorted by the metric.
        query = urllib.parse.urlencode({"searchFilter": f"tags.`mlflow.parentRunId` = '{parent}'",
                                        "orderByKey": "metrics.`heldout_mean_rmse`", "orderByAsc": "true"},
                                       quote_via=urllib.parse.quote)
        runs_page = page_text(browser, f"{base}/runs?{query}")
        assert "Run Name" in runs_page, runs_page[:2000]
        assert f"{report['logged_entries']} matching runs" in runs_page
        assert report["best_hash"] in runs_page  # entries are named "#<rank> <hash>"
        assert re.search(r"#\d+ " + report["best_hash"], runs_page)

        # The parent run: its name, the leaderboard metric and the nested runs' names.
        run_page = page_text(browser, f"{base}/runs/{parent}")
        assert "enso-e2e" in run_page, run_page[:2000]
        assert "best_heldout_mean_rmse" in run_page
        assert f"{report['best_score']:.6f}"[:7] in run_page  # its value, as the UI prints it
        assert "Child runs" in run_page and report["best_hash"] in run_page
    finally:
        stop_ui(proc)
