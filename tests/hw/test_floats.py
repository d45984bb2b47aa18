"""The hardware floating point (``units.floats``) bit for bit against its definition (``step_hdl.floats``):
every operation on random bit patterns of both formats (every exponent, Inf and NaN included), on all pairs
of edge values (zeros of both signs, subnormals, the smallest and largest normals, Inf, NaN, 1 and its
neighbours), on operands of nearby exponents and opposite signs (where an adder cancels), exp and SiLU
over every bf16 input, and the fixed-order fp32 sum onto a running sum."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from step_hdl import floats as F
from step_hdl.units import floats as H

B, S = F.BF16, F.FP32
EDGES = {B: [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81,
             0x3F80, 0xBF80, 0x3F81, 0x3F7F, 0x4000, 0x0081, 0x3F00],
         S: [0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
             0xFF800000, 0x7FC00000, 0x7F800001, 0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF, 0x40000000,
             0x00800001, 0x33800000]}


def evaluate(build, widths, out_bits, vectors) -> np.ndarray:
    """``build(m, *inputs)`` evaluated on every vector of input bit patterns (the Amaranth simulator)."""
    m = Module()
    ins = [Signal(w, name=f"in{k}") for k, w in enumerate(widths)]
    out = Signal(out_bits)
    m.d.comb += out.eq(build(m, *ins))
    got = []

    async def bench(ctx):
        for vec in vectors:
            for sig, v in zip(ins, vec):
                ctx.set(sig, int(v))
            got.append(ctx.get(out))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.uint64)


def _random(fmt, n, rng):
    return rng.integers(0, 1 << fmt.bits, n, dtype=np.uint64)


def _nearby(fmt, n, rng):
    """Pairs whose exponents differ by 0 to 3, of random signs: the adder's cancelling cases."""
    a = _random(fmt, n, rng)
    e = (a >> np.uint64(fmt.man)).astype(np.int64) & 0xFF
    eb = np.clip(e - rng.integers(0, 4, n), 0, 255).astype(np.uint64)
    sign = rng.integers(0, 2, n).astype(np.uint64) << np.uint64(fmt.bits - 1)
    b = sign | (eb << np.uint64(fmt.man)) | rng.integers(0, 1 << fmt.man, n).astype(np.uint64)
    return a, b


def _check(got, want, a, b=None):
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(hex(a[i]),) + ((hex(b[i]),) if b is not None else ()) + (hex(got[i]), hex(want[i]))
                          for i in bad[:5]]


BINARY = {  # name -> (hardware, reference)
    "add": (H.add, F.add), "sub": (H.sub, F.sub), "mul": (H.mul, F.mul), "div": (H.div, F.div),
    "max": (H.fmax, F.fmax),
}
#: (operand a, operand b, result) formats
FORMATS = [(B, B, B), (S, S, S), (B, S, S), (B, B, S), (S, S, B)]


@pytest.mark.parametrize("fa, fb, fo", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_operations_are_bit_exact(name, fa, fb, fo):
    if name == "max" and fo.man < max(fa.man, fb.man):
        pytest.skip("max is exact: its result format holds both operands")
    hw, ref = BINARY[name]
    rng = np.random.default_rng([fa.man, fb.man, fo.man, len(name)])
    n = 1500
    a = np.concatenate([_random(fa, n, rng), np.repeat(EDGES[fa], len(EDGES[fb]))]).astype(np.uint64)
    b = np.concatenate([_random(fb, n, rng), np.tile(EDGES[fb], len(EDGES[fa]))]).astype(np.uint64)
    if fa is fb:
        na, nb = _nearby(fa, n, rng)
        a, b = np.concatenate([a, na]), np.concatenate([b, nb])
    got = evaluate(lambda m, x, y: hw(m, x, y, fa, fb, fo), [fa.bits, fb.bits], fo.bits, list(zip(a, b)))
    want = F.to_bits(ref(F.from_bits(a, fa), F.from_bits(b, fb), fo), fo).astype(np.uint64)
    _check(got, want, a, b)


@pytest.mark.parametrize("fa, fo", [(S, B), (B, S)], ids=["fp32-to-bf16", "bf16-to-fp32"])
def test_conversion_is_bit_exact(fa, fo):
    rng = np.random.default_rng(fa.man)
    a = np.concatenate([_random(fa, 3000, rng), EDGES[fa]]).astype(np.uint64)
    got = evaluate(lambda m, x: H.convert(m, x, fa, fo), [fa.bits], fo.bits, [(x,) for x in a])
    _check(got, F.to_bits(F.round_to(F.read(F.from_bits(a, fa)), fo), fo).astype(np.uint64), a)


def test_exp_over_every_bf16_input():
    a = np.arange(1 << 16, dtype=np.uint64)
    got = evaluate(H.exp_bf16, [16], 16, [(x,) for x in a])
    _check(got, F.to_bits(F.exp_bf16(F.from_bits(a, B)), B).astype(np.uint64), a)


def _silu(a):
    got = evaluate(H.silu_bf16, [16], 16, [(x,) for x in a])
    _check(got, F.to_bits(F.silu_bf16(F.from_bits(a, B)), B).astype(np.uint64), a)


def test_silu_on_random_and_edge_inputs():
    rng = np.random.default_rng(7)
    _silu(np.concatenate([_random(B, 6000, rng), EDGES[B]]).astype(np.uint64))


@pytest.mark.slow
def test_silu_over_every_bf16_input():
    _silu(np.arange(1 << 16, dtype=np.uint64))


@pytest.mark.parametrize("k", [4, pytest.param(8, marks=pytest.mark.slow), 6])   # (8: 14 s)
def test_fixed_order_sum_continues_a_running_sum(k):
    """``acc`` plus ``k`` terms in groups of four (the last padded with zeros), each group summed as
    ``(t0 + t1) + (t2 + t3)``: magnitudes from 1e-3 to 1e3 so that the order shows."""
    rng = np.random.default_rng(k)
    n = 500
    terms = (rng.standard_normal((n, k)) * rng.choice([1e-3, 1, 1e3], (n, k))).astype(np.float32)
    acc = rng.standard_normal(n).astype(np.float32)
    tb, ab = F.to_bits(terms, S).astype(np.uint64), F.to_bits(acc, S).astype(np.uint64)
    got = evaluate(lambda m, *xs: H.fp32_sum(m, xs[1:], xs[0]), [32] * (k + 1), 32,
                   [(ab[i], *tb[i]) for i in range(n)])
    _check(got, F.to_bits(F.fp32_sum(terms, acc), S).astype(np.uint64), ab)
