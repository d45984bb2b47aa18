"""Compute units on bf16 and fp32 tiles against the interpreter, bit for bit, under random stalls: the Map's
float functions, the Accum's float updates and the MatMul unit's fp32 running sum of group sums (the
arithmetic itself: ``tests/hw/test_floats.py``)."""

import numpy as np
import pytest

from step_hdl import Graph, StreamType, Tile, floats
from step_hdl.functions import fn
from step_hdl.interp import run
from step_hdl.token import encode
from step_hdl.units.compute import Accum, AccumParams, Map, MapParams
from step_hdl.units.matmul import MatMul, MatMulParams
from step_hdl.units.params import ParamError

from hw.harness import check_unit
from hw.test_compute_units import SHAPES, nested
from hw.test_matmul_unit import L


def rand_float_tile(rng, rows, cols, dt):
    """Values over many binades (with zeros), in ``dt``'s format: sums round, products stay finite."""
    x = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-12, 12, (rows, cols))
    x[rng.random((rows, cols)) < 0.1] = 0
    return floats.round_to(x, floats.fmt_of(dt))


def fstream(rng, tile: Tile, shape_key: str):
    rank, struct, shape = SHAPES[shape_key]
    toks = encode(nested(struct, lambda: rand_float_tile(rng, int(tile.rows), int(tile.cols), tile.dtype.name)),
                  rank)
    return StreamType(tile, shape), toks


def fpaired(rng, t0: Tile, t1: Tile, shape_key: str):
    st0, a = fstream(rng, t0, shape_key)
    st1, b = fstream(rng, t1, shape_key)
    return {"in0": (st0, a), "in1": (st1, b)}


@pytest.mark.parametrize("dt, dt1", [("bf16", "bf16"), ("fp32", "fp32"), ("bf16", "fp32")])
@pytest.mark.parametrize("f", ["add", "sub", "mul", "max", "div"])
def test_map_float_elementwise(sim_backend, f, dt, dt1):
    unit = Map(MapParams(rows=4, cols=4, dtype=dt, in1_dtype=dt1, fns=(f,), max_rank=2))
    check_unit(unit, "Map", fpaired(np.random.default_rng(len(f)), Tile(dt, 4, 4), Tile(dt1, 4, 4), "rank1"),
               dict(fn=f, n=2), backend=sim_backend)


@pytest.mark.parametrize("f, dt, out", [
    ("silu", "bf16", None), ("exp", "bf16", None), ("relu", "fp32", None), (fn("convert", dtype="bf16"), "fp32", "bf16"),
    (fn("convert", dtype="fp32"), "bf16", "fp32"), ("row_sum", "bf16", None), ("col_sum", "fp32", None),
    ("row_max", "bf16", None), ("col_max", "bf16", None), (fn("affine", scale=0.015625, offset=-1.5), "bf16", None),
    (fn("affine", scale=-3.1, offset=0.1), "fp32", None)], ids=str)
def test_map_float_unary(sim_backend, f, dt, out):
    name = f if isinstance(f, str) else f.name
    unit = Map(MapParams(rows=4, cols=4, dtype=dt, fns=(name,), out_dtype=out, max_rank=2))
    st, toks = fstream(np.random.default_rng(3), Tile(dt, 4, 4), "rank2")
    check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn=f, n=1), backend=sim_backend)


