"""Function library: numpy references, integer semantics, fixed-point approximations, costs."""

import math

import numpy as np
import pytest
import sympy

from step_hdl import StepTypeError, Tile, floats, fn
from step_hdl.functions import (FUNCTIONS, apply_typed, exp_fixed, round_bf16, saturate, silu_fixed,
                                wrap_int32)
from step_hdl.types import dtype

I16, I32 = dtype("int16"), dtype("int32")


def call(name, *xs, **params):
    f = fn(name, **params)
    return f.spec.apply(f, *xs)


def test_integer_matmul_wraps_at_32_bits():
    a = np.full((1, 4), 32767, np.int16)
    b = np.full((4, 1), 32767, np.int16)
    got = call("matmul", a, b)
    exact = 4 * 32767 * 32767
    assert got.dtype == np.int32
    assert int(got[0, 0]) == (exact + 2**31) % 2**32 - 2**31


def test_requantize_floors_and_saturates():
    x = np.array([[-5, 5, 1 << 20, -(1 << 20)]], np.int32)
    assert call("requantize", x, shift=1, dtype="int16").tolist() == [[-3, 2, 32767, -32768]]


def test_matmul_transposed_and_elementwise_broadcast():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    assert np.allclose(call("matmul", a, b, transpose_b=True), a @ b.T, rtol=1e-6)
    m = a.max(axis=1, keepdims=True)
    assert np.allclose(call("sub", a, m), a - m)
    assert np.array_equal(call("row_max", a), m)


def test_silu_fixed_point_is_close_and_exact_to_its_definition():
    frac = 8
    x = np.arange(-2048, 2048, dtype=np.int16)
    got = silu_fixed(x, frac, I16)
    ref = x / 256.0 / (1 + np.exp(-x / 256.0))
    assert np.abs(got / 256.0 - ref).max() < 0.25           # hard-sigmoid approximation error bound
    # the definition, spelled out once more
    h = np.clip((x.astype(np.int64) >> 2) + 128, 0, 256)
    assert np.array_equal(got, saturate((x.astype(np.int64) * h) >> 8, I16))
    assert call("silu", x.reshape(1, -1), frac=8).dtype == np.int16


def test_exp_fixed_point_accuracy():
    frac = 10
    x = np.arange(-8 * 1024, 1, dtype=np.int16)
    got = exp_fixed(x, frac, I16) / 1024.0
    ref = np.exp(x / 1024.0)
    assert np.abs(got - ref).max() < 4e-3                   # 0.4 % polynomial error + Q10 rounding
    assert exp_fixed(np.array([0]), frac, I16)[0] == 1024


def test_bf16_rounding():
    assert round_bf16(np.array([1.0 + 2**-9], np.float32))[0] == 1.0          # rounds to nearest even
    assert round_bf16(np.array([1.0 + 3 * 2**-9], np.float32))[0] == 1.0 + 2**-7
    out = apply_typed(fn("add"), Tile("bf16", 1, 1), np.float32([[1.0]]), np.float32([[2**-9]]))
    assert out[0, 0] == 1.0


def test_wrap_int32():
    assert wrap_int32(np.array([2**31, -2**31 - 1])).tolist() == [-2**31, 2**31 - 1]


@pytest.mark.parametrize("name, types, flops", [
    ("matmul", (Tile("fp32", 16, 256), Tile("fp32", 256, 32)), 2 * 16 * 256 * 32),
    ("add", (Tile("fp32", 4, 8), Tile("fp32", 4, 8)), 32),
    ("div", (Tile("fp32", 4, 8), Tile("fp32", 4, 1)), 32),
    ("silu", (Tile("fp32", 4, 8),), 8 * 32),
    ("relu", (Tile("int16", 4, 8),), 32),
    ("exp", (Tile("fp32", 4, 8),), 4 * 32),
    ("row_sum", (Tile("fp32", 4, 8),), 32),
    ("col_sum", (Tile("fp32", 4, 8),), 32),
    ("col_max", (Tile("int8", 4, 8),), 32),
    ("div", (Tile("int16", 4, 8), Tile("int32", 1, 8)), 32),
])
def test_flop_counts(name, types, flops):
    f = fn(name)
    assert f.spec.flops(f, *types) == flops


