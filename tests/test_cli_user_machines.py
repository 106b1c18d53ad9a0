"""The user's path on the command line: battery originals from download to a discovery run, dataset
options (typed, unknown names listed), `ndvm datasets` at 80 columns, and an LLM run that stops at
once on a wrong key (local servers on 127.0.0.1 only)."""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer

import pytest
from test_battery_sources import _Files, severson_files
from test_flows_support import FakeOpenAI

from ndvm.cli import main


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A folder of generated Severson batch files served on 127.0.0.1 under their original names."""
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "mirror"
    root.mkdir()
    severson_files(root)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    srv.root, srv.requests, srv.cut, srv.ranges = root, [], {}, True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_datasets_list_fits_80_columns_and_show_names_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    for name in ("battery-nasa", "battery-severson", "enso", "enso-nino34", "battery-synthetic"):
        assert name in out
    assert main(["datasets", "show", "battery-severson"]) == 0
    out = capsys.readouterr().out
    for text in (
        "batches = '1,2,3'",
        "test_cells = 'b3*'",
        "train_fraction",
        "CC BY 4.0",
        "doi:10.1038",
        "ndvm datasets fetch severson",
    ):
        assert text in " ".join(out.split()), text
    assert main(["datasets", "show", "enso"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "size 732 rows" in out and "train 372" in out and "validation 120" in out and "test 240" in out
    assert main(["datasets", "show", "no-such-set"]) == 1
    assert "unknown dataset 'no-such-set'" in capsys.readouterr().err


def test_unknown_dataset_option_is_an_error_listing_the_valid_ones(capsys):
    started = time.monotonic()
    assert main(["discover", "--task", "battery-severson", "--option", "trian_fraction=0.6"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "has no option trian_fraction; valid options: batches, test_cells, cells, refresh, mirror" in err
    assert main(["discover", "--task", "enso", "--option", "train_end_year=soon"]) == 1
    assert "expected an integer, got 'soon'" in capsys.readouterr().err
    assert main(["discover", "--data", "x.csv", "--refresh"]) == 1
    assert "registered datasets" in capsys.readouterr().err
    assert time.monotonic() - started < 30, "checked before any run starts"


def test_fetch_names_what_it_can_fetch(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NDVM_OFFLINE", "1")
    assert main(["datasets", "fetch", "enso"]) == 1
    assert "nothing to fetch for 'enso'; fetchable: nasa-pcoe, severson, battery-nasa" in capsys.readouterr().err
    assert main(["datasets", "fetch", "enso-nino34"]) == 1  # its loader downloads; offline: says where to put it
    err = " ".join(capsys.readouterr().err.split())
    assert "downloads are disabled (NDVM_OFFLINE is set)" in err and "psl.noaa.gov" in err


@pytest.mark.timeout(400)
def test_battery_from_download_to_a_discovery_run(mirror, prefect_api, tmp_path, capsys):
    assert main(["datasets", "fetch", "severson", "--mirror", mirror]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "converted:" in out and "17 cells" in out and "ndvm discover --task battery-severson" in out
    assert main(["datasets", "show", "battery-severson"]) == 0  # now with sizes and splits
    out = " ".join(capsys.readouterr().out.split())
    assert "cached: 3 of 3 files" in out and "cell_id groups" in out
    assert "test_fit" in out and "train" in out and "validation" in out
    folder = tmp_path / "runs"
    code = main(
        [
            "discover",
            "--task",
            "battery-severson",
            "--option",
            "batches=1,3",
            "--option",
            "test_cells=b3*",
            "--option",
            f"mirror={mirror}",
            "--minutes",
            "1",
            "--max-candidates",
            "12",
            "--steps",
            "20",
            "--restarts",
            "2",
            "--batch-size",
            "6",
            "--top-k",
            "1",
            "--test-top-k",
            "1",
            "--run-id",
            "bat-1",
            "--folder",
            str(folder),
        ]
    )
    assert code == 0, capsys.readouterr().err
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        status = store.run_status("bat-1")
        # 12 proposals and the task's eight reference programs (the shared-parameter laws are models
        # of their own, not semantic duplicates of their per-cell twins: storage/fingerprint.py)
        assert status.new == 12 + 8 and status.calibrated >= 6 + 8
        problem = status.config["problem"]
        assert problem["dataset"] == "battery-severson"
        assert problem["options"] == {"batches": "1,3", "test_cells": "b3*", "mirror": mirror}


class _WrongKeyServer(FakeOpenAI):
    """Answers every request 401, as a provider does for a wrong API key."""

    def answer(self, handler, body, first):
        payload = json.dumps(
            {
                "error": {
                    "message": "Incorrect API key provided: sk-wr***ng",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        ).encode()
        handler.send_response(401)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


@pytest.mark.timeout(300)
def test_llm_run_with_a_wrong_key_stops_at_once(prefect_api, tmp_path, monkeypatch, capsys):
    secret = "sk-wrong-but-secret-123456"
    monkeypatch.setenv("NDVM_TEST_LLM_KEY", secret)
    fake = _WrongKeyServer(delay=0.05)
    try:
        started = time.monotonic()
        code = main(
            [
                "discover",
                "--model",
                "openai/fake-model",
                "--api-base",
                fake.api_base,
                "--api-key-env",
                "NDVM_TEST_LLM_KEY",
                "--minutes",
                "5",
                "--max-cost",
                "5",
                "--concurrency",
                "4",
                "--run-id",
                "wrong-key",
                "--folder",
                str(tmp_path),
            ]
        )
        seconds = time.monotonic() - started
    finally:
        fake.close()
    captured = capsys.readouterr()
    err = " ".join(captured.err.split())
    assert code == 1
    assert "authentication failed" in err and "Incorrect API key provided" in err
    assert secret not in captured.err and secret not in captured.out
    # the cost limit cannot be enforced for an unpriced model: said at the start
    assert "litellm has no price for 'openai/fake-model'" in err and "--input-price" in err
    assert len(fake.requests) <= 8, f"{len(fake.requests)} requests after the first 401"
    # Prefect's and the worker's start-up take most of it; a run that went on would take 5 minutes
    assert seconds < 150, "the run stops instead of running out its five minutes"
    assert all("temperature" not in body for body in fake.requests), "the provider's default temperature"
