"""The PNG plots logged with leaderboard entries (no runtime needed): valid PNG files for temporal
and random held-out splits, forecasts with intervals, loss curves, and clear errors on bad input."""

from __future__ import annotations

import numpy as np
import pytest

from storage.plots import PNG_SIGNATURE, FitPlot, ForecastPlot, is_png, plot_fit, plot_forecast, plot_loss


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_fit_plot_temporal_and_random_splits(tmp_path):
    x = np.linspace(0, 10, 50)
    y = np.sin(x)
    temporal = plot_fit(FitPlot(x, y, np.sin(x) * 0.9, x > 7, title="temporal"), tmp_path / "temporal.png")
    random = plot_fit(FitPlot(x, y, np.sin(x) * 0.9, np.arange(50) % 3 == 0), tmp_path / "random.png")
    for path in (temporal, random):
        width, height = png_size(path)
        assert width > 300 and height > 200 and path.stat().st_size > 5000
        assert is_png(path)


def test_forecast_plot_with_interval_and_loss_curve(tmp_path):
    t = np.arange(120.0)
    y = np.sin(t / 6)
    forecast = np.where(t >= 90, np.sin(t / 6) + 0.1, np.nan)
    path = plot_forecast(
        ForecastPlot(t, y, forecast, split=90.0, lower=forecast - 0.2, upper=forecast + 0.2, label="lead-1 forecast"),
        tmp_path / "forecast.png",
    )
    assert png_size(path)[0] > 300
    loss = plot_loss(np.r_[np.geomspace(10, 1e-3, 80), np.nan], tmp_path / "loss.png")
    assert png_size(loss)[0] > 200
    signed = plot_loss(np.linspace(5, -5, 30), tmp_path / "signed.png")  # a "value" loss may go negative
    assert is_png(signed)


def test_plots_reject_mismatched_or_empty_data(tmp_path):
    with pytest.raises(ValueError, match="one shape"):
        plot_fit(FitPlot([1, 2, 3], [1, 2], [1, 2, 3], [False, False, True]), tmp_path / "bad.png")
    with pytest.raises(ValueError, match="differ"):
        plot_forecast(ForecastPlot([1, 2], [1, 2], [1], split=1.5), tmp_path / "bad.png")
    with pytest.raises(ValueError, match="empty"):
        plot_loss([], tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