def test_type_rules():
    f = fn("matmul")
    assert f.spec.out_type(f, Tile("int8", 4, 8), Tile("int16", 8, 2)) == Tile("int32", 4, 2)
    with pytest.raises(StepTypeError, match="inner dimensions differ"):
        f.spec.out_type(f, Tile("fp32", 4, 8), Tile("fp32", 4, 2))
    with pytest.raises(StepTypeError, match="cannot combine"):
        f.spec.out_type(f, Tile("fp32", 4, 8), Tile("int8", 8, 2))
    r = fn("retile_row")
    n = sympy.Symbol("n")
    assert r.spec.accum_type(r, Tile("fp32", 0, 8), Tile("fp32", 1, 8), n) == Tile("fp32", n, 8)


def test_every_function_has_reference_and_cost():
    for name, spec in FUNCTIONS.items():
        assert type(spec).__doc__, name
        assert callable(spec.apply) and callable(spec.flops)


def test_unknown_function_and_bad_params():
    with pytest.raises(StepTypeError, match="unknown function 'softmaxx'"):
        fn("softmaxx")
    with pytest.raises(StepTypeError, match="needs parameter"):
        fn("requantize", shift=2)
    with pytest.raises(StepTypeError, match="has no parameter"):
        fn("silu", slope=3)
    assert math.isclose(float(call("exp", np.float32([[0.0]]))[0, 0]), 1.0)


# --------------------------------------------------------------------------- integer div

def test_integer_div_floors_toward_minus_infinity():
    a = np.array([[7, -7, 7, -7, 0, -1, 6, -6]], np.int32)
    b = np.array([[2, 2, -2, -2, 3, 4, -3, -3]], np.int32)
    got = call("div", a, b)
    assert got.dtype == np.int32
    assert got.tolist() == [[3, -4, -4, 3, 0, -1, -2, 2]]
    assert np.array_equal(got, np.floor_divide(a, b))


def test_integer_div_by_zero_is_zero_and_wraps():
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    a = np.array([[5, -5, 0, lo, lo, hi, lo]], np.int32)
    b = np.array([[0, 0, 0, 0, -1, -1, 1]], np.int32)
    got = call("div", a, b)            # no numpy divide-by-zero warning (the suite runs with -W error)
    assert got.tolist() == [[0, 0, 0, 0, lo, -hi, lo]]     # -2**31 // -1 = 2**31 wraps to -2**31


def test_integer_div_broadcasts_and_matches_numpy():
    rng = np.random.default_rng(1)
    a = rng.integers(-2**31, 2**31, (4, 4)).astype(np.int32)
    b = rng.integers(-300, 300, (1, 4)).astype(np.int16)
    b[0, 1] = 0
    got = call("div", a, b)
    with np.errstate(divide="ignore"):
        ref = np.floor_divide(a.astype(np.int64), b.astype(np.int64))   # numpy also gives 0 for x // 0
    assert np.array_equal(got, ref.astype(np.int32)) and got.shape == (4, 4)
    assert np.array_equal(call("div", a[:, :1].astype(np.int8), np.int8([[3, -3]])),
                          np.floor_divide(a[:, :1].astype(np.int8).astype(np.int64), [[3, -3]]))
    f = fn("div")
    assert f.spec.out_type(f, Tile("int8", 4, 4), Tile("int16", 1, 4)) == Tile("int32", 4, 4)
    assert f.spec.out_type(f, Tile("int8", 1, 1), Tile("int8", 2, 3)) == Tile("int32", 2, 3)
    assert f.spec.out_type(f, Tile("bf16", 4, 4), Tile("bf16", 4, 1)) == Tile("bf16", 4, 4)
    with pytest.raises(StepTypeError, match="cannot combine int8 and fp32"):
        f.spec.out_type(f, Tile("int8", 4, 4), Tile("fp32", 4, 4))
    with pytest.raises(StepTypeError, match="operand rows 4 and 3 differ"):
        f.spec.out_type(f, Tile("int8", 4, 4), Tile("int8", 3, 4))


