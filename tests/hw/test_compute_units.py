"""Compute units (Map, Accum, Scan, FlatMap) against the interpreter, bit for bit, under random stalls."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from step_hdl import StepTypeError, StreamType, Tile
from step_hdl.functions import fn
from step_hdl.interp import run_operator
from step_hdl.sim.streams import Scenario, run_amaranth
from step_hdl.token import encode
from step_hdl.types import dtype, dyn, ragged
from step_hdl.units.compute import Accum, AccumParams, FlatMap, FlatMapParams, Map, MapParams, Scan
from step_hdl.units.functions import clamp_parts, saturate, shift_parts
from step_hdl.units.params import ParamError

from hw.harness import check_unit
from step_hdl.units.base import not_elaborated

L = ragged("L")
M = ragged("M")
INFO = {"int8": np.iinfo(np.int8), "int16": np.iinfo(np.int16), "int32": np.iinfo(np.int32)}


def rand_tile(rng, rows, cols, dt, lo=None, hi=None):
    """Full-range values (saturation and wrap-around, negatives) unless bounds are given."""
    info = INFO[dt]
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi, (rows, cols), endpoint=True).astype(info.dtype)


def nested(structure, make):
    """Nested lists of payloads: ``structure`` gives the innermost lengths (ints) at its leaves."""
    if isinstance(structure, int):
        return [make() for _ in range(structure)]
    return [nested(s, make) for s in structure]


def depth(structure) -> int:
    return 0 if isinstance(structure, int) else 1 + max((depth(s) for s in structure), default=0)


# ragged outer shapes (rank, structure, symbolic shape): empty chunks, several stop levels
SHAPES = {
    "rank0": (0, 5, (5,)),
    "rank1": (1, [3, 0, 2, 1], (4, L)),
    "rank2": (2, [[2, 0], [], [1, 3, 1]], (3, M, L)),
}


def stream(rng, tile: Tile, shape_key: str, **bounds):
    rank, struct, shape = SHAPES[shape_key]
    rows, cols = int(tile.rows), int(tile.cols)
    toks = encode(nested(struct, lambda: rand_tile(rng, rows, cols, tile.dtype.name, **bounds)), rank)
    return StreamType(tile, shape), toks


def paired(rng, t0: Tile, t1: Tile, shape_key: str):
    """Two streams with the same stop structure."""
    st0, a = stream(rng, t0, shape_key)
    st1, b = stream(rng, t1, shape_key)
    return {"in0": (st0, a), "in1": (st1, b)}


# --------------------------------------------------------------------------- Map

BINARY = ("add", "sub", "mul", "max", "matmul")


@pytest.mark.parametrize("size, dt", [(2, "int8"), (4, "int16")])
@pytest.mark.parametrize("f", ["add", "sub", "mul", "max", "matmul", fn("matmul", transpose_b=True),
                               fn("matmul", transpose_a=True), fn("matmul", transpose_a=True, transpose_b=True)],
                         ids=str)
@pytest.mark.parametrize("pipeline", [False, True], ids=["comb", "pipelined"])
def test_map_binary_one_build(sim_backend, size, dt, f, pipeline):
    """One build with every binary function; the fn register selects (square tiles: transpose and
    transpose_a are registers). Pipelined, the matmul's stages set the unit's and the other functions pass
    through as many registers."""
    unit = Map(MapParams(rows=size, cols=size, dtype=dt, fns=BINARY, max_rank=2, pipeline=pipeline))
    assert unit.params.stages == (3 if pipeline else 0)
    rng = np.random.default_rng(size)
    t = Tile(dt, size, size)
    for shape_key in ("rank1", "rank2"):
        check_unit(unit, "Map", paired(rng, t, t, shape_key), dict(fn=f, n=2), backend=sim_backend)


@pytest.mark.parametrize("b_shape", [(4, 1), (1, 1), (1, 4)])
@pytest.mark.parametrize("f", ["add", "sub", "mul", "max"])
def test_map_broadcast(sim_backend, b_shape, f):
    unit = Map(MapParams(rows=4, cols=4, dtype="int16", fns=(f,), in1_rows=b_shape[0], in1_cols=b_shape[1]))
    rng = np.random.default_rng(3)
    inputs = paired(rng, Tile("int16", 4, 4), Tile("int16", *b_shape), "rank1")
    check_unit(unit, "Map", inputs, dict(fn=f, n=2), backend=sim_backend)


def test_map_broadcast_first_operand(sim_backend):
    """The library also broadcasts the first operand: [1, 1] * [2, 2]."""
    unit = Map(MapParams(rows=1, cols=1, dtype="int8", fns=("mul", "sub"), in1_rows=2, in1_cols=2))
    assert unit.params.out_tile == Tile("int32", 2, 2)
    inputs = paired(np.random.default_rng(19), Tile("int8", 1, 1), Tile("int8", 2, 2), "rank2")
    for f in ("mul", "sub"):
        check_unit(unit, "Map", inputs, dict(fn=f, n=2), backend=sim_backend)


def test_params_json_round_trip():
    p = MapParams(rows=4, cols=4, dtype="int16", fns=("matmul", "add"), matmul_rows=2)
    assert MapParams.from_json(p.to_json()) == p
    a = AccumParams(rows=1, cols=4, dtype="int16", updates=("retile_row",), state_rows=4)
    assert AccumParams.from_json(a.to_json()) == a


@pytest.mark.parametrize("transpose", [False, True])
def test_map_matmul_rectangular(sim_backend, transpose):
    """[2, 4] x [4, 3] (or [3, 4] transposed): the transposition is wired, no register."""
    b = Tile("int16", 3, 4) if transpose else Tile("int16", 4, 3)
    unit = Map(MapParams(rows=2, cols=4, dtype="int16", fns=("matmul",), in1_rows=int(b.rows),
                         in1_cols=int(b.cols)))
    assert unit.params.multipliers == 2 * 4 * 3
    inputs = paired(np.random.default_rng(4), Tile("int16", 2, 4), b, "rank2")
    check_unit(unit, "Map", inputs, dict(fn=fn("matmul", transpose_b=transpose), n=2), backend=sim_backend)


@pytest.mark.parametrize("g", [1, 2])
def test_map_matmul_folded(sim_backend, g):
    """matmul_rows=g: g output rows per cycle, II 4/g, 16·g multipliers; transpose and transpose_a stay
    registers."""
    unit = Map(MapParams(rows=4, cols=4, dtype="int16", fns=("matmul", "add"), matmul_rows=g, max_rank=2))
    assert unit.params.multipliers == g * 16 and unit.params.matmul_passes == 4 // g
    t = Tile("int16", 4, 4)
    rng = np.random.default_rng(17)
    for f in (fn("matmul", transpose_b=True), "matmul", fn("matmul", transpose_a=True),
              fn("matmul", transpose_a=True, transpose_b=True)):
        check_unit(unit, "Map", paired(rng, t, t, "rank2"), dict(fn=f, n=2), backend=sim_backend)
    # without stalls, each data tile pair costs 4/g cycles instead of 1
    inputs = paired(rng, t, t, "rank2")
    n_data = sum(tok.is_data for tok in inputs["in0"][1])
    fast = dict(backend=sim_backend, seeds=(0,), p_gap=0, p_drop=0)
    (mm,) = check_unit(unit, "Map", inputs, dict(fn="matmul", n=2), **fast)
    (add,) = check_unit(unit, "Map", inputs, dict(fn="add", n=2), **fast)
    types = {port: st for port, (st, _) in inputs.items()}
    cfg_extra = len(unit.configure(dict(fn="matmul", n=2), types)) - len(unit.configure(dict(fn="add", n=2), types))
    # (the Amaranth harness counts the configuration writes as cycles, the cocotb one does not)
    assert n_data * (4 // g - 1) <= mm - add <= n_data * (4 // g - 1) + cfg_extra


@pytest.mark.parametrize("out_dt", ["int8", "int16"])
@pytest.mark.parametrize("pipeline", [False, True], ids=["comb", "pipelined"])
def test_map_requantize(sim_backend, out_dt, pipeline):
    """Every shift; pipelined, one stage (the shift's low bits and whether it fits) before the clamp."""
    unit = Map(MapParams(rows=2, cols=2, dtype="int32", fns=("requantize",), out_dtype=out_dt, pipeline=pipeline))
    assert unit.latency == (2 if pipeline else 1)
    rng = np.random.default_rng(5)
    for shift in (0, 7, 20, 31):
        st, toks = stream(rng, Tile("int32", 2, 2), "rank1")
        check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=fn("requantize", shift=shift, dtype=out_dt)),
                   backend=sim_backend)


