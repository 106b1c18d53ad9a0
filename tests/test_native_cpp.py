"""The C++ unit tests of the runtime (native/tests/test_main.cc), built with CMake and run by ctest.

The build folder build/ctest is reused between runs (CMake and Ninja rebuild only what changed), so
after the first build this costs a few seconds. Skipped, with the reason, only when cmake or a C++
compiler is missing; a failing build or a failing unit test fails this test with the log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "ctest"
BUILD_TIMEOUT_S = 900  # a cold build of the runtime on 2 loaded cores


def _tool_missing() -> str | None:
    if shutil.which("cmake") is None:
        return "cmake is not installed"
    if shutil.which("ctest") is None:
        return "ctest is not installed"
    if not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "c++", "g++", "clang++") if c):
        return "no C++ compiler"
    return None


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built() -> Path:
    missing = _tool_missing()
    if missing:
        pytest.skip(missing)
    configure = ["cmake", "-S", str(ROOT / "native"), "-B", str(BUILD), "-DNDVM_TESTS=ON", "-DCMAKE_BUILD_TYPE=Release"]
    if shutil.which("ninja") and not (BUILD / "Makefile").exists():
        configure += ["-G", "Ninja"]
    proc = _run(configure, BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"cmake configure failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    proc = _run(["cmake", "--build", str(BUILD), "--target", "ndvm_tests", "-j", "2"], BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return BUILD


def test_cpp_unit_tests_pass_under_ctest(built):
    proc = _run(["ctest", "--test-dir", str(built), "--output-on-failure", "--timeout", "300"], 600)
    assert proc.returncode == 0, f"ctest failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert "100% tests passed" in proc.stdout, proc.stdout[-3000:]