def test_float_div_unchanged():
    a, b = np.float32([[1.0, -3.0]]), np.float32([[4.0, 2.0]])
    assert call("div", a, b).tolist() == [[0.25, -1.5]]


def test_integer_div_in_a_graph():
    """The interpreter runs integer div (int16 / int16 -> int32) on whole streams."""
    from step_hdl import Graph, run
    g = Graph("div")
    g.tensor("x", 8, 4, "int16")
    g.tensor("y", 8, 4, "int16")
    g.tensor("q", 8, 4, "int32")
    x = g.load("x", tile=(4, 4), out_shape=[2], stride=[1], name="lx")
    y = g.load("y", tile=(4, 4), out_shape=[2], stride=[1], name="ly")
    g.store(g.map([x, y], "div", name="q"), "q", tile=(4, 4), name="sq")
    rng = np.random.default_rng(2)
    xv = rng.integers(-1000, 1000, (8, 4)).astype(np.int16)
    yv = rng.integers(-9, 9, (8, 4)).astype(np.int16)
    yv[0, 0] = 0
    res = run(g, tensors={"x": xv, "y": yv})
    q = res.memory["q"]
    ref = np.where(yv == 0, 0, xv.astype(np.int64) // np.where(yv == 0, 1, yv))
    assert q.dtype == np.int32 and np.array_equal(q, ref)


# --------------------------------------------------------------------------- column reductions

def test_column_sum_and_max():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (5, 3)).astype(np.int8)
    s, m = call("col_sum", a), call("col_max", a)
    assert s.dtype == np.int32 and s.tolist() == [a.astype(np.int64).sum(axis=0).tolist()]
    assert m.dtype == np.int8 and m.tolist() == [a.max(axis=0).tolist()]
    big = np.full((4, 2), 2**31 - 1, np.int32)
    assert call("col_sum", big).tolist() == [[wrap_int32(np.int64(4 * (2**31 - 1))).item()] * 2]
    x = rng.standard_normal((4, 6)).astype(np.float32)
    assert np.allclose(call("col_sum", x), x.sum(axis=0, keepdims=True), rtol=1e-6)
    assert np.array_equal(call("col_max", x), x.max(axis=0, keepdims=True))
    # no rows: sum 0, max the lowest value of the type (identity of max)
    assert call("col_sum", np.zeros((0, 3), np.int16)).tolist() == [[0, 0, 0]]
    assert call("col_max", np.zeros((0, 3), np.int16)).tolist() == [[-32768] * 3]
    assert call("col_max", np.zeros((0, 2), np.float32)).tolist() == [[-np.inf] * 2]


def test_column_reduction_types():
    n = sympy.Symbol("n")
    for name, dt, out in (("col_sum", "int8", "int32"), ("col_sum", "bf16", "bf16"), ("col_max", "int16", "int16"),
                          ("col_max", "fp32", "fp32")):
        f = fn(name)
        assert f.spec.out_type(f, Tile(dt, n, 8)) == Tile(out, 1, 8)
        assert f.spec.flops(f, Tile(dt, n, 8)) == 8 * n
    out = apply_typed(fn("col_sum"), Tile("bf16", 1, 2), np.float32([[1.0, 1.0], [2**-9, 0.0]]))
    assert out.tolist() == [[1.0, 1.0]]                      # rounded to bf16
    from step_hdl.functions import ShapeOnly
    assert apply_typed(fn("col_max"), Tile("int8", 1, 8), ShapeOnly((5, 8), I16)).shape == (1, 8)


# --------------------------------------------------------------------------- matmul transpose_a