@pytest.mark.parametrize("w, out_dt", [(32, "int8"), (32, "int16"), (20, "int8")])
def test_shift_parts_clamp_to_saturate_of_the_shift(w, out_dt):
    """The requantize's clamp from the shift's low bits and a sign mask equals clamping the whole shift,
    at every shift, on values at and around every power of two and at random."""
    m = Module()
    x, s = Signal(signed(w)), Signal(5)
    got, want = Signal(signed(dtype(out_dt).bits)), Signal(signed(dtype(out_dt).bits))
    m.d.comb += [got.eq(clamp_parts(*shift_parts(x, s, dtype(out_dt)), dtype(out_dt))),
                 want.eq(saturate(x >> s, dtype(out_dt)))]
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    values = {0, lo, hi} | {v for b in range(w) for d in (-1, 0, 1) for v in ((1 << b) + d, -(1 << b) + d)}
    values = sorted(v for v in values | set(np.random.default_rng(w).integers(lo, hi, 60).tolist()) if lo <= v <= hi)
    bad = []

    async def bench(ctx):
        for v in values:
            for k in range(32):
                ctx.set(x, v)
                ctx.set(s, k)
                if ctx.get(got) != ctx.get(want):
                    bad.append((v, k, ctx.get(got), ctx.get(want)))
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]


@pytest.mark.parametrize("size, dt, fracs", [(2, "int8", (0, 3, 6)), (2, "int16", (0, 4, 11, 14)),
                                             (4, "int16", (8,))])
@pytest.mark.parametrize("pipeline", [False, True], ids=["comb", "pipelined"])
def test_map_silu_exp(sim_backend, size, dt, fracs, pipeline):
    """One build for silu and exp; full-range inputs saturate; several frac settings; pipelined, silu's
    four stages and exp's three (padded to four)."""
    unit = Map(MapParams(rows=size, cols=size, dtype=dt, fns=("silu", "exp"), pipeline=pipeline))
    assert unit.latency == (5 if pipeline else 1)
    rng = np.random.default_rng(6)
    for frac in fracs:
        for name in ("silu", "exp"):
            st, toks = stream(rng, Tile(dt, size, size), "rank2")
            check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=fn(name, frac=frac)), backend=sim_backend)


@pytest.mark.parametrize("size, dt", [(2, "int8"), (4, "int16"), (2, "int32")])
def test_map_relu(sim_backend, size, dt):
    """relu keeps the operand's type: full-range inputs, negatives to 0, under random stalls."""
    unit = Map(MapParams(rows=size, cols=size, dtype=dt, fns=("relu",)))
    st, toks = stream(np.random.default_rng(9), Tile(dt, size, size), "rank2")
    assert any(t.is_data and (t.payload < 0).any() for t in toks)      # the stimulus has negatives to clip
    check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn="relu"), backend=sim_backend)


@pytest.mark.parametrize("f, dt", [("row_sum", "int16"), ("row_max", "int8"), ("row_sum", "int32")])
def test_map_row_reduce(sim_backend, f, dt):
    unit = Map(MapParams(rows=4, cols=4, dtype=dt, fns=(f,)))
    st, toks = stream(np.random.default_rng(7), Tile(dt, 4, 4), "rank1")
    check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=f), backend=sim_backend)


def test_map_affine(sim_backend):
    """Index arithmetic on [1, 1] int32 indices, with int32 wrap-around."""
    unit = Map(MapParams(rows=1, cols=1, dtype="int32", fns=("affine", "add")))
    rng = np.random.default_rng(8)
    for scale, offset in ((1, 0), (3, -7), (-65536, 1 << 31), (1 << 20, 12345)):
        st, toks = stream(rng, Tile("int32", 1, 1), "rank1")
        check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=fn("affine", scale=scale, offset=offset)),
                   backend=sim_backend)


def test_map_empty_stream(sim_backend):
    unit = Map(MapParams(rows=2, cols=2, dtype="int8", fns=("mul",)))
    t = Tile("int8", 2, 2)
    st = StreamType(t, (0,))
    check_unit(unit, "Map", {"in0": (st, encode([], 0)), "in1": (st, encode([], 0))}, dict(fn="mul", n=2),
               backend=sim_backend)


# --------------------------------------------------------------------------- matmul with transpose_a

