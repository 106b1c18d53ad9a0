"""The configuration of a discovery run (``DiscoverConfig``, ``Budget``) and its options.

Light on purpose (no Prefect, MLflow or litellm): ``ndvm``'s parser is built from it at start-up
(flows/cli.py). ``DiscoverConfig``'s fields with ``option(...)`` metadata, those of its nested
parts, and ``Budget``'s are the options of the ``discover`` flow, of ``build_config`` and of
``ndvm discover``/``serve`` (flows/options.py): adding a field with metadata adds the option
everywhere.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from datasets.tasks import TASKS  # the task kinds: one registry, read by the options and the CLI
from flows.calibration import CalibrationOptions
from flows.errors import DiscoveryError
from flows.options import Option, OptionError, collect_options, nested_values, option, split_keywords
from flows.problem import ProblemSpec
from flows.proposer_registry import proposer_names
from flows.runners import RunnerChoice

PROPOSERS = ("auto", *proposer_names())  # the built-in ones (flows/proposer_registry.py), for --proposer
LLM_MODEL_ENV = "NDVM_LLM_MODEL"


# ---------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Budget:
    """When a run stops proposing: whichever limit comes first (None: no limit of that kind)."""

    minutes: float | None = field(default=2.0, metadata=option("wall time for proposing", group="budget"))
    max_candidates: int | None = field(
        default=None,
        metadata=option(  # new (unique, valid) candidates accepted
            "new candidates to accept", group="budget"
        ),
    )
    max_cost_usd: float | None = field(
        default=None,
        metadata=option(  # LLM cost as litellm reports it
            "LLM cost limit; a resumed run counts what its earlier sessions spent",
            group="budget",
            flag="--max-cost",
            metavar="USD",
        ),
    )
    drain_minutes: float | None = field(
        default=None,
        metadata=option(  # None: auto
            "time to calibrate what is queued after the deadline (default: 15%% of --minutes, 15-120 s); then what is "
            "still in calibration is cancelled and stays pending",
            group="budget",
        ),
    )

    def check(self) -> Budget:
        if self.minutes is None and self.max_candidates is None and self.max_cost_usd is None:
            raise DiscoveryError("a run needs a budget: minutes, max_candidates or max_cost_usd")
        for name in ("minutes", "max_candidates", "max_cost_usd", "drain_minutes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise DiscoveryError(f"budget {name} must be >= 0, got {value}")
        return self

    def drain_seconds(self) -> float:
        """How long queued candidates may still be calibrated after the wall-time deadline."""
        if self.drain_minutes is not None:
            return 60.0 * self.drain_minutes
        if self.minutes is None:
            return math.inf
        return min(120.0, max(15.0, 0.15 * 60.0 * self.minutes))


def _add_price_args(parser: Any, group: Any) -> None:
    group.add_argument(
        "--input-price",
        type=float,
        metavar="USD",
        help="price of a million prompt tokens, for models litellm cannot price (with --output-price)",
    )
    group.add_argument("--output-price", type=float, metavar="USD", help="price of a million completion tokens")


def _price_from_args(args: Any) -> tuple[float, float] | None:
    """(input, output) USD per token from --input-price/--output-price (USD per million tokens)."""
    if args.input_price is None and args.output_price is None:
        return None
    if args.input_price is None or args.output_price is None or min(args.input_price, args.output_price) < 0:
        raise DiscoveryError("give both --input-price and --output-price (USD per million tokens, >= 0)")
    return (args.input_price / 1e6, args.output_price / 1e6)


def _add_dataset_option_args(parser: Any, group: Any) -> None:
    from flows.datasets_cli import add_dataset_option_args

    add_dataset_option_args(parser)


def _dataset_options_from_args(args: Any) -> dict[str, Any] | None:
    from flows.datasets_cli import dataset_options

    return dataset_options(args)


def _add_x_args(parser: Any, group: Any) -> None:
    group.add_argument(
        "--x",
        dest="x",
        action="append",
        metavar="COL",
        help="input column of --data; repeat it (or give COL,COL) for several inputs: a table, the regression task",
    )


def _x_from_args(args: Any) -> Any:
    xs = getattr(args, "x", None)
    if not xs:
        return None
    return xs[0] if len(xs) == 1 else tuple(xs)


def _add_covariate_args(parser: Any, group: Any) -> None:
    group.add_argument(
        "--covariate",
        action="append",
        dest="covariates",
        metavar="COL",
        help="forecast files: a column observed with y that candidates receive in x "
        "(repeatable; default: the manifest's covariates)",
    )


def _covariates_from_args(args: Any) -> list[str] | None:
    return list(args.covariates) if getattr(args, "covariates", None) else None


# The options of the problem (ProblemSpec, flows/problem.py, stores plain values and has no option
# metadata of its own).
PROBLEM_OPTIONS: dict[str, dict[str, Any]] = {
    "dataset": option(
        "a registered dataset (see `ndvm datasets`); enso is embedded and offline",
        group="data",
        flag="--task",
        name="task",
        metavar="DATASET",
    ),
    "data": option("a CSV/Parquet file (or PSL/CPC text) instead of --task", group="data", metavar="FILE"),
    "x": option(
        "input column of --data; repeat it (or give COL,COL) for several inputs: a table, the regression task",
        group="data",
        add_cli=_add_x_args,
        from_args=_x_from_args,
    ),
    "y": option("target column of --data", group="data"),
    "group": option("group column of --data (one series per group, e.g. cell_id)", group="data"),
    "task_kind": option("override the dataset's default task", group="data", choices=tuple(TASKS)),
    "split": option(
        "files: how rows split into train/validation/test when the file has no split column (default: "
        "temporal for one input, random for several; grouped holds out whole --group groups)",
        group="data",
        choices=("temporal", "random", "grouped"),
    ),
    "name": option(
        "files: the dataset's name (its MLflow experiment and registered model; default: the manifest's or the "
        "file's stem)",
        group="data",
        name="dataset_name",
        flag="--name",
    ),
    "train_fraction": option(
        "curve data and files: the first F of each series trains (default: the manifest's, "
        "or 0.6 for files, 0.5 for battery data)",
        group="data",
        metavar="F",
    ),
    "validation_fraction": option(
        "the next F of each series validates (the search ranks by it; default: the "
        "manifest's, or 0.2); the rest is the test split, scored once at the end of a run",
        group="data",
        metavar="F",
    ),
    "edge_fraction": option(
        "tables (the regression task): the share of training rows at the edges of the training ranges "
        "held out of fitting and scored with the validation rows, so that candidates must extrapolate "
        "(default 0.1; 0: none)",
        group="data",
        metavar="F",
    ),
    "covariates": option(
        "forecast files: a column observed with y that candidates receive in x",
        group="data",
        add_cli=_add_covariate_args,
        from_args=_covariates_from_args,
    ),
    "options": option(
        "options of a registered dataset (--option KEY=VALUE, --refresh)",
        group="data",
        name="dataset_options",
        add_cli=_add_dataset_option_args,
        from_args=_dataset_options_from_args,
    ),
}


@dataclass(frozen=True)
class DiscoverConfig:
    """Everything that defines a run (stored with it, so ``resume`` continues it the same way).

    Its fields with ``option(...)`` metadata (and those of its nested parts) are the options of the
    flow and of ``ndvm discover``/``serve``: adding a field with metadata here adds the option
    everywhere (flows/options.py)."""

    problem: ProblemSpec = field(default_factory=ProblemSpec)
    proposer: str = field(
        default="mutation",
        metadata=option(  # mutation | llm | replay once resolved
            "auto: llm when --model or $NDVM_LLM_MODEL is set, else the offline mutation proposer",
            group="proposals",
            choices=PROPOSERS,
            default="auto",
        ),
    )
    model: str | None = field(
        default=None,
        metadata=option(
            "litellm model, e.g. openai/gpt-4o-mini, anthropic/claude-..., ollama_chat/llama3.1", group="proposals"
        ),
    )
    api_base: str | None = field(
        default=None, metadata=option("OpenAI-compatible server URL (vLLM, llama.cpp, Ollama /v1)", group="proposals")
    )
    llm_env: str | None = field(
        default=None,
        metadata=option(  # the variable's name only, never the key
            "environment variable holding the API key (default: the provider's own)",
            group="proposals",
            name="api_key_env",
            flag="--api-key-env",
        ),
    )
    replay: str | None = field(
        default=None,
        metadata=option("candidates to replay (with --proposer replay)", group="proposals", metavar="FILE.jsonl"),
    )
    seed: int | None = field(
        default=None,
        metadata=option(  # None: drawn at the start (flows/night.py), then stored
            "the run's seed (default: drawn per run and printed in the summary; with --serial the same seed replays "
            "the run)",
            group="calibration",
        ),
    )
    fresh: bool = field(
        default=False,
        metadata=option(  # storage/library.py
            "ignore earlier runs on the same data: no evaluation reused, no seeds from their best programs"
        ),
    )
    concurrency: int = field(
        default=8,
        metadata=option(  # mutation: 1
            "LLM requests in flight", group="proposals"
        ),
    )
    per_request: int = field(
        default=4,
        metadata=option(  # mutation: 16 per round
            "programs asked for per LLM request", group="proposals"
        ),
    )
    temperature: float | None = field(
        default=None,
        metadata=option(  # some models accept no other than theirs
            "LLM sampling temperature (default: the provider's own)", group="proposals"
        ),
    )
    llm_timeout: float = field(
        default=60.0,
        metadata=option(
            "seconds per LLM request before it is retried",
            group="proposals",
            name="request_timeout",
            flag="--request-timeout",
            metavar="SECONDS",
        ),
    )
    price_per_token: tuple[float, float] | None = field(
        default=None,
        metadata=option(  # (input, output) USD per token
            "prices of an unpriced model", group="proposals", add_cli=_add_price_args, from_args=_price_from_args
        ),
    )
    batch_size: int = field(default=32, metadata=option("candidates per calibration batch"))
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions)
    candidate_seconds: float | None = field(
        default=None,
        metadata=option(  # calibration + scoring, alone
            "time limit of one candidate's calibration and scoring; one over it is marked timeout",
            group="budget",
            metavar="S",
        ),
    )
    runner: RunnerChoice = field(default_factory=RunnerChoice)
    top_k: int = field(default=10, metadata=option("leaderboard entries logged to MLflow"))
    test_top_k: int = field(
        default=10, metadata=option("final leaderboard entries scored on the test split at the end of the run")
    )
    max_stale_rounds: int = field(
        default=5,
        metadata=option(
            "stop proposing after N proposal rounds in a row gave nothing new (duplicates or invalid only; 0: never)",
            metavar="N",
        ),
    )
    serial: bool = field(
        default=False,
        metadata=option(  # same seed -> same proposals, whatever the timing
            "one proposal round at a time, calibrated before the next: reproducible with --seed"
        ),
    )
    log_every: float = field(
        default=10.0,
        metadata=option(
            "seconds between MLflow progress snapshots (counters, LLM cost, a new best candidate)", metavar="SECONDS"
        ),
    )
    folder: str = field(
        default="runs", metadata=option("run folder: candidates.duckdb, mlflow.db, artifacts", group="store")
    )
    tracking_uri: str | None = field(
        default=None,
        metadata=option(  # None: sqlite under the run folder
            "MLflow tracking URI (default sqlite:///<folder>/mlflow.db)", group="store"
        ),
    )
    deployment: str | None = None  # the Prefect deployment of a scheduled run (ndvm serve), set by the flow

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscoverConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["problem"] = ProblemSpec(**data.get("problem", {}))
        values["calibration"] = CalibrationOptions(**data.get("calibration", {}))
        values["runner"] = RunnerChoice(**data.get("runner", {}))
        if values.get("price_per_token") is not None:  # JSON has no tuples
            values["price_per_token"] = tuple(values["price_per_token"])
        if values.get("llm_env") == "***":  # redacted by an older store; fall back to the provider's variable
            values["llm_env"] = None
        return cls(**values)


def resolve_proposer(proposer: str, model: str | None) -> tuple[str, str | None]:
    """``auto``: the LLM proposer when a model is given (``--model`` or $NDVM_LLM_MODEL), else mutation."""
    if proposer != "auto" and proposer not in proposer_names():  # (registered since the import too)
        raise DiscoveryError(f"unknown proposer {proposer!r}; use one of {', '.join(('auto', *proposer_names()))}")
    model = model or os.environ.get(LLM_MODEL_ENV) or None
    if proposer == "auto":
        proposer = "llm" if model else "mutation"
    if proposer == "llm" and not model:
        raise DiscoveryError(f"the llm proposer needs a model: --model or ${LLM_MODEL_ENV} (e.g. openai/gpt-4o-mini)")
    return proposer, model if proposer == "llm" else None


@functools.lru_cache(maxsize=1)
def discover_options() -> tuple[Option, ...]:
    """Every option of a discovery run (flows/options.py): DiscoverConfig's, its nested parts', the budget's."""
    return tuple(collect_options(DiscoverConfig, Budget, extra={ProblemSpec: PROBLEM_OPTIONS}))