def test_matmul_transpose_a():
    rng = np.random.default_rng(4)
    a = rng.integers(-2**15, 2**15, (3, 5)).astype(np.int16)      # [k, m]
    b = rng.integers(-2**15, 2**15, (3, 2)).astype(np.int16)      # [k, n]
    got = call("matmul", a, b, transpose_a=True)
    assert got.dtype == np.int32
    assert np.array_equal(got, wrap_int32(a.T.astype(np.int64) @ b.astype(np.int64)))
    bt = rng.integers(-2**15, 2**15, (2, 3)).astype(np.int16)     # [n, k]
    both = call("matmul", a, bt, transpose_a=True, transpose_b=True)
    assert np.array_equal(both, wrap_int32(a.T.astype(np.int64) @ bt.T.astype(np.int64)))
    # two rows: their outer product (k = 1), wrapping at 32 bits
    r = np.full((1, 3), -32768, np.int16)
    assert call("matmul", r, r, transpose_a=True).tolist() == [[wrap_int32(np.int64(2**30)).item()] * 3] * 3
    x, y = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    assert np.allclose(call("matmul", x, y, transpose_a=True), x.T @ y, rtol=1e-5)


def test_matmul_transpose_a_types_and_params():
    f = fn("matmul", transpose_a=True)
    assert f.spec.out_type(f, Tile("int8", 4, 6), Tile("int16", 4, 2)) == Tile("int32", 6, 2)
    assert f.spec.out_type(f, Tile("int16", 1, 4), Tile("int16", 1, 4)) == Tile("int32", 4, 4)
    assert f.spec.flops(f, Tile("fp32", 4, 6), Tile("fp32", 4, 2)) == 2 * 6 * 4 * 2
    g = fn("matmul", transpose_a=True, transpose_b=True)
    assert g.spec.out_type(g, Tile("fp32", 4, 6), Tile("fp32", 2, 4)) == Tile("fp32", 6, 2)
    with pytest.raises(StepTypeError, match="inner dimensions differ"):
        f.spec.out_type(f, Tile("fp32", 4, 6), Tile("fp32", 6, 2))
    with pytest.raises(StepTypeError, match="transpose_a must be true or false, got 1"):
        fn("matmul", transpose_a=1)
    # the default is not stored: existing graphs keep their names and JSON
    assert fn("matmul", transpose_a=False) == fn("matmul") and str(fn("matmul")) == "matmul(transpose_b=False)"
    assert f.to_json() == {"fn": "matmul", "transpose_a": True, "transpose_b": False}
    from step_hdl.functions import ShapeOnly, fn_from_json
    assert fn_from_json(f.to_json()) == f
    assert apply_typed(f, Tile("int32", 6, 2), ShapeOnly((4, 6), I16), ShapeOnly((4, 2), I16)).shape == (6, 2)


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "fp32", "bf16"])
def test_relu_is_max_with_zero_in_the_operand_type(dt):
    from step_hdl.types import dtype as make_dtype
    t = Tile(dt, 2, 8)
    f = fn("relu")
    assert f.spec.out_type(f, t) == t
    info = np.iinfo(make_dtype(dt).numpy) if make_dtype(dt).is_int else None
    x = (np.array([[info.min, -1, 0, 1, info.max, -7, 7, 3]] * 2, dtype=make_dtype(dt).numpy) if info
         else np.array([[-1.5, -0.0, 0.0, 2.25, -1e30, 1e30, -3, 3]] * 2, dtype=np.float32))
    y = apply_typed(f, t, x)
    want = np.maximum(x, 0).astype(y.dtype)
    if dt == "bf16":        # a bf16 result is rounded to bf16 like every bf16 result (apply_typed)
        want = round_bf16(want)
    assert y.dtype == make_dtype(dt).numpy and np.array_equal(y, want)