def test_map_matmul_outer_product(sim_backend):
    """Two [1, 4] int16 rows -> their [4, 4] outer product a.T @ b (K = 1), bit for bit, wrapping at 32 bits."""
    unit = Map(MapParams(rows=1, cols=4, dtype="int16", fns=("matmul",), in1_rows=1, in1_cols=4,
                         matmul_transpose_a=True))
    assert unit.params.out_tile == Tile("int32", 4, 4) and unit.params.multipliers == 16
    f = fn("matmul", transpose_a=True)
    rng = np.random.default_rng(25)
    for shape_key in ("rank1", "rank2"):
        inputs = paired(rng, Tile("int16", 1, 4), Tile("int16", 1, 4), shape_key)
        inputs["in0"][1][0].payload[0, :2] = -32768              # -32768 * -32768 = 2**30: the widest product
        inputs["in1"][1][0].payload[0, :2] = -32768
        _check_matmul_reference(inputs, f)
        config = unit.configure(dict(fn=f, n=2), {port: st for port, (st, _) in inputs.items()})
        assert config == unit.config_image(fn=0)                 # the only mode: wired, no transpose register
        check_unit(unit, "Map", inputs, dict(fn=f, n=2), backend=sim_backend)


def _check_matmul_reference(inputs, f):
    """The interpreter's reference (what check_unit compares with) is numpy's a.T @ b, wrapped."""
    from step_hdl.functions import apply_typed
    for ta, tb in zip(inputs["in0"][1], inputs["in1"][1]):
        if ta.is_data:
            a, b = ta.payload.astype(np.int64), tb.payload.astype(np.int64)
            a = a.T if f.param("transpose_a") else a
            b = b.T if f.param("transpose_b") else b
            want = ((a @ b + 2**31) % 2**32 - 2**31).astype(np.int32)
            out = Tile("int32", *want.shape)
            assert np.array_equal(apply_typed(f, out, ta.payload, tb.payload), want)


def test_map_matmul_row_tiles_default_is_inner_product():
    """Without matmul_transpose_a, [1, 4] x [1, 4] keeps its earlier build: the inner product a @ b.T."""
    unit = Map(MapParams(rows=1, cols=4, dtype="int16", fns=("matmul",), in1_rows=1, in1_cols=4))
    assert unit.params.out_tile == Tile("int32", 1, 1)
    st = StreamType(Tile("int16", 1, 4), (3,))
    types = {"in0": st, "in1": st}
    assert unit.configure(dict(fn=fn("matmul", transpose_b=True), n=2), types) == unit.config_image(fn=0)
    with pytest.raises(ParamError, match="produces int32\\[4,4\\], but the output port carries int32\\[1,1\\]"):
        unit.configure(dict(fn=fn("matmul", transpose_a=True), n=2), types)
    not_elaborated(unit)  # configured only, never simulated


@pytest.mark.parametrize("tb", [False, True])
def test_map_matmul_transpose_a_rectangular(sim_backend, tb):
    """[3, 2] as [2, 3]ᵀ times [3, 4] (or [4, 3] transposed): transpose_a is the only fitting mode, wired."""
    b = Tile("int8", 4, 3) if tb else Tile("int8", 3, 4)
    unit = Map(MapParams(rows=3, cols=2, dtype="int8", fns=("matmul",), in1_rows=int(b.rows),
                         in1_cols=int(b.cols)))
    assert unit.params.out_tile == Tile("int32", 2, 4) and unit.params.multipliers == 2 * 3 * 4
    f = fn("matmul", transpose_a=True, transpose_b=tb)
    inputs = paired(np.random.default_rng(26), Tile("int8", 3, 2), b, "rank2")
    _check_matmul_reference(inputs, f)
    check_unit(unit, "Map", inputs, dict(fn=f, n=2), backend=sim_backend)
    with pytest.raises(StepTypeError, match="inner dimensions differ"):
        unit.configure(dict(fn=fn("matmul", transpose_a=True, transpose_b=not tb), n=2),
                       {"in0": StreamType(Tile("int8", 3, 2), (2,)), "in1": StreamType(b, (2,))})


def test_map_matmul_square_registers():
    """Square tiles fit all four modes: ``transpose`` (transpose_b) and ``transpose_a`` are registers."""
    unit = Map(MapParams(rows=2, cols=2, dtype="int8", fns=("matmul",)))
    st = StreamType(Tile("int8", 2, 2), (3,))
    types = {"in0": st, "in1": st}
    for ta in (False, True):
        for tb in (False, True):
            img = unit.configure(dict(fn=fn("matmul", transpose_a=ta, transpose_b=tb), n=2), types)
            assert img == unit.config_image(fn=0, transpose=int(tb), transpose_a=int(ta))
    plain = Map(MapParams(rows=2, cols=2, dtype="int8", fns=("matmul",), matmul_transpose_a=False))
    assert plain.configure(dict(fn="matmul", n=2), types) == plain.config_image(fn=0, transpose=0)
    with pytest.raises(ParamError, match="transpose_a=True, transpose_b=False is not built"):
        plain.configure(dict(fn=fn("matmul", transpose_a=True), n=2), types)
    for u in (unit, plain):  # configured only, never simulated
        not_elaborated(u)


# --------------------------------------------------------------------------- integer div

def _divisors(rng, rows, cols, dt):
    """Divisors: zeros, ±1, small and extreme values, and random ones over the full range."""
    info = INFO[dt]
    choices = np.array([0, 0, 1, -1, 2, -3, 7, -13, info.min, info.max], dtype=np.int64)
    b = np.where(rng.random((rows, cols)) < 0.5, rng.choice(choices, (rows, cols)),
                 rng.integers(info.min, info.max, (rows, cols), endpoint=True))
    return b.astype(info.dtype)


def floor_div_ref(a, b):
    """numpy's floor_divide on exact integers (0 for a zero divisor), wrapped to int32."""
    with np.errstate(divide="ignore"):
        q = np.floor_divide(a.astype(np.int64), b.astype(np.int64))
    return ((q + 2**31) % 2**32 - 2**31).astype(np.int32)


