"""The offline environment has one source, flows/offline.env: the Makefile, the Python side, the
Dockerfile's ENV and README's list all say the same."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flows.environment import (
    OFFLINE_ENV,
    OFFLINE_ENV_FILE,
    OfflineEnvError,
    apply_offline_env,
    read_offline_env,
    with_offline_env,
)

REPO = Path(__file__).resolve().parents[1]

# Variables the Dockerfile's runtime ENV sets that are not offline switches (paths, Python, plots).
DOCKER_OTHER_ENV = {"PATH", "PYTHONUNBUFFERED", "PREFECT_HOME", "MPLBACKEND"}


def test_the_file_lists_the_switches():
    assert OFFLINE_ENV_FILE == REPO / "flows" / "offline.env"
    assert OFFLINE_ENV["DO_NOT_TRACK"] == "true"
    assert OFFLINE_ENV["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert OFFLINE_ENV["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert OFFLINE_ENV["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert len(OFFLINE_ENV) == 8


def test_a_malformed_line_is_named(tmp_path):
    bad = tmp_path / "offline.env"
    bad.write_text("# comment\nDO_NOT_TRACK=true\nexport FOO = bar\n")
    with pytest.raises(OfflineEnvError, match=r"offline\.env:3: expected KEY=value"):
        read_offline_env(bad)
    bad.write_text("A=1\n\nA=2\n")
    with pytest.raises(OfflineEnvError, match=r"offline\.env:3: A is set twice"):
        read_offline_env(bad)


def test_a_users_choice_wins():
    environ = {"DO_NOT_TRACK": "false", "LANG": "C"}
    apply_offline_env(environ)
    assert environ["DO_NOT_TRACK"] == "false"
    assert environ["MLFLOW_DISABLE_TELEMETRY"] == "true"
    assert {key: environ[key] for key in OFFLINE_ENV if key != "DO_NOT_TRACK"} == {
        key: value for key, value in OFFLINE_ENV.items() if key != "DO_NOT_TRACK"
    }
    child = with_offline_env({"LITELLM_LOCAL_MODEL_COST_MAP": "False"})
    assert child["LITELLM_LOCAL_MODEL_COST_MAP"] == "False"
    assert child["DASK_LOGGING__DISTRIBUTED"] == "warning"


def _clean_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {key: os.environ[key] for key in keep if key in os.environ}


@pytest.mark.parametrize(
    "call",
    [
        "from flows.environment import quiet_environment; quiet_environment()",
        "from pipeline_bench.discovery import _quiet; _quiet()",
    ],
)
def test_the_pipeline_commands_and_the_benchmark_set_them(call):
    script = f"import json, os; {call}; print(json.dumps(dict(os.environ)))"
    env = {**_clean_env(), "PYTHONPATH": str(REPO), "DASK_LOGGING__DISTRIBUTED": "debug"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["DASK_LOGGING__DISTRIBUTED"] == "debug"  # the caller's value is kept
    assert {key: seen[key] for key in OFFLINE_ENV if key != "DASK_LOGGING__DISTRIBUTED"} == {
        key: value for key, value in OFFLINE_ENV.items() if key != "DASK_LOGGING__DISTRIBUTED"
    }


def test_the_makefile_exports_the_file():
    if shutil.which("make") is None:
        pytest.skip("make is not on PATH")
    probe = "include Makefile\nprint-offline-env:\n\t@env\n"
    out = subprocess.run(
        ["make", "-s", "-f", "-", "print-offline-env"],
        input=probe,
        env=_clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    exported = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert {key: exported.get(key) for key in OFFLINE_ENV} == dict(OFFLINE_ENV)
    assert exported["PREFECT_HOME"] == str(REPO / "runs" / "prefect")


def _dockerfile_runtime_env() -> dict[str, str]:
    text = (REPO / "Dockerfile").read_text()
    runtime = text[text.index("AS runtime") :]
    match = re.search(r"^ENV ((?:.*\\\n)*.*)$", runtime, re.MULTILINE)
    assert match, "the Dockerfile's runtime stage has no ENV instruction"
    pairs = match.group(1).replace("\\\n", " ").split()
    return dict(pair.split("=", 1) for pair in pairs)


def test_the_dockerfile_sets_the_same_list():
    docker = _dockerfile_runtime_env()
    assert {key: value for key, value in docker.items() if key not in DOCKER_OTHER_ENV} == dict(OFFLINE_ENV)
    assert DOCKER_OTHER_ENV <= docker.keys()


def test_the_readme_shows_the_same_list():
    text = (REPO / "README.md").read_text()
    section = text[text.index("**Offline and quiet.**") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    shown = dict(pair.split("=", 1) for pair in block.split())
    assert shown == dict(OFFLINE_ENV)
