"""The bit-level float definition (step_hdl.floats) against independent arithmetic: ml_dtypes bfloat16
and numpy float32, exact where the definitions coincide; where they do not (subnormals, -0, NaN payloads)
the difference is the documented rule, checked explicitly."""

import ml_dtypes
import numpy as np
import pytest

from step_hdl import floats as F
from step_hdl.functions import apply_typed, fn
from step_hdl.types import Tile

BF = ml_dtypes.bfloat16
ALL_BF16 = F.from_bits(np.arange(1 << 16, dtype=np.uint32), F.BF16)


def bf16_bits(x):
    return F.to_bits(x, F.BF16)


def edge_values():
    """Zeros, subnormals, the smallest and largest normals, Inf, NaN, ones and their neighbours."""
    bits = [0x0000, 0x8000, 0x0001, 0x007F, 0x8001, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0,
            0x3F80, 0x3F81, 0xBF80, 0x4000, 0x3F7F, 0x0081, 0x7F7E]
    return F.from_bits(np.array(bits, dtype=np.uint32), F.BF16)


def with_our_rules(r, fmt):
    """An independent library's result given our documented rules: subnormal results flushed, -0 as +0,
    NaN canonical."""
    r = np.where(np.abs(r) < F.MIN_NORMAL, np.float32(0), r)
    return np.where(np.isnan(r), F.from_bits(np.full(r.shape, fmt.nan), fmt), r).astype(np.float32)


def ml_reference(op, a, b):
    """ml_dtypes' bf16 result (float32 arithmetic rounded to bfloat16), given our rules."""
    with np.errstate(all="ignore"):
        return with_our_rules(op(a.astype(BF), b.astype(BF)).astype(np.float32), F.BF16)


def assert_same_but_tininess(got, want, exact):
    """Bit-equal, except the documented difference: tininess after rounding. A result just below
    2**-126 that rounds up to it on the subnormal grid is 2**-126 in IEEE-style arithmetic (then not
    flushed), while here it is rounded at full precision first, stays below 2**-126 and is +0."""
    differ = bf16_bits(got) != bf16_bits(want)
    assert np.all((got[differ] == 0) & (np.abs(want[differ]) == np.float32(F.MIN_NORMAL))
                  & (np.abs(exact[differ]) < F.MIN_NORMAL)), list(zip(got[differ], want[differ]))
    return int(differ.sum())