@pytest.mark.parametrize("shape_key", ["rank1", "rank2"])
def test_map_div_broadcast(sim_backend, shape_key):
    """int32 [4, 4] // int32 [1, 4] broadcast over rows: floor division, 0 for a zero divisor, bit for bit."""
    unit = Map(MapParams(rows=4, cols=4, dtype="int32", fns=("div",), in1_rows=1, in1_cols=4))
    assert unit.params.out_tile == Tile("int32", 4, 4) and unit.params.multipliers == 0
    rng = np.random.default_rng(27)
    rank, struct, shape = SHAPES[shape_key]
    num = encode(nested(struct, lambda: rand_tile(rng, 4, 4, "int32")), rank)
    den = encode(nested(struct, lambda: _divisors(rng, 1, 4, "int32")), rank)
    data_a = [t.payload for t in num if t.is_data]
    data_b = [t.payload for t in den if t.is_data]
    # the corner cases occur for sure: zero divisors, negative numerators, -2**31 // -1 (wraps)
    data_a[0][:, :2] = [[-7, 7], [7, -2**31], [-2**31, -1], [0, 5]]
    data_b[0][0, :2] = [0, -1]
    data_b[1][0, 0] = 2
    data_a[1][:, 0] = [-7, 7, -1, -2**31]
    f = fn("div")
    for a, b in zip(data_a, data_b):     # the reference check_unit compares with is numpy's floor_divide
        assert np.array_equal(f.spec.apply(f, a, b), floor_div_ref(a, b))
    assert floor_div_ref(data_a[1][:, :1], data_b[1][:, :1]).ravel().tolist() == [-4, 3, -1, -2**30]
    st0, st1 = StreamType(Tile("int32", 4, 4), shape), StreamType(Tile("int32", 1, 4), shape)
    check_unit(unit, "Map", {"in0": (st0, num), "in1": (st1, den)}, dict(fn="div", n=2), backend=sim_backend)


def test_map_div_small_types(sim_backend):
    """int8 // int8 (full range, -128 // -1 = 128 is exact in int32) and an int16 numerator over an int8 scalar."""
    unit = Map(MapParams(rows=2, cols=2, dtype="int8", fns=("div", "add")))
    rng = np.random.default_rng(28)
    inputs = paired(rng, Tile("int8", 2, 2), Tile("int8", 2, 2), "rank2")
    inputs["in0"][1][0].payload[:] = [[-128, -128], [5, -5]]
    inputs["in1"][1][0].payload[:] = [[-1, 0], [-2, 2]]
    check_unit(unit, "Map", inputs, dict(fn="div", n=2), backend=sim_backend)
    scalar = Map(MapParams(rows=2, cols=2, dtype="int16", fns=("div",), in1_rows=1, in1_cols=1, in1_dtype="int8"))
    inputs = paired(rng, Tile("int16", 2, 2), Tile("int8", 1, 1), "rank1")
    check_unit(scalar, "Map", inputs, dict(fn="div", n=2), backend=sim_backend)


# --------------------------------------------------------------------------- column reductions

@pytest.mark.parametrize("f, dt", [("col_sum", "int16"), ("col_max", "int8"), ("col_sum", "int32"),
                                   ("col_max", "int32")])
def test_map_col_reduce(sim_backend, f, dt):
    unit = Map(MapParams(rows=4, cols=3, dtype=dt, fns=(f,)))
    assert unit.params.out_tile == Tile("int32" if f == "col_sum" else dt, 1, 3)
    st, toks = stream(np.random.default_rng(29), Tile(dt, 4, 3), "rank1")
    check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=f), backend=sim_backend)


# --------------------------------------------------------------------------- Accum / Scan

@pytest.mark.parametrize("size, dt", [(2, "int8"), (4, "int16")])
@pytest.mark.parametrize("update, init", [("add", "zeros"), ("max", "lowest"), ("max", "zeros")])
@pytest.mark.parametrize("shape_key, rank", [("rank1", 1), ("rank2", 1), ("rank2", 2)])
def test_accum(sim_backend, size, dt, update, init, shape_key, rank):
    unit = Accum(AccumParams(rows=size, cols=size, dtype=dt, updates=("add", "max"), max_rank=2))
    st, toks = stream(np.random.default_rng(9), Tile(dt, size, size), shape_key)
    op = dict(update=update, init=fn(init, rows=size, cols=size, dtype="int32"), rank=rank)
    check_unit(unit, "Accum", {"in": (st, toks)}, op, backend=sim_backend)


def test_accum_add_wraps_and_broadcasts(sim_backend):
    """int32 elements wrap the int32 state; a [2, 1] element broadcasts over a [2, 2] state."""
    unit = Accum(AccumParams(rows=2, cols=1, dtype="int32", state_rows=2, state_cols=2))
    st, toks = stream(np.random.default_rng(10), Tile("int32", 2, 1), "rank2")
    op = dict(update="add", init=fn("zeros", rows=2, cols=2, dtype="int32"), rank=1)
    check_unit(unit, "Accum", {"in": (st, toks)}, op, backend=sim_backend)


@pytest.mark.parametrize("rank", [1, 2, "short"])
def test_accum_retile_row(sim_backend, rank):
    """[1, 4] rows packed into [4, 4] tiles; a chunk of fewer rows gives a partial tile (its valid rows)."""
    unit = Accum(AccumParams(rows=1, cols=4, dtype="int16", updates=("retile_row",), state_rows=4, max_rank=3))
    rng = np.random.default_rng(11)
    if rank == 1:
        struct, shape = [4, 4, 4], (3, 4)
    elif rank == "short":
        struct, shape, rank = [4, 2, 3, 1, 4], (5, L), 1
    else:
        struct, shape = [[2, 2], [1, 3], [4]], (3, dyn("A"), L)  # 4 rows per rank-2 chunk, ragged inside
    toks = encode(nested(struct, lambda: rand_tile(rng, 1, 4, "int16")), depth(struct))
    st = StreamType(Tile("int16", 1, 4), shape)
    op = dict(update="retile_row", init=fn("zeros", rows=0, cols=4, dtype="int16"), rank=rank)
    check_unit(unit, "Accum", {"in": (st, toks)}, op, backend=sim_backend)


@pytest.mark.parametrize("update, init", [("add", "zeros"), ("max", "lowest")])
@pytest.mark.parametrize("shape_key, rank", [("rank1", 1), ("rank2", 1), ("rank2", 2)])
def test_scan(sim_backend, update, init, shape_key, rank):
    unit = Scan(AccumParams(rows=2, cols=2, dtype="int16", updates=("add", "max"), max_rank=2))
    st, toks = stream(np.random.default_rng(12), Tile("int16", 2, 2), shape_key)
    op = dict(update=update, init=fn(init, rows=2, cols=2, dtype="int32"), rank=rank)
    check_unit(unit, "Scan", {"in": (st, toks)}, op, backend=sim_backend)


# --------------------------------------------------------------------------- Accum with kept positions

