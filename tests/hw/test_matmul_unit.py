"""The output-stationary MatMul unit against the interpreter's Map(matmul) -> Reshape -> Accum chain, bit for bit,
under random stalls."""

import numpy as np
import pytest

from step_hdl import Graph, StreamType, Tile
from step_hdl.functions import fn
from step_hdl.interp import run
from step_hdl.sim.streams import Scenario, run_amaranth
from step_hdl.token import encode
from step_hdl.types import ragged
from step_hdl.units.compute import Map, MapParams
from step_hdl.units.matmul import MatMul, MatMulParams
from step_hdl.units.params import ParamError

from hw.harness import check_unit
from hw.test_compute_units import rand_tile
from step_hdl.units.base import not_elaborated

L = ragged("L")


def chain_reference(inputs: dict, f, k: int) -> dict:
    """What the unit computes: Accum(Reshape(Map([in0, in1], f), 0, k), add, zeros, rank 1)."""
    g = Graph("matmul_chain")
    a = g.source(inputs["in0"][0], data="a", name="a")
    b = g.source(inputs["in1"][0], data="b", name="b")
    prod = g.map([a, b], f, name="prod")
    t = prod.type.dtype
    acc = g.accum(g.reshape(prod, 0, k, name="runs"), "add",
                  fn("zeros", rows=int(t.rows), cols=int(t.cols), dtype=t.dtype.name), rank=1, name="sum")
    g.output(acc, name="y")
    return {"out": run(g, {}, {"a": inputs["in0"][1], "b": inputs["in1"][1]}).outputs["y"]}


def operands(rng, a_tile: Tile, b_tile: Tile, runs, k: int, rank: int, a_rows=None):
    """Operand streams of ``runs`` (nested lists of output-tile counts per innermost run, ``rank`` levels) with
    ``k`` products per output tile; ``a_rows(i)``: the valid rows of the first operand in output tile ``i``."""
    count = iter(range(1 << 30))

    def run_of(n, which):
        out = []
        for _ in range(n):
            rows = a_rows(next(count)) if which == "a" and a_rows else None
            t = a_tile if which == "a" else b_tile
            out += [rand_tile(rng, rows or int(t.rows), int(t.cols), t.dtype.name) for _ in range(k)]
        return out

    def nest(r, which):
        return run_of(r, which) if isinstance(r, int) else [nest(x, which) for x in r]

    state = rng.bit_generator.state
    a = encode(nest(runs, "a"), rank)
    rng.bit_generator.state = state         # the same structure (and counter) for the second operand
    count = iter(range(1 << 30))
    b = encode(nest(runs, "b"), rank)
    shape = {1: (len(runs), L), 2: (len(runs), L, L)}[rank]
    return {"in0": (StreamType(a_tile, shape), a), "in1": (StreamType(b_tile, shape), b)}


CASES = [  # (size, dtype, k, rank, runs)
    (2, "int8", 1, 1, [2, 0, 3]),
    (2, "int8", 3, 1, [1, 2, 0, 1]),
    (4, "int16", 2, 1, [3, 1]),
    (4, "int16", 4, 2, [[1, 0], [], [2, 1]]),
]


@pytest.mark.parametrize("size, dt, k, rank, runs", CASES)
@pytest.mark.parametrize("f", ["matmul", fn("matmul", transpose_b=True)], ids=str)
@pytest.mark.parametrize("pipeline", [False, True], ids=["comb", "pipelined"])
def test_matmul_unit(sim_backend, size, dt, k, rank, runs, f, pipeline):
    unit = MatMul(MatMulParams(rows=size, cols=size, dtype=dt, max_rank=3, matmul_transpose_a=False,
                               pipeline=pipeline))
    assert unit.latency == (5 if pipeline else 1)
    t = Tile(dt, size, size)
    inputs = operands(np.random.default_rng(size * 10 + k), t, t, runs, k, rank)
    check_unit(unit, "MatMul", inputs, dict(fn=f, n=2, k=k), backend=sim_backend,
               expected=chain_reference(inputs, f, k))


def test_matmul_unit_partial_rows(sim_backend):
    """Packed rows: each output tile's first operands have its valid rows; the output carries them (through
    the pipelined unit's stages)."""
    unit = MatMul(MatMulParams(rows=4, cols=4, dtype="int16", max_rank=2, matmul_transpose_a=False,
                               pipeline=True))
    t = Tile("int16", 4, 4)
    inputs = operands(np.random.default_rng(5), t, t, [2, 3, 1], 3, 1, a_rows=lambda i: 1 + i % 4)
    check_unit(unit, "MatMul", inputs, dict(fn="matmul", n=2, k=3), backend=sim_backend,
               expected=chain_reference(inputs, "matmul", 3))


