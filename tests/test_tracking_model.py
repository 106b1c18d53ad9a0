"""The pyfunc model class on its own (no MLflow store): vector programs, static inputs, programs
evaluated one row per lane, and a clear error for a missing input."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from mlflow.pyfunc import PythonModelContext  # noqa: E402

from storage.pyfunc_model import NDVMProgramModel  # noqa: E402


def load(tmp_path, source, params, static=None):
    (tmp_path / "program.scm").write_text(source)
    (tmp_path / "fit.json").write_text(json.dumps({"params": params, "static_inputs": static or {}}))
    model = NDVMProgramModel()
    model.load_context(PythonModelContext(artifacts={"program": str(tmp_path / "program.scm"),
                                                     "fit": str(tmp_path / "fit.json")}, model_config=None))
    return model


def test_vector_program_with_a_static_input(tmp_path):
    model = load(tmp_path, "(param a 0.5) (+ (* a x) t)", {"a": 2.0}, static={"t": 10.0})
    got = model.predict(None, pd.DataFrame({"x": [1.0, 2.0, 3.0]}))
    np.testing.assert_array_equal(got, [12.0, 14.0, 16.0])


def test_branching_program_is_evaluated_one_row_per_lane(tmp_path):
    source = "(param a 0.5) (param b 2.0) (if (> x 1) (* a x) (* b x))"
    model = load(tmp_path, source, {"a": 0.5, "b": 2.0})
    x = np.array([0.5, 2.0, 3.0, 1.0])
    got = model.predict(None, pd.DataFrame({"x": x}))
    program = ndvm.compile(source)
    want = [program.run({"a": 0.5, "b": 2.0}, {"x": float(v)}) for v in x]
    np.testing.assert_array_equal(got, want)


def test_missing_input_and_missing_parameter_are_errors(tmp_path):
    model = load(tmp_path, "(param a 0.5) (+ (* a x) t)", {"a": 2.0})
    with pytest.raises(ValueError, match="input 't'"):
        model.predict(None, pd.DataFrame({"x": [1.0]}))
    with pytest.raises(ValueError, match="lack"):
        load(tmp_path, "(param a 0.5) (param b 1.0) (* a b x)", {"a": 2.0})