def keep_stream(rng, tile: Tile, struct, shape, **bounds):
    """A stream of ``tile`` elements with the nested ``struct`` (innermost lengths at the leaves)."""
    rows, cols = int(tile.rows), int(tile.cols)
    toks = encode(nested(struct, lambda: rand_tile(rng, rows, cols, tile.dtype.name, **bounds)), len(shape) - 1)
    return StreamType(tile, tuple(shape)), toks


def regular(shape):
    """The nested structure of a static shape."""
    struct = shape[-1]
    for d in reversed(shape[1:-1]):
        struct = [struct] * d
    return [struct] * shape[0]


def keep_op(update, init, rank, keep, size=2, dt="int32"):
    return dict(update=update, init=fn(init, rows=size, cols=size, dtype=dt), rank=rank, keep=keep)


@pytest.mark.parametrize("shape, rank, keep, positions", [
    ((3, 4, 2, 3), 1, 2, 6),    # 6 positions (exactly the need), an inner S1 between the kept rows
    ((3, 4, 2, 3), 1, 2, 8),    # more positions than needed
    ((2, 5, 4), 1, 1, 4),
    ((2, 3, 2, 3), 2, 1, 3),    # rank 2: the chunks of a block are S1 and S2 apart
    ((2, 3, 2, 3), 1, 1, 3),    # block ends S2 and S3 (the S3 merges: S2 out)
    ((3, 4, 1, 1), 1, 2, 1),    # one position: back-to-back updates of the same memory word
], ids=str)
@pytest.mark.parametrize("update, init", [("add", "zeros"), ("max", "lowest")])
@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
def test_accum_keep(sim_backend, shape, rank, keep, positions, update, init, pipeline):
    """int16 [2, 2] elements, int32 state per kept position (pipelined: the update in two cycles, a read
    register per bank that takes the word written in its cycle)."""
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", updates=("add", "max"), positions=positions,
                             max_rank=3, pipeline=pipeline))
    inputs = {"in": keep_stream(np.random.default_rng(20), Tile("int16", 2, 2), regular(shape), shape)}
    check_unit(unit, "Accum", inputs, keep_op(update, init, rank, keep), backend=sim_backend)


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
def test_accum_keep_tiling_shape(sim_backend, pipeline):
    """The tiling pass's form: Accum(rank=1, keep=2) over [n, k, 1, c] int32 tiles (one logical row of c tiles)."""
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int32", positions=4, max_rank=3, pipeline=pipeline))
    inputs = {"in": keep_stream(np.random.default_rng(21), Tile("int32", 2, 2), regular((2, 3, 1, 4)),
                                (2, 3, 1, 4))}
    check_unit(unit, "Accum", inputs, keep_op("add", "zeros", 1, 2), backend=sim_backend)


@pytest.mark.parametrize("struct, shape, rank, keep", [
    ([[[2, 2], [2, 2]], [], [[2, 2]]], (3, L, 2, M), 1, 2),     # an empty reduced block: only its stop
    ([[3, 3], [2, 2, 2]], (2, L, M), 1, 1),                     # the kept count differs between blocks
    ([[[2, 1], [2, 1]], [[3], [3]]], (2, 2, L, M), 1, 2),       # ragged kept rows, the first chunk's stops
    ([[[2, 0], [2, 0]], [[1, 1]]], (2, L, 2, M), 1, 2),         # an empty last kept row: S1 after a position
    ([[[2, 2], [2, 2, 2]], [[2]]], (2, L, M, 2), 2, 1),       # ragged rank-2 blocks
    ([], (0, 2, 2), 1, 1),                                      # the empty stream: done only
], ids=str)
@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
def test_accum_keep_ragged(sim_backend, struct, shape, rank, keep, pipeline):
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int8", updates=("add", "max"), positions=4, max_rank=3,
                             pipeline=pipeline))
    inputs = {"in": keep_stream(np.random.default_rng(22), Tile("int8", 2, 2), struct, shape)}
    for update, init in (("add", "zeros"), ("max", "lowest")):
        check_unit(unit, "Accum", inputs, keep_op(update, init, rank, keep), backend=sim_backend)


@pytest.mark.parametrize("shape_key, rank", [("rank1", 1), ("rank2", 1), ("rank2", 2)])
def test_accum_keep_unit_without_keep(sim_backend, shape_key, rank):
    """keep=0 on a unit with position memory: a plain Accum (state in word 0), empty chunks emit init."""
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", updates=("add", "max"), positions=3, max_rank=2))
    rng = np.random.default_rng(23)
    for update, init in (("add", "zeros"), ("max", "lowest")):
        st, toks = stream(rng, Tile("int16", 2, 2), shape_key)
        op = dict(update=update, init=fn(init, rows=2, cols=2, dtype="int32"), rank=rank)
        check_unit(unit, "Accum", {"in": (st, toks)}, op, backend=sim_backend)


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
def test_accum_keep_throughput(sim_backend, pipeline):
    """No stalls: one cycle per input token, a block end included; a block's n states and s recorded
    inner stops leave from one bank while the next block comes in to the other, so only the last block's
    emission (n + s + 1 tokens) adds to the run. The pipelined build takes the same cycles."""
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=6, max_rank=3, pipeline=pipeline))
    rng = np.random.default_rng(24)
    fast = dict(backend=sim_backend, seeds=(0,), p_gap=0, p_drop=0)
    cycles, tokens = {}, {}
    for shape in ((1, 1, 1, 1), (3, 4, 2, 3)):
        inputs = {"in": keep_stream(rng, Tile("int16", 2, 2), regular(shape), shape)}
        tokens[shape] = len(inputs["in"][1])
        (cycles[shape],) = check_unit(unit, "Accum", inputs, keep_op("add", "zeros", 1, 2), **fast)
    # [1, 1, 1, 1]: 1 block of 1 position; [3, 4, 2, 3]: 3 blocks of 6 positions and one inner S1 each
    extra = tokens[(3, 4, 2, 3)] - tokens[(1, 1, 1, 1)] + (6 + 1 + 1) - (1 + 1)
    assert cycles[(3, 4, 2, 3)] - cycles[(1, 1, 1, 1)] == extra


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipelined"])
def test_accum_keep_back_to_back_blocks(sim_backend, pipeline):
    """Blocks of one chunk: each block's 6 data and block end come in while the previous block's 6
    states and stop leave, the bank handed over in the cycle its emission ends: 7 cycles per block."""
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=6, max_rank=3, pipeline=pipeline))
    rng = np.random.default_rng(25)
    fast = dict(backend=sim_backend, seeds=(0,), p_gap=0, p_drop=0)
    cycles = {}
    for blocks in (1, 4):
        shape = (blocks, 1, 1, 6)
        inputs = {"in": keep_stream(rng, Tile("int16", 2, 2), regular(shape), shape)}
        (cycles[blocks],) = check_unit(unit, "Accum", inputs, keep_op("add", "zeros", 1, 2), **fast)
    assert cycles[4] - cycles[1] == 3 * 7


