"""The report card's paired tests: the champion against a reference on the same test errors, their
verdict sentence and their Markdown.

Tasks only compute the errors (``Task.test_errors``, :class:`datasets.tasks.Errors`); which test
applies follows from how the errors are laid out, never from the task's name or kind:

- by forecast origin and lead (``Errors.values``, [origins, leads]): the Diebold-Mariano test with
  the Harvey-Leybourne-Newbold correction, per lead h (autocovariances up to lag h-1) and overall
  (on the same origins as the headline mean RMSE: ``overall_differential``);
- by group (``Errors.groups``): a paired bootstrap interval of the RMSE difference, whole groups
  resampled when there are several, a moving-block bootstrap of one series otherwise (a seeded
  sample of ``PAIRED_TEST_ROWS`` rows of a very large one: the bootstrap's index array grows with
  rows x replicates).

The statistics themselves are in ``storage.stats``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from datasets.tasks import Errors
from datasets.tasks.metrics import rms

SIGNIFICANCE = 0.05  # the level the report card's verdicts speak of
# Two test scores this close (relative to the reference's) are the same model for a scientist, whatever
# a paired test says: a champion that IS the reference law, calibrated as a candidate, differs from
# the reference's own fit in the fifth or sixth digit, and a paired test on thousands of errors can
# call that "significantly better" (a bootstrap interval of [-0.0000, -0.0000]).
PRACTICAL_EQUALITY = 1e-3


def practically_equal(champion: float, reference: float) -> bool:
    """True when two test scores differ by less than ``PRACTICAL_EQUALITY`` of the reference's."""
    return (
        math.isfinite(champion)
        and math.isfinite(reference)
        and abs(champion - reference) <= PRACTICAL_EQUALITY * abs(reference)
    )


PAIRED_TEST_ROWS = 50_000  # rows of one series the paired bootstrap resamples (a large table's test split)


def format_number(value: Any, fmt: str = ".4g") -> str:
    """A number for the report card's Markdown: ``-`` for None, inf/nan spelled out."""
    if value is None:
        return "-"
    try:
        return format(float(value), fmt) if math.isfinite(float(value)) else str(value)
    except (TypeError, ValueError):
        return str(value)


_num = format_number


