"""PNG plots logged with each leaderboard entry: the fit (held-out region marked), the forecast
(time series) and the loss curve. Matplotlib runs on the Agg backend: no display is needed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: the writer process may run overnight on a server
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class FitPlot:
    """Observed targets and the fitted program's predictions over one input axis.

    ``heldout`` marks the points the fit never saw (a boolean mask over the points). When the
    held-out points lie beyond the training range (a temporal split) their region is shaded;
    otherwise (random folds) they are drawn with their own marker.
    """

    x: Sequence[float]
    y: Sequence[float]
    prediction: Sequence[float]
    heldout: Sequence[bool]
    x_label: str = "x"
    y_label: str = "y"
    title: str = ""


@dataclass
class ForecastPlot:
    """A series and forecasts made from the training period onwards.

    ``forecast`` holds the forecast value at each time (NaN where none was made); ``split`` is the
    first held-out time; ``lower``/``upper`` optionally bound a prediction interval.
    """

    time: Sequence[float]
    observed: Sequence[float]
    forecast: Sequence[float]
    split: float
    label: str = "forecast"
    lower: Sequence[float] | None = None
    upper: Sequence[float] | None = None
    time_label: str = "time"
    y_label: str = "value"
    title: str = ""


def _save(fig: plt.Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_fit(data: FitPlot, path: str | Path) -> Path:
    x = np.asarray(data.x, dtype=float)
    y = np.asarray(data.y, dtype=float)
    pred = np.broadcast_to(np.asarray(data.prediction, dtype=float), x.shape)
    held = np.asarray(data.heldout, dtype=bool)
    if not (x.shape == y.shape == held.shape):
        raise ValueError(f"fit plot: x {x.shape}, y {y.shape} and heldout {held.shape} must have one shape")
    order = np.argsort(x, kind="stable")
    fig, ax = plt.subplots(figsize=(7, 4))
    train_x = x[~held]
    if held.any() and (train_x.size == 0 or x[held].min() > train_x.max()):
        ax.axvspan(x[held].min(), x[held].max(), color="tab:orange", alpha=0.12, label="held-out region")
    ax.scatter(x[~held], y[~held], s=12, color="tab:blue", label="train")
    ax.scatter(x[held], y[held], s=16, color="tab:orange", marker="D", label="held-out")
    ax.plot(x[order], pred[order], color="black", lw=1.5, label="fitted program")
    ax.set_xlabel(data.x_label)
    ax.set_ylabel(data.y_label)
    ax.set_title(data.title or "fit")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def plot_forecast(data: ForecastPlot, path: str | Path) -> Path:
    t = np.asarray(data.time, dtype=float)
    obs = np.asarray(data.observed, dtype=float)
    fc = np.asarray(data.forecast, dtype=float)
    if not (t.shape == obs.shape == fc.shape):
        raise ValueError(f"forecast plot: time {t.shape}, observed {obs.shape}, forecast {fc.shape} differ")
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.axvspan(data.split, t.max(), color="tab:orange", alpha=0.12, label="held-out period")
    ax.plot(t, obs, color="tab:blue", lw=1.0, label="observed")
    ax.plot(t, fc, color="black", lw=1.2, label=data.label)
    if data.lower is not None and data.upper is not None:
        ax.fill_between(
            t, np.asarray(data.lower, float), np.asarray(data.upper, float), color="gray", alpha=0.25, label="interval"
        )
    ax.axvline(data.split, color="tab:orange", lw=1.0)
    ax.set_xlabel(data.time_label)
    ax.set_ylabel(data.y_label)
    ax.set_title(data.title or "forecast")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def plot_loss(history: Sequence[float], path: str | Path, title: str = "training loss") -> Path:
    h = np.asarray(history, dtype=float).ravel()
    if h.size == 0:
        raise ValueError("loss curve: empty history")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(h.size)
    finite = np.isfinite(h)
    ax.plot(steps[finite], h[finite], color="tab:red", lw=1.2)
    if finite.any() and (h[finite] > 0).all():
        ax.set_yscale("log")  # losses span decades during a fit
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    return _save(fig, path)


# ---- the report card's plots (flows/report_mlflow.py logs them on the parent and the champion's run) ----
def plot_test_years(
    panels: Sequence[dict],
    path: str | Path,
    time_label: str = "time",
    y_label: str = "value",
    title: str = "test years",
) -> Path:
    """One panel per lead: the observations of the test years and each model's forecasts of them.

    Each panel is ``{"lead": k, "time": [...], "observed": [...], "models": {label: [...]}}``; the
    first model is drawn as the champion (black, thicker)."""
    if not panels:
        raise ValueError("test-years plot: no panel")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), sharex=True, squeeze=False)
    colors = ["black", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        t = np.asarray(panel["time"], dtype=float)
        ax.plot(t, np.asarray(panel["observed"], dtype=float), color="tab:blue", lw=1.0, label="observed")
        for i, (label, values) in enumerate(panel["models"].items()):
            v = np.asarray(values, dtype=float)
            if v.shape != t.shape:
                raise ValueError(f"test-years plot: {label} has {v.shape} values for {t.shape} times")
            ax.plot(
                t, v, color=colors[i % len(colors)], lw=1.6 if i == 0 else 1.1, ls="-" if i == 0 else "--", label=label
            )
        ax.set_ylabel(y_label)
        ax.set_title(f"lead {panel['lead']}", fontsize=9, loc="left")
        ax.legend(loc="best", fontsize=7)
    axes[-1, 0].set_xlabel(time_label)
    fig.suptitle(title)
    return _save(fig, path)


def plot_test_cells(
    panels: Sequence[dict],
    path: str | Path,
    x_label: str = "x",
    y_label: str = "y",
    title: str = "held-out cells",
    columns: int = 6,
) -> Path:
    """Small multiples, one panel per held-out cell (curves): the rows its parameters were fitted
    on, the scored rows, and each model's predictions of the scored rows.

    Each panel is ``{"group": name, "fit_x": [...], "fit_y": [...], "x": [...], "observed": [...],
    "models": {label: [...]}, "rmse": {label: value}}`` (``rmse`` optional: shown in the panel's
    title); the first model is drawn as the champion (black, solid), the others dashed."""
    if not panels:
        raise ValueError("test-cells plot: no panel")
    n = len(panels)
    ncols = max(1, min(columns, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.9 * ncols, 2.3 * nrows + 1.3), squeeze=False)
    colors = ["black", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    handles: dict[str, object] = {}
    for ax, panel in zip(axes.ravel(), panels, strict=False):
        x = np.asarray(panel["x"], dtype=float)
        fit_x = np.asarray(panel.get("fit_x", []), dtype=float)
        if fit_x.size:
            handles["rows fitted on"] = ax.scatter(fit_x, panel["fit_y"], s=3, color="0.6", lw=0)
        if x.size:
            ax.axvspan(x.min(), x.max(), color="tab:blue", alpha=0.07)
        handles["scored rows (observed)"] = ax.scatter(x, panel["observed"], s=4, color="tab:blue", lw=0)
        for i, (label, values) in enumerate(panel["models"].items()):
            v = np.asarray(values, dtype=float)
            if v.shape != x.shape:
                raise ValueError(
                    f"test-cells plot: {label} has {v.shape} values for {x.shape} rows of {panel['group']}"
                )
            (line,) = ax.plot(
                x, v, color=colors[i % len(colors)], lw=1.5 if i == 0 else 1.2, ls="-" if i == 0 else "--"
            )
            handles.setdefault(label, line)
        rmse = panel.get("rmse") or {}
        name = str(panel["group"])
        if rmse:  # the panel says who wins on this cell, in the order of the legend
            name += "\nRMSE " + " vs ".join(format(float(v), ".3g") for v in rmse.values())
        ax.set_title(name, fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(y_label, fontsize=7)
    for ax in axes[-1, :]:
        ax.set_xlabel(x_label, fontsize=7)
    # the title and one legend for every panel above the grid, a fixed height in inches
    height = fig.get_figheight()
    fig.suptitle(
        title + "\n(each panel: the cell, and the RMSE of the champion vs the reference on its scored rows)",
        fontsize=10,
        y=1 - 0.08 / height,
        va="top",
    )
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.55 / height),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        markerscale=4,
    )
    fig.subplots_adjust(top=1 - 1.25 / height, hspace=0.75, wspace=0.3)
    return _save(fig, path)


def plot_per_lead(
    per_lead: dict[str, Sequence[float]],
    path: str | Path,
    metric: str = "RMSE",
    title: str = "",
    champion: str = "champion",
) -> Path:
    """The champion's error per lead against every reference's (one line each)."""
    if champion not in per_lead:
        raise ValueError(f"per-lead plot: no {champion!r} series among {sorted(per_lead)}")
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, values in per_lead.items():
        v = np.asarray(values, dtype=float)
        leads = np.arange(1, v.size + 1)
        if label == champion:
            ax.plot(leads, v, color="black", lw=2.2, marker="o", ms=4, label=label, zorder=3)
        else:
            ax.plot(leads, v, lw=1.1, marker=".", label=label)
    ax.set_xlabel("lead")
    ax.set_ylabel(f"{metric} on the test years")
    ax.set_title(title or f"{metric} per lead: champion vs references")
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def plot_formula(text: str, path: str | Path, title: str = "formula") -> Path:
    """The formula as an image, one definition per line (an artifact the MLflow UI previews)."""
    lines = [part.strip() for part in text.split(";") if part.strip()] or ["(no formula)"]
    width = max(len(line) for line in lines)
    fig = plt.figure(figsize=(max(4.0, 0.11 * width + 0.6), 0.4 * len(lines) + 0.7))
    fig.text(0.02, 0.98, title, fontsize=10, fontweight="bold", va="top")
    for i, line in enumerate(lines):
        fig.text(0.02, 0.98 - (i + 1.3) / (len(lines) + 1.6), line, fontsize=11, family="monospace", va="top")
    return _save(fig, path)


def is_png(path: str | Path) -> bool:
    """True when the file starts with the PNG signature."""
    with open(path, "rb") as handle:
        return handle.read(8) == PNG_SIGNATURE


__all__ = [
    "FitPlot",
    "ForecastPlot",
    "plot_fit",
    "plot_forecast",
    "plot_loss",
    "plot_test_years",
    "plot_test_cells",
    "plot_per_lead",
    "plot_formula",
    "is_png",
    "PNG_SIGNATURE",
]