def test_accum_keep_params():
    p = AccumParams(rows=2, cols=2, dtype="int16", updates=("add", "max"), positions=16)
    assert AccumParams.from_json(p.to_json()) == p
    assert AccumParams.from_json({k: v for k, v in p.to_json().items() if k != "positions"}).positions == 0
    plain = Accum(AccumParams(rows=2, cols=2, dtype="int16"))
    keep = Accum(p)
    assert "keep" not in plain.regs.index and "keep" in keep.regs.index
    st = StreamType(Tile("int16", 2, 2), (4, L, 2, 2))   # the kept count is static: 4 positions
    img = keep.configure(keep_op("add", "zeros", 1, 2), {"in": st})
    assert img == keep.config_image(rank=1, update=0, lowest=0, keep=2)
    for u in (plain, keep):  # configured only, never simulated
        not_elaborated(u)


@pytest.mark.parametrize("make, message", [
    (lambda: AccumParams(positions=-1), "AccumParams: positions must be an integer >= 0, got -1"),
    (lambda: AccumParams(positions=True), "AccumParams: positions must be an integer >= 0, got True"),
    (lambda: AccumParams(rows=1, updates=("retile_row",), state_rows=4, positions=2),
     "AccumParams: positions (keep hardware) needs add/max updates, not retile_row"),
    (lambda: Scan(AccumParams(positions=2)), "Scan: positions=2 is not supported"),
    (lambda: AccumParams(positions=2, pipeline=1), "AccumParams: pipeline must be true or false, got 1"),
    (lambda: AccumParams(pipeline=True),
     "AccumParams: pipeline changes only the keep hardware; it needs positions > 0"),
])
def test_bad_keep_parameters(make, message):
    with pytest.raises(ParamError) as exc:
        make()
    assert message in str(exc.value)


@pytest.mark.parametrize("struct, shape, rank, keep", [
    (regular((3, 4, 2, 3)), (3, 4, 2, 3), 1, 2),
    (regular((3, 4, 1, 1)), (3, 4, 1, 1), 1, 2),               # one position, updated every other cycle
    ([[[2, 1], [2, 1]], [[3], [3]]], (2, 2, L, M), 1, 2),       # ragged kept rows, recorded inner stops
    ([[[2, 2], [2, 2, 2]], [[2]]], (2, L, M, 2), 2, 1),
], ids=str)
def test_pipelined_keep_unit_takes_the_same_cycles(sim_backend, struct, shape, rank, keep):
    """The pipelined build (the update in two cycles, registered emitter flags) moves every token in the
    cycle the plain build does, under the same random stalls on both sides (the model times both alike)."""
    inputs = {"in": keep_stream(np.random.default_rng(26), Tile("int16", 2, 2), struct, shape)}
    cycles = [check_unit(Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=6, max_rank=3,
                                           pipeline=pipeline)),
                         "Accum", inputs, keep_op("add", "zeros", rank, keep), backend=sim_backend,
                         seeds=(0, 1, 2, 3))
              for pipeline in (False, True)]
    assert cycles[0] == cycles[1]


def test_pipelined_keep_unit_at_end_is_its_comparison():
    """While it emits, the pipelined unit's registered end flag (a count of the positions left) equals
    ``emit_index >= emit_positions`` in every cycle, with random stalls on both sides."""
    for seed in (0, 1, 2):
        unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=6, max_rank=3, pipeline=True))
        shape = (3, 4, 2, 3)
        st, toks = keep_stream(np.random.default_rng(27), Tile("int16", 2, 2), regular(shape), shape)
        op = keep_op("add", "zeros", 1, 2)
        sc = Scenario(unit.pack_inputs({"in": (st, toks)}), unit.output_done_bits(),
                      unit.configure(op, {"in": st}), seed=seed, p_gap=0.4, p_drop=0.4)
        got, _ = run_amaranth(unit, sc, checks=lambda: [unit.at_end_check])
        assert unit.fmt("o").unpack_all(got["o"]) == run_operator("Accum", {"in": (st, toks)}, **op)["out"]


def test_pipelined_keep_unit_needs_keep():
    unit = Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=3, max_rank=2, pipeline=True))
    not_elaborated(unit)
    st = StreamType(Tile("int16", 2, 2), (3, 4))
    with pytest.raises(ParamError, match=r"Accum: a pipelined unit with positions runs keep > 0 only \(a fabric "
                                         r"builds positions for a node with keep\), got keep=0"):
        unit.configure(dict(update="add", init=fn("zeros", rows=2, cols=2, dtype="int32"), rank=1), {"in": st})


def test_bad_keep_configuration():
    t = Tile("int16", 2, 2)
    plain = Accum(AccumParams(rows=2, cols=2, dtype="int16"))
    keep = Accum(AccumParams(rows=2, cols=2, dtype="int16", positions=6, max_rank=3))
    scan = Scan(AccumParams(rows=2, cols=2, dtype="int16", max_rank=3))
    st = {"in": StreamType(t, (3, 4, 2, 3))}
    with pytest.raises(ParamError, match="Accum: keep=2 needs position memory, but this unit has none"):
        plain.configure(keep_op("add", "zeros", 1, 2), {"in": StreamType(t, (3, 4, 2))})
    with pytest.raises(ParamError, match="Scan: keep=1 is not supported"):
        scan.configure(keep_op("add", "zeros", 1, 1), st)
    with pytest.raises(ParamError, match="keep must be an integer >= 0, got -1"):
        keep.configure(keep_op("add", "zeros", 1, -1), st)
    with pytest.raises(ParamError, match="rank \\+ keep must be <= the input rank 3, got rank=2, keep=2"):
        keep.configure(keep_op("add", "zeros", 2, 2), st)
    with pytest.raises(ParamError, match="rank \\+ keep must be <= the input rank 2, got rank=1, keep=2"):
        keep.configure(keep_op("add", "zeros", 1, 2), {"in": StreamType(t, (5, 1, 1))})
    with pytest.raises(ParamError, match="keep=2 needs 8 positions .* built with positions=6"):
        keep.configure(keep_op("add", "zeros", 1, 2), {"in": StreamType(t, (3, 4, 2, 4))})
    keep.configure(keep_op("add", "zeros", 1, 2), {"in": StreamType(t, (3, 4, 2, M))})  # not static: no check
    for u in (plain, keep, scan):  # configured only, never simulated
        not_elaborated(u)