def build_config(task: str = "enso", proposer: str = "auto", **options: Any) -> DiscoverConfig:
    """The configuration of a run from the flow's keywords (the options of ``ndvm discover``);
    what is not given takes the option's default. Bad values are a DiscoveryError naming them."""
    all_options = list(discover_options())
    try:
        given, budget = split_keywords(all_options, {"task": task, "proposer": proposer, **options})
    except OptionError as exc:
        raise DiscoveryError(str(exc)) from None
    if budget:
        raise DiscoveryError(f"{sorted(budget)} belong to the budget: budget={{...}}")
    v = nested_values(all_options, given)
    kind, model = resolve_proposer(v["proposer"], v["model"])
    if v["max_stale_rounds"] < 0:
        raise DiscoveryError(f"max_stale_rounds must be >= 0 (0: never stop), got {v['max_stale_rounds']}")
    if v["batch_size"] < 1 or v["concurrency"] < 1 or v["per_request"] < 1:
        raise DiscoveryError("batch_size, concurrency and per_request must be >= 1")
    if v["test_top_k"] < 0:
        raise DiscoveryError(f"test_top_k must be >= 0, got {v['test_top_k']}")
    if v["candidate_seconds"] is not None and not v["candidate_seconds"] > 0:
        raise DiscoveryError(f"candidate_seconds must be > 0, got {v['candidate_seconds']}")
    if not v["llm_timeout"] > 0:
        raise DiscoveryError(f"request_timeout must be > 0 seconds, got {v['llm_timeout']}")
    if not v["log_every"] > 0:
        raise DiscoveryError(f"log_every must be > 0 seconds, got {v['log_every']}")
    problem = dict(v.pop("problem"))
    problem["options"] = dict(problem["options"]) if problem["options"] else None
    price = v["price_per_token"]
    return DiscoverConfig(
        **{
            **v,
            "proposer": kind,
            "model": model,
            "problem": ProblemSpec(**problem),
            "price_per_token": None if price is None else tuple(price),
            "calibration": CalibrationOptions(**v["calibration"], seed=v["seed"]),
            "runner": RunnerChoice(**v["runner"]).check(),
        }
    )


__all__ = [
    "LLM_MODEL_ENV",
    "PROBLEM_OPTIONS",
    "PROPOSERS",
    "Budget",
    "DiscoverConfig",
    "DiscoveryError",
    "build_config",
    "discover_options",
    "resolve_proposer",
]
