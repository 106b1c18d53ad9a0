"""``us-unemployment`` (datasets/macro.py): the quarterly, non-monthly forecasting benchmark that
statsmodels ships (no download)."""

import numpy as np
import pytest

from datasets import load
from datasets.errors import DataFormatError


def test_quarterly_series_and_its_split():
    ds = load("us-unemployment")
    frame = ds.frame
    assert frame.height == 203 and ds.y == "unemp_pct" and ds.x == "t"
    assert frame.get_column("quarter").to_list()[:5] == [1, 2, 3, 4, 1]
    assert np.all(np.diff(frame.get_column("t").to_numpy()) == pytest.approx(0.25))
    counts = dict(frame.group_by("split").len().iter_rows())
    assert counts == {"train": 124, "validation": 40, "test": 39}
    assert frame.filter(frame["split"] == "test").get_column("year").min() == 2000
    assert ds.meta["period"] == 4 and ds.meta["leads"] == 8 and ds.meta["time_step"] == "quarter"
    y = frame.get_column("unemp_pct").to_numpy()
    assert 3.0 < y.min() < y.max() < 11.0  # a rate in percent, not an anomaly


def test_split_years_are_checked():
    with pytest.raises(DataFormatError, match="train_end_year"):
        load("us-unemployment", train_end_year=1999, validation_end_year=1990)
    smaller = load("us-unemployment", train_end_year=1979, validation_end_year=1994)
    assert dict(smaller.frame.group_by("split").len().iter_rows())["validation"] == 60
