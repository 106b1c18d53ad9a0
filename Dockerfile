# syntax=docker/dockerfile:1
# NDVM discovery in a container: the same `ndvm` command line as `make run` builds.
#
#   docker build -t ndvm-discovery .
#   docker run --rm -v "$PWD/runs:/work/runs" ndvm-discovery discover --minutes 30
#   docker run --rm -p 127.0.0.1:5000:5000 -v "$PWD/runs:/work/runs" ndvm-discovery ui --host 0.0.0.0
#
# Two stages, mirroring the Makefile: a build stage with the C++ toolchain creates the virtual
# environment (pip upgraded first, torch pinned to its CPU build, then the project, compiling
# native/ into ndvm._native); the runtime stage copies only that environment onto a slim image and
# runs as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build: compile the extension
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake ninja-build \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv && python -m pip install -q -U pip
# torch exactly, from the PyTorch CPU index: an open range would pull a multi-GB CUDA build.
RUN pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml README.md ./
COPY native/ native/
COPY ndvm/ ndvm/
COPY ndvm_bench/ ndvm_bench/
COPY proposers/ proposers/
COPY datasets/ datasets/
COPY storage/ storage/
COPY flows/ flows/
COPY pipeline_bench/ pipeline_bench/
# A regular (non-editable) install: the wheel carries the compiled extension and every package.
RUN pip install -q . && python -c "import ndvm, flows.cli; print('ndvm', ndvm.__version__, ndvm.build_info()['simd'])"

# ---------------------------------------------------------------- runtime: slim, non-root
FROM ${PYTHON_IMAGE} AS runtime
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin ndvm \
 && mkdir -p /work/runs && chown -R ndvm:ndvm /work
COPY --from=build /opt/venv /opt/venv
# Offline and quiet (telemetry and price-list look-ups off; README "Offline and quiet"). ENV cannot
# read a file: these lines repeat flows/offline.env, and tests/test_environment.py checks they match.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DO_NOT_TRACK=true \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120 \
    PREFECT_HOME=/work/runs/prefect \
    MLFLOW_DISABLE_TELEMETRY=true \
    MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false \
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    DASK_LOGGING__DISTRIBUTED=warning \
    MPLBACKEND=Agg
USER ndvm
WORKDIR /work
# Results (store, MLflow sqlite database, artifacts, Prefect home) live here: mount it.
VOLUME ["/work/runs"]
EXPOSE 5000
ENTRYPOINT ["ndvm"]
CMD ["discover"]