class PairedTest(ABC):
    """A paired test for one layout of errors, with what the report card says of it."""

    breakdown_key = "breakdown"  # the report's key of the per-unit RMSE (``Errors.breakdown``)
    where = "on the held-out test data"  # how the headline names the test split

    @abstractmethod
    def run(self, champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
        """``{"test": how, "overall": {...}, ...}``; the overall figures also go in the card's
        comparison with every reference."""

    @abstractmethod
    def verdict(self, champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
        """One sentence: the difference with its p-value or interval, and what it means at 5%."""

    @abstractmethod
    def breakdown_markdown(self, breakdown: dict[str, Any], max_groups: int = 12) -> list[str]:
        """Markdown lines of the card's per-unit RMSE (model name -> ``Errors.breakdown()``)."""

    def paired_test_markdown(self, test: dict[str, Any]) -> list[str]:
        """Markdown lines detailing the test beyond its description (default: none)."""
        return []

    @abstractmethod
    def versus_row_markdown(self, row: dict[str, Any]) -> str:
        """One row ``| reference | statistic | p | interval |`` of the test against each reference."""


def overall_differential(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The overall test's loss differential on the SAME origins as the headline mean RMSE (every
    origin; lead k averages over the n_k origins whose target lies in the split):
    d_t = (N / L) sum_{k in split at t} (a_tk^2 - b_tk^2) / n_k, so that mean(d) is exactly
    mean_k MSE_k(a) - mean_k MSE_k(b), the per-lead MSEs the per-lead RMSEs come from. Returns
    (d, mean over leads of the MSE of a, of b). With every target in the split, d_t is the
    plain per-origin mean over leads."""
    valid = ~(np.isnan(a) | np.isnan(b))
    n_k = valid.sum(axis=0)
    keep = valid.any(axis=1)
    sq_a, sq_b = np.where(valid, a, 0.0) ** 2, np.where(valid, b, 0.0) ** 2
    weights = np.where(n_k > 0, 1.0 / np.maximum(n_k, 1), 0.0)[None, :]
    n, leads = int(keep.sum()), a.shape[1]
    d = (n / leads) * np.sum((sq_a - sq_b) * weights, axis=1)[keep]
    mse_a = float(np.mean(np.sum(sq_a * weights, axis=0)))
    mse_b = float(np.mean(np.sum(sq_b * weights, axis=0)))
    return d, mse_a, mse_b


def _dm(test: Any, d_or_a: np.ndarray, *rest: Any, h: int) -> dict[str, Any]:
    """A Diebold-Mariano result as a dict, or, with too few paired errors for horizon ``h`` (a short
    test span: 32 test years and 12 leads give 21 whole origins), the same keys with no statistic
    and no p-value and ``untestable`` saying why: the card reports the scores without a verdict of
    significance instead of failing."""
    from storage.stats import StatsError

    try:
        return test(d_or_a, *rest, h=h).to_dict()
    except StatsError as exc:
        a = np.asarray(d_or_a, float)
        mean_diff = float(np.mean(a * a - np.asarray(rest[0], float) ** 2)) if rest else float(np.mean(a))
        return {
            "n": int(a.size),
            "h": h,
            "mean_diff": mean_diff,
            "statistic": None,
            "p_value": None,
            "untestable": str(exc),
        }


def _p_text(row: dict[str, Any]) -> str:
    return "untested" if row.get("p_value") is None else f"{row['p_value']:.3g}"


def _stat_text(row: dict[str, Any]) -> str:
    return "-" if row.get("statistic") is None else f"{row['statistic']:.2f}"


class ByLead(PairedTest):
    """Errors by forecast origin and lead: Diebold-Mariano (HLN) per lead and overall."""

    breakdown_key = "per_lead"
    where = "on the test years"

    def run(self, champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
        """Per lead h (autocovariances up to lag h-1) and overall, on the same origins as the headline
        mean RMSE (``overall_differential``; h = the number of leads); ``mean_diff`` < 0: the champion
        has the lower mean over leads of the MSE (``mse_champion``, ``mse_reference``).
        ``replicates``/``seed``: unused (no resampling)."""
        from storage.stats import diebold_mariano, dm_from_differential

        a, b = champion.values, reference.values
        assert a is not None and b is not None
        leads = a.shape[1]
        per_lead = []
        for k in range(leads):
            valid = ~np.isnan(a[:, k])
            res = _dm(diebold_mariano, a[valid, k], b[valid, k], h=k + 1)
            per_lead.append(
                {"lead": k + 1, "rmse_champion": rms(a[valid, k]), "rmse_reference": rms(b[valid, k]), **res}
            )
        d, mse_a, mse_b = overall_differential(a, b)
        overall = {**_dm(dm_from_differential, d, h=leads), "mse_champion": mse_a, "mse_reference": mse_b}
        return {
            "test": "Diebold-Mariano, Harvey-Leybourne-Newbold correction, squared error",
            "overall": overall,
            "per_lead": per_lead,
        }

    def verdict(self, champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
        c, r = champion.primary(), reference.primary()
        o = test["overall"]
        p = o["p_value"]
        direction = "lower" if o["mean_diff"] < 0 else "higher"
        if p is None:
            sig = f"no significance test ({o['untestable']})"
        elif p < SIGNIFICANCE:
            sig = f"significantly {direction} at the 5% level"
        else:
            sig = "not significantly different at the 5% level"
        evidence = (
            "too few origins for the Diebold-Mariano test"
            if p is None
            else f"Diebold-Mariano HLN statistic {o['statistic']:.2f}, two-sided p = {p:.3g}"
        )
        leads = len(test["per_lead"])
        # both figures come from the same per-lead errors on the same origins (overall_differential)
        mse = (
            f"its mean over leads of the MSE, {o['mse_champion']:.4g} vs {o['mse_reference']:.4g}, is"
            if "mse_champion" in o
            else "the mean squared error over the leads is"
        )
        text = (
            f"Champion test mean RMSE {c:.4g} vs {reference.name} {r:.4g} over leads 1-{leads} from the "
            f"same {o['n']} forecast origins; {mse} {direction} by {abs(o['mean_diff']):.3g} "
            f"({evidence}): {sig}."
        )
        if (c < r) != (o["mean_diff"] < 0) and c != r:
            text += (
                " The mean RMSE and the mean MSE order the two models differently (the MSE weighs the "
                "leads with larger errors more); the test is on the MSE."
            )
        return text

    def breakdown_markdown(self, breakdown: dict[str, Any], max_groups: int = 12) -> list[str]:
        names = list(breakdown)
        lines = ["### RMSE per lead", "", "| lead | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for k in range(len(breakdown["champion"])):
            lines.append(f"| {k + 1} | " + " | ".join(_num(breakdown[n][k]) for n in names) + " |")
        lines.append("")
        return lines

    def paired_test_markdown(self, test: dict[str, Any]) -> list[str]:
        lines = ["| lead | RMSE champion | RMSE reference | DM* | p (two-sided) |", "|--:|--:|--:|--:|--:|"]
        for row in test["per_lead"]:
            lines.append(
                f"| {row['lead']} | {_num(row['rmse_champion'])} | "
                f"{_num(row['rmse_reference'])} | {_stat_text(row)} | {_p_text(row)} |"
            )
        o = test["overall"]
        lines += [
            "",
            f"Overall (mean over leads of the squared-error differential, on every origin of the "
            f"headline RMSE, h = {o['h']}, n = {o['n']}): "
            f"DM* = {_stat_text(o)}, p = {_p_text(o)}" + (f" ({o['untestable']})." if o.get("untestable") else "."),
            "",
        ]
        return lines

    def versus_row_markdown(self, row: dict[str, Any]) -> str:
        return f"| {row['reference']} | DM* {_stat_text(row)} | {_p_text(row)} | |"


class ByGroup(PairedTest):
    """Errors by group (one group: a single series or table): a paired bootstrap of the RMSE difference."""

    breakdown_key = "per_group"

    def run(self, champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
        """Paired bootstrap interval of RMSE(champion) - RMSE(reference) (negative: champion better):
        whole groups resampled when there are several, a moving-block bootstrap of one series
        otherwise, over a seeded sample of at most ``PAIRED_TEST_ROWS`` of its rows (the same rows for
        both models)."""
        from storage.stats import paired_bootstrap_rmse

        assert champion.groups is not None and reference.groups is not None
        keys = list(champion.groups)
        if len(keys) >= 2:
            res = paired_bootstrap_rmse(
                [champion.groups[g] for g in keys],
                [reference.groups[g] for g in keys],
                replicates=replicates,
                seed=seed,
            )
            how = (
                f"paired bootstrap over {len(keys)} groups (whole groups resampled: errors within a group are "
                "serially correlated, groups are independent); statistic: mean over groups of the RMSE difference"
            )
            return {"test": how, "overall": res.to_dict()}
        (g,) = keys
        a, b = champion.groups[g], reference.groups[g]
        n = a.size
        if n > PAIRED_TEST_ROWS:
            pick = np.sort(np.random.default_rng(seed).choice(n, PAIRED_TEST_ROWS, replace=False))
            a, b = a[pick], b[pick]
        res = paired_bootstrap_rmse(a, b, replicates=replicates, seed=seed)
        how = (
            f"paired moving-block bootstrap of one series (block length {res.block}, as the errors are "
            "serially correlated); statistic: RMSE difference"
        )
        if n > PAIRED_TEST_ROWS:
            how += f" (on a seeded sample of {PAIRED_TEST_ROWS} of the {n} test rows)"
        return {"test": how, "overall": res.to_dict()}

    def verdict(self, champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
        c, r = champion.primary(), reference.primary()
        o = test["overall"]
        lo, hi = o["low"], o["high"]
        if hi < 0:
            sig = f"the champion's RMSE is lower ({int(o['level'] * 100)}% interval excludes 0)"
        elif lo > 0:
            sig = f"the champion's RMSE is higher ({int(o['level'] * 100)}% interval excludes 0)"
        else:
            sig = "no significant difference (the interval contains 0)"
        return (
            f"Champion test RMSE {c:.4g} vs {reference.name} {r:.4g}: difference {o['estimate']:+.4g}, "
            f"{int(o['level'] * 100)}% bootstrap interval [{lo:+.4g}, {hi:+.4g}]: {sig}."
        )

    def breakdown_markdown(self, breakdown: dict[str, Any], max_groups: int = 12) -> list[str]:
        names = list(breakdown)
        groups = list(breakdown["champion"])
        lines = [
            f"### RMSE per group ({len(groups)} groups"
            + (f", first {max_groups} shown" if len(groups) > max_groups else "")
            + ")",
            "",
            "| group | " + " | ".join(names) + " |",
            "|---" * (len(names) + 1) + "|",
        ]
        for g in groups[:max_groups]:
            lines.append(f"| {g} | " + " | ".join(_num(breakdown[n].get(g)) for n in names) + " |")
        lines.append("")
        return lines

    def versus_row_markdown(self, row: dict[str, Any]) -> str:
        return (
            f"| {row['reference']} | {row['estimate']:+.4g} | {row['p_value']:.3g} | "
            f"[{row['low']:+.4g}, {row['high']:+.4g}] |"
        )


BY_LEAD, BY_GROUP = ByLead(), ByGroup()
PAIRED_TESTS: tuple[PairedTest, ...] = (BY_LEAD, BY_GROUP)


def paired_test_for(errors: Errors) -> PairedTest:
    """The paired test that the layout of ``errors`` takes."""
    return BY_LEAD if errors.values is not None else BY_GROUP


def paired_test_of_report(report: dict[str, Any]) -> PairedTest | None:
    """The paired test a built card (also one read back from report.json) was made with: the one
    whose per-unit breakdown it holds; None when it has none (the champion could not be scored)."""
    return next((t for t in PAIRED_TESTS if t.breakdown_key in report), None)


def paired_test(champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The paired test of the champion against a reference, chosen by the layout of their errors."""
    return paired_test_for(champion).run(champion, reference, replicates=replicates, seed=seed)


def verdict(champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
    """The sentence of ``paired_test``'s result: the difference with its p-value or interval."""
    return paired_test_for(champion).verdict(champion, reference, test)
