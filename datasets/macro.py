"""``us-unemployment``: the US civilian unemployment rate, quarterly 1959Q1-2009Q3.

A non-monthly forecasting benchmark from data a dependency ships: statsmodels'
``macrodata`` (US Federal Reserve / Bureau of Labor Statistics series as collected for
statsmodels), column ``unemp`` (percent). The series is used as it is, in percent, not as
anomalies: its level is what a forecaster is asked for, and the references (damped persistence
toward the training mean, AR, seasonal AR at period 4) are fitted to it.

Default split (by year): train 1959-1989 (124 quarters), validation 1990-1999 (40), test
2000-2009Q3 (39, the 2001 and 2008-2009 recessions included). Forecasts at leads 1-8 (two years).
"""

from __future__ import annotations

import polars as pl

from .catalog import registered
from .errors import DataFormatError
from .schema import TEST, TRAIN, VALIDATION, Column, Dataset

PERIOD = 4  # quarters in a year: the calendar phase a candidate may use
LEADS = 8  # two years ahead

UNEMPLOYMENT_COLUMNS = (
    Column("year", "year", "calendar year"),
    Column("quarter", "1-4", "calendar quarter"),
    Column("t", "year", "decimal time, year + (quarter - 1) / 4"),
    Column("unemp_pct", "%", "US civilian unemployment rate, quarterly mean"),
    Column("split", "-", '"train" (years <= train_end_year), "validation" (<= validation_end_year) or "test"'),
)


def unemployment_frame() -> pl.DataFrame:
    """statsmodels' embedded ``macrodata`` as ``year, quarter, t, unemp_pct`` (203 quarters)."""
    from statsmodels.datasets import macrodata

    raw = pl.from_pandas(macrodata.load_pandas().data)
    frame = raw.select(
        pl.col("year").cast(pl.Int32),
        pl.col("quarter").cast(pl.Int32),
        pl.col("unemp").cast(pl.Float64).alias("unemp_pct"),
    ).with_columns((pl.col("year") + (pl.col("quarter") - 1) / PERIOD).alias("t"))
    return frame.select("year", "quarter", "t", "unemp_pct").sort("t")


def load_us_unemployment(train_end_year: int = 1989, validation_end_year: int = 1999) -> Dataset:
    """``us-unemployment``: train <= ``train_end_year`` < validation <= ``validation_end_year`` < test."""
    if not train_end_year < validation_end_year:
        raise DataFormatError(
            f"us-unemployment: train_end_year ({train_end_year}) must be before validation_end_year "
            f"({validation_end_year})"
        )
    frame = unemployment_frame()
    frame = frame.with_columns(
        pl.when(pl.col("year") <= train_end_year)
        .then(pl.lit(TRAIN))
        .when(pl.col("year") <= validation_end_year)
        .then(pl.lit(VALIDATION))
        .otherwise(pl.lit(TEST))
        .alias("split")
    )
    counts = frame.group_by("split").len()
    if counts.height < 3:
        raise DataFormatError(
            f"us-unemployment: the years 1959-2009 leave no rows for some split with train_end_year={train_end_year}, "
            f"validation_end_year={validation_end_year}"
        )
    return Dataset(
        name="us-unemployment",
        frame=frame,
        x="t",
        y="unemp_pct",
        group=None,
        definition=registered("us-unemployment"),
        columns=UNEMPLOYMENT_COLUMNS,
        meta={
            "task": "forecast",
            "period": PERIOD,
            "leads": LEADS,
            "time_step": "quarter",
            "train_end_year": train_end_year,
            "validation_end_year": validation_end_year,
        },
    )


__all__ = ["load_us_unemployment", "unemployment_frame", "UNEMPLOYMENT_COLUMNS", "PERIOD", "LEADS"]