def test_float_matmul_split_into_group_sums_is_the_whole_matmul():
    """A float matmul cut into k-pieces of 4, 8 or 16 (physical tiles): each piece's group sums (``matmul``
    with ``groups``) added to the running sum (Accum ``add_groups``) from +0, then rounded once (``convert``)
    is the logical matmul bit for bit."""
    from step_hdl import floats
    from step_hdl.functions import apply_typed
    rng = np.random.default_rng(4)
    a = floats.round_to(rng.standard_normal((4, 32)) * 10, floats.BF16)
    b = floats.round_to(rng.standard_normal((32, 8)), floats.BF16)
    whole = apply_typed(fn("matmul"), Tile("bf16", 4, 8), a, b)
    for k in (4, 8, 16):
        g = fn("matmul", groups=True)
        acc = np.zeros((4, 8), np.float32)
        for t in range(0, 32, k):
            part = apply_typed(g, g.spec.out_type(g, Tile("bf16", 4, k), Tile("bf16", k, 8)), a[:, t:t + k], b[t:t + k])
            assert part.shape == (4, 8 * k // 4)
            acc = apply_typed(fn("add_groups"), Tile("fp32", 4, 8), acc, part)
        got = apply_typed(fn("convert", dtype="bf16"), Tile("bf16", 4, 8), acc)
        assert np.array_equal(got.view(np.uint32), whole.view(np.uint32)), k
    kept = apply_typed(fn("matmul", dtype="fp32"), Tile("fp32", 4, 8), a, b)
    assert np.array_equal(kept.view(np.uint32), floats.matmul(a, b, floats.FP32).view(np.uint32))


@pytest.mark.parametrize("make, message", [
    (lambda: fn("matmul", groups=True, dtype="fp32"), "matmul: groups=true gives fp32 group sums; it takes no dtype"),
    (lambda: fn("matmul", dtype="int32"), "matmul: dtype sets a float result's format, got int32"),
    (lambda: fn("matmul", groups=1), "matmul: groups must be true or false, got 1"),
    (lambda: fn("convert", dtype="int8"), "convert: dtype must be a float type (bf16, fp32), got int8"),
    (lambda: fn("convert", dtype="fp32").spec.out_type(fn("convert", dtype="fp32"), Tile("int16", 4, 4)),
     "takes float tiles, got int16 (integers use requantize)"),
    (lambda: fn("matmul", groups=True).spec.out_type(fn("matmul", groups=True), Tile("int16", 4, 4),
                                                     Tile("int16", 4, 4)), "groups and dtype are for float tiles"),
    (lambda: fn("add_groups").spec.out_type(fn("add_groups"), Tile("fp32", 4, 4), Tile("fp32", 4, 6)),
     "is not [rows, G · cols] group sums of the state"),
    (lambda: fn("add_groups").spec.out_type(fn("add_groups"), Tile("int32", 4, 4), Tile("int32", 4, 8)),
     "adds float group sums"),
    (lambda: fn("affine", scale="2"), "affine: scale must be a number (an integer for integer tiles), got '2'"),
    (lambda: fn("affine", offset=float("nan")), "affine: offset must be a number (an integer for integer tiles), "
                                                "got nan"),
    (lambda: fn("affine", scale=0.5).spec.out_type(fn("affine", scale=0.5), Tile("int16", 1, 1)),
     "function affine(offset=0, scale=0.5) on int16 tiles takes an integer scale, got 0.5 (float constants are "
     "for float tiles)"),
    (lambda: fn("row_group_sums").spec.out_type(fn("row_group_sums"), Tile("int16", 4, 8)),
     "function row_group_sums takes float tiles, got int16 (integer row sums are exact: row_sum)"),
])
def test_float_function_errors(make, message):
    with pytest.raises(StepTypeError) as exc:
        make()
    assert message in str(exc.value)


@pytest.mark.parametrize("dt", ["bf16", "fp32"])
def test_float_affine_rounds_the_constants_the_product_and_the_sum(dt):
    """``x·scale + offset`` on float tiles: the constants in the tile's format, two roundings; the FLOPs."""
    fmt = floats.fmt_of(dt)
    x = floats.round_to(np.random.default_rng(1).standard_normal((4, 4)) * 100, fmt).astype(np.float32)
    f = fn("affine", scale=0.1, offset=-2.7)
    got = apply_typed(f, Tile(dt, 4, 4), x)
    want = floats.add(floats.mul(x, floats.round_to(0.1, fmt), fmt), floats.round_to(-2.7, fmt), fmt)
    assert f.spec.out_type(f, Tile(dt, 4, 4)) == Tile(dt, 4, 4)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)) and f.spec.flops(f, Tile(dt, 4, 4)) == 32
    assert np.array_equal(apply_typed(fn("affine", scale=2.0), Tile(dt, 4, 4), x), floats.mul(x, 2.0, fmt))