def flushed(x):
    """Operands as the definition reads them (subnormals and -0 as +0)."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < F.MIN_NORMAL, np.float32(0), x).astype(np.float32)


OPS = {"add": (F.add, np.add), "sub": (F.sub, np.subtract), "mul": (F.mul, np.multiply),
       "div": (F.div, np.divide), "max": (F.fmax, np.maximum)}


@pytest.mark.parametrize("name", sorted(OPS))
def test_bf16_ops_match_ml_dtypes_on_random_values(name):
    ours, theirs = OPS[name]
    rng = np.random.default_rng(1)
    # random bit patterns cover every exponent (Inf and NaN included); operands flushed as the units read them
    a = flushed(F.from_bits(rng.integers(0, 1 << 16, 20000), F.BF16))
    b = flushed(F.from_bits(rng.integers(0, 1 << 16, 20000), F.BF16))
    want = ml_reference(theirs, a, b)
    # ml_dtypes rounds the float32 result of a float32 operation: the same as one rounding of the exact
    # result for add, sub, mul and div (24 >= 2·8 + 2), except where float32 itself underflowed: there
    # both are below bf16's smallest normal and flush to zero
    with np.errstate(all="ignore"):
        exact = theirs(a.astype(np.float64), b.astype(np.float64))
    assert assert_same_but_tininess(ours(a, b), want, exact) <= 10


@pytest.mark.parametrize("name", sorted(OPS))
def test_bf16_ops_on_edge_values(name):
    ours, theirs = OPS[name]
    e = edge_values()
    a, b = np.meshgrid(e, e)
    got = ours(a, b)
    want = ml_reference(theirs, flushed(a), flushed(b))
    with np.errstate(all="ignore"):
        exact = theirs(flushed(a).astype(np.float64), flushed(b).astype(np.float64))
    assert assert_same_but_tininess(got, want, exact) == (4 if name == "mul" else 0)
    # the documented differences from IEEE, measured against ml_dtypes without our rules
    with np.errstate(all="ignore"):
        ieee = theirs(a.astype(BF), b.astype(BF)).astype(np.float32)
    assert not np.any(np.signbit(got) & (got == 0))                    # no -0, ever
    assert np.all(bf16_bits(got[np.isnan(got)]) == F.BF16.nan)          # canonical NaN
    assert np.array_equal(np.isnan(got), np.isnan(ieee) | np.isnan(want))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_fp32_ops_match_numpy_float32(name):
    ours, theirs = OPS[name]
    rng = np.random.default_rng(2)
    a = flushed(rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    b = flushed(rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    with np.errstate(all="ignore"):
        want = with_our_rules(theirs(a, b), F.FP32)       # numpy: correctly rounded, gradual underflow
    got = ours(a, b, F.FP32)
    tiny = np.abs(want) == 0
    # one documented difference: tininess after rounding. numpy rounds a tiny product on the subnormal
    # grid; we round it at full precision first, so a product just below 2**-126 that rounds up to it is
    # 2**-126 here and (flushed) 0 there
    differ = F.to_bits(got, F.FP32) != F.to_bits(want, F.FP32)
    assert np.all(tiny[differ] & (np.abs(got[differ]) == np.float32(F.MIN_NORMAL)))
    assert differ.sum() <= 2


def test_rounding_ties_to_even_and_limits():
    # a tie at the largest finite value rounds to even: up, to Inf
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2.0 ** -126 * (1 - 2 ** -9), 2.0 ** -127,
                  F.BF16.max_finite, F.BF16.max_finite + 2.0 ** 119, -3.5e38, -0.0])
    assert F.round_to(x, F.BF16).tolist() == [1.0, 1 + 2 ** -6, -1.0, 2.0 ** -126, 0.0, F.BF16.max_finite,
                                              np.inf, -np.inf, 0.0]
    assert not np.signbit(F.round_to(np.array([-0.0, -1e-40]), F.BF16)).any()
    # ml_dtypes' own conversion agrees on every normal float32 value it rounds to a normal bf16
    rng = np.random.default_rng(3)
    v = rng.standard_normal(10000).astype(np.float32) * np.float32(2.0) ** rng.integers(-120, 120, 10000)
    assert np.array_equal(bf16_bits(F.round_to(v.astype(np.float64), F.BF16)),
                          bf16_bits(v.astype(BF).astype(np.float32)))


def test_exp_over_every_bf16_input():
    y = F.exp_bf16(ALL_BF16)
    x = F.read(ALL_BF16)
    normal = np.isfinite(x) & (np.abs(x) >= F.MIN_NORMAL)
    with np.errstate(all="ignore"):
        exact = np.exp(x)
    cr = F.round_to(exact, F.BF16)                  # the correctly rounded result, by our rules
    ulps = np.abs(bf16_bits(y).astype(np.int64) - bf16_bits(cr).astype(np.int64))
    assert ulps[normal].max() == 1 and np.count_nonzero(ulps[normal]) == 6
    # the special cases
    special = F.from_bits(np.array([0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x4300, 0xC300]), F.BF16)
    assert bf16_bits(F.exp_bf16(special)).tolist() == [0x3F80, 0x3F80, 0x3F80, 0x7F80, 0x0000, 0x7FC0,
                                                       0x7F80, 0x0000]       # exp(+-128) -> Inf, 0


def test_silu_over_every_bf16_input():
    y = F.silu_bf16(ALL_BF16)
    x = F.read(ALL_BF16)
    with np.errstate(all="ignore"):
        exact = x / (1 + np.exp(-x))
    cr = F.round_to(exact, F.BF16)
    ulps = np.abs(bf16_bits(y).astype(np.int64) - bf16_bits(cr).astype(np.int64))
    # below -88.7 exp(-x) overflows bf16 and SiLU is 0, where the true value is at most 3e-37
    inside = np.isfinite(x) & (np.abs(x) >= F.MIN_NORMAL) & (x > -88.7) & (np.abs(exact) >= F.MIN_NORMAL)
    assert ulps[inside].max() == 2
    assert np.count_nonzero(ulps[inside]) < 0.025 * inside.sum()
    assert np.all(y[x < -88.7] == 0)
    assert F.silu_bf16(np.float32([-np.inf, np.inf, 0.0])).tolist() == [0.0, np.inf, 0.0]


def test_sums_follow_the_fixed_order():
    rng = np.random.default_rng(4)
    t = F.round_to(rng.standard_normal((3, 24)) * 10.0 ** rng.integers(-3, 4, (3, 24)), F.BF16)
    whole = F.fp32_sum(t)
    # by hand: groups of four, (t0 + t1) + (t2 + t3), added to the running fp32 sum
    acc = np.zeros(3, np.float32)
    for g in range(0, 24, 4):
        pair = [np.float32(np.float32(t[:, g + i] + t[:, g + i + 1])) for i in (0, 2)]
        acc = np.float32(acc + np.float32(pair[0] + pair[1]))
    assert np.array_equal(whole, acc)
    # P-independent: continuing over any split at a multiple of 4 is the same sum (physical tiles of 4, 8)
    for split in (4, 8, 12, 16, 20):
        assert np.array_equal(F.fp32_sum(t[:, split:], F.fp32_sum(t[:, :split])), whole)
    # zero padding changes nothing (zeros are unsigned)
    assert np.array_equal(F.fp32_sum(np.concatenate([t[:, :22], np.zeros((3, 2), np.float32)], 1)),
                          F.fp32_sum(t[:, :22]))


def test_matmul_products_in_fp32_one_rounding():
    rng = np.random.default_rng(5)
    a = F.round_to(rng.standard_normal((5, 12)), F.BF16)
    b = F.round_to(rng.standard_normal((12, 7)), F.BF16)
    got = F.matmul(a, b)
    want = F.round_to(F.fp32_sum(a[:, :, None] * b[None, :, :], axis=1).astype(np.float64), F.BF16)
    assert np.array_equal(got, want)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(got - ref) / np.abs(ref).max()) < 2 ** -8


def test_the_interpreter_uses_the_definition():
    rng = np.random.default_rng(6)
    a = F.round_to(rng.standard_normal((4, 8)), F.BF16)
    b = F.round_to(rng.standard_normal((8, 4)), F.BF16)
    t = Tile("bf16", 4, 4)
    assert np.array_equal(apply_typed(fn("matmul"), t, a, b), F.matmul(a, b))
    assert np.array_equal(apply_typed(fn("exp"), Tile("bf16", 4, 8), a), F.exp_bf16(a))
    assert np.array_equal(apply_typed(fn("silu"), Tile("bf16", 4, 8), a), F.silu_bf16(a))
    assert np.array_equal(apply_typed(fn("row_sum"), Tile("bf16", 4, 1), a), F.reduce_sum(a, 1))
    assert np.array_equal(apply_typed(fn("div"), Tile("bf16", 4, 8), a, a[:, :1]), F.div(a, a[:, :1]))
    # bf16 with fp32 accumulates in fp32 (the bf16 operand widens exactly)
    assert fn("add").spec.out_type(fn("add"), Tile("fp32", 4, 8), Tile("bf16", 4, 8)) == Tile("fp32", 4, 8)


def test_a_subnormal_partial_sum_is_flushed():
    """The fast path (numpy's sequential float32 accumulate) gives way to one addition at a time where a
    partial sum is subnormal: here 2**-125 - (2**-125 - 2**-148) is 2**-148 in IEEE arithmetic, 0 here."""
    x, y, z = 2.0 ** -125, 2.0 ** -125 - 2.0 ** -148, 2.0 ** -125
    t = np.float32([[x, 0, 0, 0, -y, 0, 0, 0, z, 0, 0, 0]])
    assert F.fp32_sum(t).tolist() == [np.float32(z)]
    ieee = np.add.accumulate(np.float32([0, x, -y, z]), dtype=np.float32)[-1]
    assert ieee != np.float32(z)
