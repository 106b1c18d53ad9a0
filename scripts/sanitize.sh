#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the NDVM runtime, and the tests under it.
#
#   scripts/sanitize.sh            build into build/sanitize, run the C++ unit tests, then the Python smoke
#   scripts/sanitize.sh --cpp-only only the C++ unit tests
#   SANITIZE_PYTEST="tests/test_conformance.py" scripts/sanitize.sh   choose the Python test files
#
# What runs under the sanitizers:
#   1. native/tests/test_main.cc (ndvm_tests), built with -DNDVM_SANITIZE=ON -DNDVM_TESTS=ON, with
#      leak detection on and every UBSan finding fatal (-fno-sanitize-recover=undefined).
#   2. The Python extension ndvm._native built from the same sources with the same flags (into
#      build/sanitize), loaded into the project's Python with the compiler's libasan preloaded, and
#      the pytest files in SANITIZE_PYTEST run against it: the conformance suite, the differential
#      checks (generated programs: values, gradients, lanes, threaded calibration), the error tests
#      and the nasty-input tests. Leak detection is off there (CPython itself does not free
#      everything at exit); ASan errors and UBSan findings abort the run.
# Exit status: non-zero on any build failure, test failure or sanitizer report.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build/sanitize"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
JOBS="${JOBS:-2}"
SANITIZE_PYTEST="${SANITIZE_PYTEST:-tests/test_conformance.py tests/test_differential.py tests/test_replay.py tests/test_kernels.py tests/test_errors.py tests/test_limits.py}"

cmake_args=(-S "$ROOT/native" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
            -DNDVM_SANITIZE=ON -DNDVM_TESTS=ON
            "-DCMAKE_CXX_FLAGS=-fno-sanitize-recover=undefined")
want_python=1
if [[ "${1:-}" == "--cpp-only" ]]; then want_python=0; fi
if [[ $want_python == 1 ]]; then
  pybind_dir="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')"
  cmake_args+=(-DSKBUILD=ON "-Dpybind11_DIR=$pybind_dir" "-DPython_EXECUTABLE=$PY" "-DPYTHON_EXECUTABLE=$PY")
fi

echo "sanitize.sh: configuring $BUILD"
cmake "${cmake_args[@]}" >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
echo "sanitize.sh: building (ASan + UBSan)"
cmake --build "$BUILD" -j "$JOBS"

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

echo "sanitize.sh: C++ unit tests under ASan + UBSan"
cpp_status=0
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1" "$BUILD/ndvm_tests" || cpp_status=$?
if [[ $cpp_status == 0 ]]; then echo "sanitize.sh: C++ unit tests clean"; else echo "sanitize.sh: C++ unit tests FAILED (exit $cpp_status)" >&2; fi

if [[ $want_python == 0 ]]; then exit "$cpp_status"; fi

# The project's ndvm package with the sanitized extension: sitecustomize (on PYTHONPATH) drops the
# editable install's redirecting finder and serves ndvm._native from build/sanitize.
PKG="$BUILD/python"
rm -rf "$PKG"
mkdir -p "$PKG"
native_so="$(find "$BUILD" -maxdepth 1 -name '_native*.so' | head -1)"
[[ -n "$native_so" ]] || { echo "sanitize.sh: the sanitized _native module was not built" >&2; exit 1; }
cat >"$PKG/sitecustomize.py" <<PYEOF
import importlib.util
import sys

class SanitizedNative:
    """Finds ndvm._native in the sanitizer build instead of the installed extension."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname == "ndvm._native":
            return importlib.util.spec_from_file_location(fullname, "$native_so")
        return None

sys.meta_path[:] = [f for f in sys.meta_path if "ScikitBuild" not in type(f).__name__]
sys.meta_path.insert(0, SanitizedNative)
PYEOF

# libstdc++ is preloaded with libasan: Python does not link it, and ASan's __cxa_throw interceptor
# must find the real one when it starts.
asan_rt="$(${CXX:-c++} -print-file-name=libasan.so)"
stdcxx="$(${CXX:-c++} -print-file-name=libstdc++.so.6)"
[[ -f "$asan_rt" && -f "$stdcxx" ]] || { echo "sanitize.sh: libasan.so or libstdc++.so.6 not found ($asan_rt, $stdcxx)" >&2; exit 1; }
asan_rt="$asan_rt $stdcxx"
check_import="import ndvm, ndvm._native as n; assert n.__file__.startswith('$BUILD'), n.__file__; print('sanitized module:', n.__file__)"
# Reports go to files (pytest captures the test process's stderr, and an abort would lose them).
rm -f "$BUILD"/asan-report.*
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$BUILD/asan-report"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$BUILD/asan-report"
LD_PRELOAD="$asan_rt" PYTHONPATH="$PKG:$ROOT" "$PY" -c "$check_import"

echo "sanitize.sh: Python tests against the sanitized module: $SANITIZE_PYTEST"
cd "$ROOT"
# shellcheck disable=SC2086
py_status=0
# Left out under the sanitizers, because they measure what ASan itself changes: peak RSS bounds
# (shadow memory), and recursion 20,000+ calls deep (ASan frames are larger and the evaluation stack
# is capped at 48 MiB in ASan builds, since ASan cannot unwind more than 64 MiB on a throw).
SANITIZE_DESELECT="${SANITIZE_DESELECT:-not (non-tail-depth or non-tail-build-list or raising_the_depth_limit or memory_budget_bounds_real_memory or LimitError-9)}"
LD_PRELOAD="$asan_rt" PYTHONPATH="$PKG:$ROOT" NDVM_SANITIZED=1 "$PY" -m pytest -q -p no:cacheprovider --capture=sys -k "$SANITIZE_DESELECT" $SANITIZE_PYTEST || py_status=$?
for report in "$BUILD"/asan-report.*; do
  [[ -e "$report" ]] || continue
  # (a report file holding only the makecontext/swapcontext warning is not a finding)
  grep -qE 'ERROR: AddressSanitizer|runtime error|CHECK failed|ERROR: LeakSanitizer' "$report" || continue
  echo "sanitize.sh: sanitizer report $report:" >&2
  grep -v '^    #[2-9][0-9] ' "$report" | head -60 >&2
  py_status=${py_status/#0/1}
done
if [[ $cpp_status != 0 || $py_status != 0 ]]; then
  echo "sanitize.sh: FAILED (C++ exit $cpp_status, Python exit $py_status)" >&2
  exit 1
fi
echo "sanitize.sh: clean"
