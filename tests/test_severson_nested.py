"""``python -m pipeline_bench.severson_nested``: the nested check inside Severson batches 1-2 must
never read batch 3 (the discovery suite's test), and says so when asked to."""

from __future__ import annotations

import pytest

from pipeline_bench.severson_nested import FOLDS, main


def test_the_default_folds_stay_inside_batches_1_and_2():
    assert all("b3" not in fold for fold in FOLDS)
    assert set(FOLDS) == {"b1:b2", "b2:b1"}


@pytest.mark.parametrize("fold", ["b1:b3", "b3:b2"])
def test_a_fold_that_reads_batch_3_is_refused(fold, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--folds", fold])
    assert exit_info.value.code == 2
    assert "reads batch 3" in capsys.readouterr().err


@pytest.mark.parametrize("fold", ["b1", "b1:b1", "x1:b2", "b1:b2:b1"])
def test_a_malformed_fold_is_refused_by_name(fold, capsys):
    with pytest.raises(SystemExit):
        main(["--folds", fold])
    assert repr(fold) in capsys.readouterr().err


def test_without_the_data_file_it_skips_with_the_reason(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path), "--seeds", "0"]) == 0
    assert "severson.csv not found" in capsys.readouterr().out
