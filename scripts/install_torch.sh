#!/usr/bin/env bash
# Install torch's CPU build into the virtual environment of PYTHON (argument 1).
#
# On Linux the default index (PyPI) serves the CUDA build of torch, several GB with its NVIDIA
# libraries; the PyTorch CPU wheel index serves the ~200 MB CPU build, as the Dockerfile uses.
# When that index cannot be reached within a few seconds (a network that allows only PyPI, a
# proxy), the default index is used instead, with a message saying so. Elsewhere (macOS,
# Windows) the default index already serves the CPU build.
#
#   TORCH_SPEC   the requirement (default torch==2.13.0, the pin of pyproject.toml)
#   TORCH_INDEX  the CPU wheel index (default https://download.pytorch.org/whl/cpu)
#   TORCH_PROBE_SECONDS  how long the reachability check waits (default 5)
set -euo pipefail
PY=${1:?usage: scripts/install_torch.sh PYTHON}
SPEC=${TORCH_SPEC:-torch==2.13.0}
INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
PROBE=${TORCH_PROBE_SECONDS:-5}

if "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('torch') == '${SPEC#torch==}' or m.version('torch').startswith('${SPEC#torch==}+') else 1)" 2>/dev/null; then
    echo "torch: $("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))') already installed"
    exit 0
fi

if [ "$(uname -s)" = "Linux" ]; then
    # One short request decides: pip's own retries against an unreachable index take minutes.
    if "$PY" - "$INDEX" "$PROBE" <<'PYEOF'
import sys, urllib.request
index, seconds = sys.argv[1].rstrip("/"), float(sys.argv[2])
try:
    urllib.request.urlopen(urllib.request.Request(f"{index}/torch/", method="HEAD"), timeout=seconds).close()
except Exception as exc:
    print(f"  ({type(exc).__name__}: {exc})", file=sys.stderr)
    sys.exit(1)
PYEOF
    then
        echo "torch: CPU build from $INDEX"
        exec "$PY" -m pip install -q --index-url "$INDEX" "$SPEC"
    fi
    echo "WARNING: the PyTorch CPU wheel index ($INDEX) cannot be reached; installing $SPEC from the" >&2
    echo "         default index instead. On Linux that can be the CUDA build (several GB). To get the CPU" >&2
    echo "         build, make $INDEX reachable, or set TORCH_INDEX to a mirror of it, and run make again." >&2
fi
exec "$PY" -m pip install -q "$SPEC"