@pytest.mark.parametrize("g", [1, 2])
def test_matmul_unit_folded(sim_backend, g):
    """matmul_rows = g: each pair takes 4/g cycles, the sums as unfolded."""
    unit = MatMul(MatMulParams(rows=4, cols=4, dtype="int16", max_rank=2, matmul_rows=g, matmul_transpose_a=False))
    t = Tile("int16", 4, 4)
    inputs = operands(np.random.default_rng(6), t, t, [2, 1], 2, 1)
    check_unit(unit, "MatMul", inputs, dict(fn="matmul", n=2, k=2), backend=sim_backend,
               expected=chain_reference(inputs, "matmul", 2))


def test_matmul_unit_multiplies_every_cycle(sim_backend):
    """Without stalls the unit takes a pair every cycle: n runs of j output tiles of k products take as
    long as a plain Map (II 1, latency 1) on the same n·j·k pairs, n run closes and done; as Map -> Accum
    they would carry a stop after every k products, n·j cycles more."""
    unit = MatMul(MatMulParams(rows=4, cols=4, dtype="int16", max_rank=2, matmul_transpose_a=False))
    t = Tile("int16", 4, 4)
    n, j, k = 3, 4, 5
    inputs = operands(np.random.default_rng(7), t, t, [j] * n, k, 1)
    fast = dict(backend=sim_backend, seeds=(0,), p_gap=0, p_drop=0)
    (cycles,) = check_unit(unit, "MatMul", inputs, dict(fn="matmul", n=2, k=k), **fast,
                           expected=chain_reference(inputs, "matmul", k))
    # a Map (latency 1, II 1) on the same pairs and stops takes as long: no cycle per output tile
    plain = Map(MapParams(rows=4, cols=4, dtype="int16", fns=("matmul",), max_rank=2, matmul_transpose_a=False))
    (map_cycles,) = check_unit(plain, "Map", inputs, dict(fn="matmul", n=2), **fast)
    types = {p: st for p, (st, _) in inputs.items()}
    extra = len(unit.configure(dict(fn="matmul", n=2, k=k), types)) - len(plain.configure(dict(fn="matmul", n=2),
                                                                                           types))
    # (the Amaranth harness counts the configuration writes as cycles, the cocotb one does not)
    assert cycles - map_cycles in (0, extra)


def test_matmul_unit_errors():
    with pytest.raises(ParamError, match=r"MatMulParams: fns must be \('matmul',\), got \('add',\)"):
        MatMulParams(rows=4, cols=4, dtype="int16", fns=("add",))
    with pytest.raises(ParamError, match=r"MatMulParams: k_bits must be an integer >= 1, got 0"):
        MatMulParams(rows=4, cols=4, dtype="int16", k_bits=0)
    with pytest.raises(ParamError, match=r"MatMul: params must be MatMulParams, got MapParams"):
        MatMul(MapParams(rows=4, cols=4, dtype="int16", fns=("matmul",)))
    unit = MatMul(MatMulParams(rows=4, cols=4, dtype="int16", k_bits=4, matmul_transpose_a=False))
    not_elaborated(unit)  # built only to check configure(): never elaborated
    st = StreamType(Tile("int16", 4, 4), (2, 8))
    types = {"in0": st, "in1": st}
    for bad in (0, 16, True, None):
        with pytest.raises(ParamError, match=rf"MatMul: k \(products per output tile\) must be an integer in "
                                             rf"1\.\.\.15 \(k_bits 4\), got {bad!r}"):
            unit.configure(dict(fn="matmul", n=2, k=bad), types)


@pytest.mark.parametrize("size, dt, k, rank, runs", CASES)
def test_pipelined_advance_is_its_expression(size, dt, k, rank, runs):
    """The pipelined unit's advance, formed from two registers and the output's ready, equals
    ``~tok_valid | (free & ~empty)`` of the last stage's token in every cycle, with random stalls on both
    sides (zero tiles of empty runs, stops and the k-th pairs among them)."""
    t = Tile(dt, size, size)
    inputs = operands(np.random.default_rng(size * 10 + k), t, t, runs, k, rank)
    for seed in (0, 1, 2):
        unit = MatMul(MatMulParams(rows=size, cols=size, dtype=dt, max_rank=3, matmul_transpose_a=False,
                                   pipeline=True))
        config = unit.configure(dict(fn="matmul", n=2, k=k), {port: st for port, (st, _) in inputs.items()})
        sc = Scenario(unit.pack_inputs(inputs), unit.output_done_bits(), config, seed=seed, p_gap=0.4, p_drop=0.4)
        got, _ = run_amaranth(unit, sc, checks=lambda: [unit.advance_check])
        want = chain_reference(inputs, "matmul", k)["out"]
        assert unit.fmt("o").unpack_all(got["o"]) == want