# --------------------------------------------------------------------------- FlatMap

def partial_stream(rng, tile: Tile, shape_key: str, rows=None):
    """Like :func:`stream`, each tile with 1 .. its rows valid (``rows``: one count for all)."""
    rank, struct, shape = SHAPES[shape_key]
    r, c = int(tile.rows), int(tile.cols)
    toks = encode(nested(struct, lambda: rand_tile(rng, rows or int(rng.integers(1, r + 1)), c, tile.dtype.name)),
                  rank)
    return StreamType(tile, shape), toks


@pytest.mark.parametrize("shape_key", ["rank0", "rank1", "rank2"])
@pytest.mark.parametrize("size, dt", [(2, "int8"), (4, "int16")])
@pytest.mark.parametrize("partial", [False, True])
def test_flatmap_retile_streamify(sim_backend, shape_key, size, dt, partial):
    """Each tile into its rows: a partial tile gives only its valid rows."""
    unit = FlatMap(FlatMapParams(rows=size, cols=size, dtype=dt, fn="retile_streamify", max_rank=3))
    make = partial_stream if partial else stream
    st, toks = make(np.random.default_rng(13), Tile(dt, size, size), shape_key)
    check_unit(unit, "FlatMap", {"in": (st, toks)}, dict(fn="retile_streamify"), backend=sim_backend)


@pytest.mark.parametrize("f", ["matmul", "add", "silu"])
def test_map_partial_tiles_keep_their_rows(sim_backend, f):
    """A partial first operand's valid rows are the result's (the second operand of a matmul is whole)."""
    rng = np.random.default_rng(15)
    t = Tile("int16", 4, 4)
    unit = Map(MapParams(rows=4, cols=4, dtype="int16", fns=(f,), max_rank=2))
    if f == "add":      # both operands partial alike: one row count per token pair
        st, a = partial_stream(rng, t, "rank1", rows=3)
        b = encode(nested(SHAPES["rank1"][1], lambda: rand_tile(rng, 3, 4, "int16", -99, 99)), 1)
        inputs = {"in0": (st, a), "in1": (st, b)}
    else:
        st, a = partial_stream(rng, t, "rank1")
        inputs = {"in0": (st, a)} | ({} if f == "silu" else {"in1": stream(rng, t, "rank1", lo=-9, hi=9)})
    op = dict(fn=fn(f, frac=4), n=1) if f == "silu" else dict(fn=f, n=2)
    check_unit(unit, "Map", inputs, op, backend=sim_backend)


@pytest.mark.parametrize("positions", [0, 3])
def test_accum_add_of_partial_tiles(sim_backend, positions):
    """Partial [4, 4] tiles accumulate into their valid rows of the state, also with kept positions."""
    unit = Accum(AccumParams(rows=4, cols=4, dtype="int16", updates=("add",), positions=positions, max_rank=3))
    rng = np.random.default_rng(16)
    if positions:
        shape = (2, 4, 3)
        rows = [1, 3, 2]        # per kept position: every chunk has that position's rows
        struct = [[[rand_tile(rng, rows[p], 4, "int16") for p in range(3)] for _ in range(4)] for _ in range(2)]
        toks = encode(struct, 2)
        op = dict(update="add", init=fn("zeros", rows=4, cols=4, dtype="int32"), rank=1, keep=1)
    else:
        shape = (3, L)
        struct = [[rand_tile(rng, n, 4, "int16") for _ in range(k)] for n, k in ((2, 3), (4, 2), (1, 4))]
        toks = encode(struct, 1)
        op = dict(update="add", init=fn("zeros", rows=4, cols=4, dtype="int32"), rank=1)
    check_unit(unit, "Accum", {"in": (StreamType(Tile("int16", 4, 4), shape), toks)}, op, backend=sim_backend)


def _pairs(rng, n):
    return [np.array([[int(rng.integers(-100, 100)), c]], dtype=np.int32) for c in rng.choice([0, 1, 3, -2], n)]


@pytest.mark.parametrize("step", [1, -3])
@pytest.mark.parametrize("shape_key", ["rank0", "rank1", "rank2"])
def test_flatmap_range_pairs(sim_backend, shape_key, step):
    """(start, count) tiles; counts 0 and negative give empty blocks."""
    unit = FlatMap(FlatMapParams(rows=1, cols=2, dtype="int32", fn="range", max_rank=3))
    rng = np.random.default_rng(14)
    rank, struct, shape = SHAPES[shape_key]
    vals = iter(_pairs(rng, 20))
    toks = encode(nested(struct, lambda: next(vals)), rank)
    check_unit(unit, "FlatMap", {"in": (StreamType(Tile("int32", 1, 2), shape), toks)},
               dict(fn=fn("range", step=step)), backend=sim_backend)


@pytest.mark.parametrize("count", [0, 1, 3])
@pytest.mark.parametrize("shape_key", ["rank0", "rank1"])
def test_flatmap_range_static(sim_backend, shape_key, count):
    unit = FlatMap(FlatMapParams(rows=1, cols=1, dtype="int32", fn="range", max_rank=2))
    st, toks = stream(np.random.default_rng(15), Tile("int32", 1, 1), shape_key, lo=-50, hi=50)
    check_unit(unit, "FlatMap", {"in": (st, toks)}, dict(fn=fn("range", count=count, step=2)),
               backend=sim_backend)


# --------------------------------------------------------------------------- bad parameters

