"""The tape-op table (native/src/prims.h, NDVM_TAPE_OPS) as the binding exports it.

Replay, backward and the work accounting dispatch on these properties instead of on the ops'
positions in the enum, so the table must say what the kernels do: the checks below pin the
table's invariants and tie a few properties to observable behaviour (no gradient through a
piecewise-constant op, an op that records a guard, per-lane linear algebra that charges work).
"""

import numpy as np
import pytest

import ndvm
from ndvm import _native

KINDS = {
    "binary",
    "unary",
    "slice",
    "concat",
    "transpose",
    "gemm",
    "reduce",
    "det",
    "inv",
    "solve",
    "cholesky",
    "rounding",
    "intdiv",
    "guard",
}
FLAGS = (
    "arith",
    "linear",
    "no_gradient",
    "saves_values",
    "lane_adjoint",
    "extra_work",
    "one_lane_backward",
    "rounds_f32",
)


@pytest.fixture(scope="module")
def ops():
    return {op["name"]: op for op in _native.tape_ops()}


def test_every_op_has_a_unique_name_a_known_kind_and_every_property(ops):
    table = _native.tape_ops()
    assert len(ops) == len(table) > 40  # names are unique
    for op in table:
        assert op["kind"] in KINDS, op
        assert op["arity"] in (-1, 1, 2), op
        for flag in FLAGS:
            assert isinstance(op[flag], bool), (op["name"], flag)


def test_the_four_arith_ops_come_first_in_the_order_of_the_compilers_opcodes():
    # compiler.cc emits N_ARITH2 nodes whose opcode is the tape op: + - * / are 0..3
    names = [op["name"] for op in _native.tape_ops()]
    assert names[:4] == ["add", "sub", "mul", "div"]
    assert [op["name"] for op in _native.tape_ops() if op["arith"]] == ["add", "sub", "mul", "div"]


def test_properties_are_consistent(ops):
    for name, op in ops.items():
        assert not (op["linear"] and op["no_gradient"]), name
        # derived in the binding: an op with a gradient that is not linear reads saved values
        assert op["saves_values"] == (not op["linear"] and not op["no_gradient"]), name
        if op["lane_adjoint"]:
            assert op["extra_work"], name  # per-lane linear algebra is charged beyond its output
        if op["kind"] in ("rounding", "intdiv", "guard"):
            assert op["no_gradient"], name
        else:
            assert not op["no_gradient"], name


def test_properties_of_representative_ops(ops):
    assert ops["add"]["linear"] and ops["add"]["one_lane_backward"] and ops["add"]["arity"] == 2
    assert ops["mul"]["saves_values"] and not ops["mul"]["linear"]
    assert ops["gemm"]["one_lane_backward"] and ops["gemm"]["extra_work"] and not ops["gemm"]["lane_adjoint"]
    assert {n for n, op in ops.items() if op["lane_adjoint"]} == {"inv", "solve", "det", "logdet", "cholesky"}
    assert ops["concat"]["arity"] == -1 and ops["guard"]["arity"] == -1
    assert ops["slice"]["linear"] and not ops["slice"]["rounds_f32"]
    assert not ops["cholesky"]["rounds_f32"] and ops["inv"]["rounds_f32"]


def test_no_gradient_flows_through_piecewise_constant_ops(ops):
    assert ops["floor"]["no_gradient"] and ops["modulo"]["no_gradient"]
    prog = ndvm.compile("(param a 1.3) (+ (floor (* a 3.0)) (modulo (round (* a 10.0)) 4.0))")
    values, grads = prog.value_and_grad(np.array([[1.3], [2.7]]))
    assert values.tolist() == [3.0 + 1.0, 8.0 + 3.0]
    assert grads.tolist() == [[0.0], [0.0]]


def test_a_linear_op_gradient_does_not_depend_on_the_values(ops):
    assert ops["vsum"]["linear"] and ops["transpose"]["linear"]
    prog = ndvm.compile("(param a 0.5) (param b 2.0) (vsum (transpose (mat (vec a b) (vec b a))))")
    _, grads = prog.value_and_grad(np.array([[0.5, 2.0], [-7.0, 40.0]]))
    assert grads.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_lane_adjoint_ops_charge_work_beyond_their_outputs(ops):
    # an extra_work op is charged n^3 for an n x n matrix: a 40 x 40 inverse exceeds a budget that
    # its 1,600 output elements alone would fit
    assert ops["inv"]["extra_work"]
    source = "(vsum (inv (+ (eye 40) (ones 40 40))))"
    assert ndvm.compile(source).run() == pytest.approx(40 / 41)
    with pytest.raises(ndvm.LimitError, match="work"):
        ndvm.compile(source, limits=ndvm.Limits(max_work=20_000)).run()
