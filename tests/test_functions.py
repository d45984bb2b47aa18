"""Function library: numpy references, integer semantics, fixed-point approximations, costs."""

import math

import numpy as np
import pytest
import sympy

from step_hdl import StepTypeError, Tile, fn
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
    ("exp", (Tile("fp32", 4, 8),), 4 * 32),
    ("row_sum", (Tile("fp32", 4, 8),), 32),
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