@pytest.mark.parametrize("make, message", [
    (lambda: MapParams(rows=0, cols=2), "MapParams: rows must be an integer >= 1, got 0"),
    (lambda: MapParams(dtype="int4"), "unsupported element type 'int4'"),
    (lambda: MapParams(fns=("sel_index",)), "MapParams: unsupported function 'sel_index'"),
    (lambda: MapParams(fns=()), "fns must be a non-empty tuple"),
    (lambda: MapParams(fns=("add", "silu")), "the functions produce different output tiles"),
    (lambda: MapParams(dtype="int32", fns=("silu",)), "function 'silu' cannot run on these tiles"),
    (lambda: MapParams(rows=2, cols=3, fns=("matmul",), in1_rows=4, in1_cols=5),
     "function 'matmul' cannot run on these tiles"),
    (lambda: MapParams(rows=2, cols=4, fns=("matmul",), in1_rows=4, in1_cols=3, matmul_transpose_a=True),
     "function 'matmul' cannot run on these tiles: function matmul(transpose_a=True, transpose_b=False): "
     "inner dimensions differ"),
    (lambda: MapParams(fns=("add",), matmul_transpose_a=True), "matmul_transpose_a is set but matmul is not in fns"),
    (lambda: MapParams(fns=("matmul",), matmul_transpose_a=1), "matmul_transpose_a must be None, true or false"),
    (lambda: MapParams(rows=2, cols=4, fns=("matmul",), in1_rows=2, in1_cols=3, matmul_rows=1),
     "output has 4 rows (a transpose_a build cannot be folded)"),
    (lambda: MapParams(fns=("div", "col_sum")), "the functions produce different output tiles"),
    (lambda: MapParams(fns=("add",), in1_rows=3), "function 'add' cannot run on these tiles"),
    (lambda: MapParams(fns=("matmul",), matmul_rows=3), "matmul_rows (3) must divide rows (4)"),
    (lambda: MapParams(fns=("add",), matmul_rows=2), "matmul_rows is set but matmul is not in fns"),
    (lambda: AccumParams(updates=("mul",)), "unsupported update function 'mul'"),
    (lambda: AccumParams(state_dtype="int16"), "update 'add' cannot run on state"),
    (lambda: AccumParams(rows=3, updates=("retile_row",), state_rows=4), "multiple of the element rows"),
    (lambda: AccumParams(state_cols=0), "state_cols must be an integer >= 1, got 0"),
    (lambda: Scan(AccumParams(rows=1, updates=("retile_row",), state_rows=4)), "Scan: retile_row is not supported"),
    (lambda: FlatMapParams(fn="silu"), "unsupported function 'silu'"),
    (lambda: FlatMapParams(fn="range", rows=2, cols=2), "range takes [1, 2]"),
    (lambda: FlatMapParams(max_rank=0), "max_rank must be >= 1"),
    (lambda: Map(AccumParams()), "Map: params must be MapParams"),
])
def test_bad_parameters(make, message):
    with pytest.raises(ParamError) as exc:
        make()
    assert message in str(exc.value)


def test_bad_configuration():
    unit = Map(MapParams(rows=2, cols=2, dtype="int16", fns=("silu",)))
    st = StreamType(Tile("int16", 2, 2), (3,))
    with pytest.raises(ParamError, match="function 'exp' is not built into this unit"):
        unit.configure(dict(fn="exp"), {"in0": st})
    with pytest.raises(ParamError, match="input 'in0' carries int16\\[4,4\\]"):
        unit.configure(dict(fn="silu"), {"in0": StreamType(Tile("int16", 4, 4), (3,))})
    rq = Map(MapParams(rows=2, cols=2, dtype="int32", fns=("requantize",), out_dtype="int8"))
    with pytest.raises(ParamError, match="output port carries int8"):
        rq.configure(dict(fn=fn("requantize", shift=3, dtype="int16")), {"in0": StreamType(Tile("int32", 2, 2), (3,))})
    acc = Accum(AccumParams(rows=2, cols=2, dtype="int16"))
    with pytest.raises(ParamError, match="rank must be in 1..1"):
        acc.configure(dict(update="add", init=fn("zeros", rows=2, cols=2, dtype="int32"), rank=2),
                      {"in": StreamType(Tile("int16", 2, 2), (3, 4))})
    for u in (unit, rq, acc):  # configured only, never simulated
        not_elaborated(u)


# --------------------------------------------------------------------------- large tiles (slow)

@pytest.mark.slow
def test_map_matmul_16x16(sim_backend):
    unit = Map(MapParams(rows=16, cols=16, dtype="int8", fns=("matmul",), max_rank=1))
    t = Tile("int8", 16, 16)
    inputs = paired(np.random.default_rng(16), t, t, "rank1")
    check_unit(unit, "Map", inputs, dict(fn="matmul", n=2), backend=sim_backend, seeds=(0,))


# --------------------------------------------------------------------------- the SwiGLU fabric's nodes

def _unit_for(node):
    """A unit whose physical tiles are the node's (what the mapper would pick)."""
    if node.kind == "Map":
        f = node.p("fn")
        t0 = node.t("in0").dtype
        t1 = node.t("in1").dtype if node.p("n") == 2 else None
        out = node.out_types["out"].dtype
        extra = dict(in1_rows=int(t1.rows), in1_cols=int(t1.cols), in1_dtype=t1.dtype.name) if t1 else {}
        return Map(MapParams(rows=int(t0.rows), cols=int(t0.cols), dtype=t0.dtype.name, fns=(f.name,),
                             out_dtype=out.dtype.name, max_rank=2, **extra))
    t = node.t("in").dtype
    s = node.out_types["out"].dtype
    return Accum(AccumParams(rows=int(t.rows), cols=int(t.cols), dtype=t.dtype.name, updates=("add",),
                             state_rows=int(s.rows), state_cols=int(s.cols), max_rank=2))


@pytest.mark.parametrize("node_name", ["gate_proj", "gate_requant", "silu", "gate_mul", "mul_requant",
                                       "down_proj", "accum_down", "out_requant"])
def test_swiglu_int16_nodes(sim_backend, node_name):
    """Each Map/Accum node of the int16 SwiGLU graph (tb=2, H=4, ti=2) on a unit built for its tiles."""
    from step_hdl.workloads.swiglu import swiglu_graph
    node = swiglu_graph(4, 4, 4, 2, 2, "int16").nodes[node_name]
    unit = _unit_for(node)
    rng = np.random.default_rng(18)
    inputs = {}
    for port, ref in node.inputs.items():
        st = ref.type
        t = st.dtype
        shape = tuple(int(d) for d in st.shape)
        struct = shape[-1]
        for d in reversed(shape[:-1]):
            struct = [struct] * d
        lim = 1 << 12 if t.dtype.name == "int16" else None  # keep products near the Q8 range
        vals = nested(struct, lambda: rand_tile(rng, int(t.rows), int(t.cols), t.dtype.name,
                                                lo=-lim if lim else None, hi=lim))
        inputs[port] = (st, encode(vals, len(shape) - 1))
    check_unit(unit, node.kind, inputs, dict(node.params), backend=sim_backend)