@pytest.mark.parametrize("cols, dt", [(8, "bf16"), (6, "fp32")])
def test_map_float_row_group_sums(sim_backend, cols, dt):
    """Each row's group sums side by side (``[4, ceil(cols / 4)]`` fp32), the last group padded with zeros."""
    unit = Map(MapParams(rows=4, cols=cols, dtype=dt, fns=("row_group_sums",), max_rank=2))
    assert unit.params.out_tile == Tile("fp32", 4, -(-cols // 4))
    st, toks = fstream(np.random.default_rng(cols), Tile(dt, 4, cols), "rank2")
    check_unit(unit, "Map", {"in0": (st, toks)}, dict(fn="row_group_sums", n=1), backend=sim_backend)


# (each 15-25 s on the Python simulator: the group sums, which the float MatMul builds on, in the default suite)
@pytest.mark.parametrize("f, out", [pytest.param(fn("matmul"), None, marks=pytest.mark.slow),
                                    pytest.param(fn("matmul", dtype="fp32"), "fp32", marks=pytest.mark.slow),
                                    pytest.param(fn("matmul", transpose_b=True), None, marks=pytest.mark.slow),
                                    (fn("matmul", groups=True), None)], ids=str)
def test_map_float_matmul(sim_backend, f, out):
    """A single physical tile's product: summed in the fixed order and rounded once (or kept in fp32), or its
    group sums side by side."""
    k = 8 if f.param("groups") else 4            # two group sums per element
    b_tile = Tile("bf16", 4, k) if f.param("transpose_b") else Tile("bf16", k, 4)
    unit = Map(MapParams(rows=4, cols=k, in1_rows=int(b_tile.rows), in1_cols=int(b_tile.cols), dtype="bf16",
                         fns=("matmul",), out_dtype=out, matmul_transpose_a=False,
                         matmul_groups=bool(f.param("groups")), max_rank=2))
    check_unit(unit, "Map", fpaired(np.random.default_rng(5), Tile("bf16", 4, k), b_tile, "rank1"),
               dict(fn=f, n=2), backend=sim_backend)


@pytest.mark.parametrize("update, dt, state", [("add", "bf16", "fp32"), ("add", "fp32", "fp32"),
                                                ("max", "bf16", "bf16"), ("add_groups", "fp32", "fp32")])
def test_accum_float_updates(sim_backend, update, dt, state):
    cols = 8 if update == "add_groups" else 4
    unit = Accum(AccumParams(rows=4, cols=cols, dtype=dt, updates=(update,), state_cols=4, state_dtype=state,
                             max_rank=2))
    st, toks = fstream(np.random.default_rng(9), Tile(dt, 4, cols), "rank1")
    init = fn("zeros" if update != "max" else "lowest", rows=4, cols=4, dtype=state)
    check_unit(unit, "Accum", {"in": (st, toks)}, dict(update=update, init=init, rank=1), backend=sim_backend)


def group_chain_reference(inputs: dict, f, k: int) -> dict:
    """What a float MatMul unit computes: Accum(Reshape(Map([in0, in1], f, groups), 0, k), add_groups, zeros)."""
    g = Graph("float_matmul_chain")
    a = g.source(inputs["in0"][0], data="a", name="a")
    b = g.source(inputs["in1"][0], data="b", name="b")
    prod = g.map([a, b], f, name="prod")
    rows, cols = int(inputs["in0"][0].dtype.rows), int(inputs["in1"][0].dtype.cols)
    acc = g.accum(g.reshape(prod, 0, k, name="runs"), "add_groups",
                  fn("zeros", rows=rows, cols=cols, dtype="fp32"), rank=1, name="sum")
    g.output(acc, name="y")
    return {"out": run(g, {}, {"a": inputs["in0"][1], "b": inputs["in1"][1]}).outputs["y"]}


@pytest.mark.parametrize("inner, k, runs", [(4, 3, [2, 0, 1]), pytest.param(8, 2, [1, 2], marks=pytest.mark.slow)])
def test_matmul_unit_float_running_sum(sim_backend, inner, k, runs):
    """bf16 operands ``[4, inner] x [inner, 4]``, an fp32 running sum of each pair's group sums (``inner / 4``
    of them per element, added one after another): a k-run is the logical matmul's fixed-order sum."""
    unit = MatMul(MatMulParams(rows=4, cols=inner, in1_rows=inner, in1_cols=4, dtype="bf16", max_rank=2,
                               matmul_transpose_a=False, matmul_groups=True))
    rng = np.random.default_rng(inner + k)
    tiles = {"in0": Tile("bf16", 4, inner), "in1": Tile("bf16", inner, 4)}
    toks = {}
    for port, t in tiles.items():
        toks[port] = encode([[rand_float_tile(rng, int(t.rows), int(t.cols), "bf16") for _ in range(n * k)]
                             for n in runs], 1)
    inputs = {p: (StreamType(tiles[p], (len(runs), L)), toks[p]) for p in toks}
    f = fn("matmul", groups=True)
    check_unit(unit, "MatMul", inputs, dict(fn=f, n=2, k=k), backend=sim_backend,
               expected=group_chain_reference(inputs, f, k))


@pytest.mark.parametrize("make, message", [
    (lambda: MapParams(dtype="fp32", fns=("silu",)), "function 'silu' on fp32 tiles has no hardware (it builds bf16"),
    (lambda: MapParams(dtype="bf16", fns=("requantize",), out_dtype="int8"),
     "function 'requantize' on bf16 tiles has no hardware (it takes integers)"),
    (lambda: MatMulParams(dtype="bf16"), "a float MatMul sums its products' group sums (matmul_groups)"),
    (lambda: MapParams(dtype="bf16", fns=("matmul",), matmul_rows=2), "matmul_rows folds integer matmuls only"),
    (lambda: MapParams(dtype="bf16", fns=("add",), matmul_groups=True), "matmul_groups is set but matmul is not"),
    (lambda: AccumParams(dtype="bf16", state_dtype="int32"), "float elements bf16[4,4] need a float state"),
])
def test_bad_float_parameters(make, message):
    with pytest.raises(ParamError) as exc:
        make()
    assert message in str(exc.value)


@pytest.mark.slow
def test_matmul_unit_float_16x16_at_one_pair_a_cycle(sim_backend):
    """The 16x16 bf16 MatMul unit (4,096 products, four group sums per output element added to the running sum
    in one cycle) takes a pair of tiles every cycle with an always-ready output: II 1, bit for bit. Measured
    2026-12-03 on Verilator: passes in 20 minutes, nearly all of it the build."""
    unit = MatMul(MatMulParams(rows=16, cols=16, dtype="bf16", max_rank=2, matmul_transpose_a=False,
                               matmul_groups=True))
    rng = np.random.default_rng(16)
    t = Tile("bf16", 16, 16)
    runs, k = [3, 2], 2
    toks = {p: encode([[rand_float_tile(rng, 16, 16, "bf16") for _ in range(n * k)] for n in runs], 1)
            for p in ("in0", "in1")}
    inputs = {p: (StreamType(t, (len(runs), L)), toks[p]) for p in toks}
    f = fn("matmul", groups=True)
    cycles = check_unit(unit, "MatMul", inputs, dict(fn=f, n=2, k=k), backend=sim_backend, seeds=(0,), p_gap=0,
                        p_drop=0, expected=group_chain_reference(inputs, f, k))
    pairs = sum(runs) * k
    assert cycles[0] <= pairs + 2 + 8, cycles       # a pair a cycle, its stops merged, a few cycles of latency
