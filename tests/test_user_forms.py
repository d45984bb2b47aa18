"""Forms a user's own programs need that the interpreter always ran, mapped and run in RTL bit for bit: a
``[1, 1]`` scalar and a ``[1, C]`` row (a norm's gamma) broadcast over blocks of physical tiles, a
matrix-vector product (a ``[C, 1]`` operand), Expand of tiles, and float constants (``affine`` on bf16) with
a float row sum wider than the physical tile (more of those: ``tests/test_float_flow.py``)."""

from types import SimpleNamespace

import numpy as np
import pytest

from step_hdl import Graph
from step_hdl.flow import model, prepare, run_rtl, workload

RNG = np.random.default_rng(60)


def _ints(*shape):
    return RNG.integers(-9, 9, shape).astype(np.int16)


def _with_operand(name, f, x_cols, operand, y_cols):
    """``y = f(x, c)`` over two ``[8, x_cols]`` tiles of ``x``, with ``c`` (shape ``operand``) loaded once per
    tile: a broadcast operand or a matmul's second operand."""
    g = Graph(name)
    g.tensor("x", 16, x_cols, "int16"), g.tensor("c", *operand, "int16"), g.tensor("y", 16, y_cols, "int32")
    x = g.load("x", tile=(8, x_cols), out_shape=[2], stride=[1], name="load_x")
    c = g.load("c", tile=operand, out_shape=[2], stride=[0], name="load_c")
    g.store(g.map([x, c], f, name="m"), "y", tile=(8, y_cols), name="store_y")
    return g, {"x": _ints(16, x_cols), "c": _ints(*operand)}


def scalar_times_column():
    return _with_operand("scale_column", "mul", 1, (1, 1), 1)


def gamma_times_tiles():
    return _with_operand("gamma", "mul", 16, (1, 16), 16)


def matrix_vector():
    return _with_operand("matvec", "matmul", 16, (16, 1), 1)


def expand_tiles():
    g = Graph("expand")
    g.tensor("x", 8, 4, "int16"), g.tensor("r", 24, 4, "int16"), g.tensor("y", 24, 4, "int32")
    x = g.load("x", tile=(4, 4), out_shape=[2, 1], stride=[1, 0], name="load_x")
    r1, r2 = g.broadcast(g.load("r", tile=(4, 4), out_shape=[2, 3], stride=[3, 1], name="load_r"), 2,
                         name="split_r")
    g.store(g.map([g.expand(x, r1, rank=1, name="ex"), r2], "add", name="m"), "y", tile=(4, 4), name="store_y")
    return g, {"x": _ints(8, 4), "r": _ints(24, 4)}


def float_scale():
    """A bf16 tile scaled and shifted by float constants (``affine``), then its row sums over 16 columns."""
    from step_hdl import floats
    from step_hdl.functions import fn
    g = Graph("float_scale")
    g.tensor("x", 8, 16, "bf16"), g.tensor("y", 8, 16, "bf16"), g.tensor("s", 8, 1, "bf16")
    x = g.load("x", tile=(8, 16), out_shape=[1], stride=[1], name="load_x")
    a, b = g.broadcast(g.map(x, fn("affine", scale=0.125, offset=-1.5), name="scale"), 2, name="split")
    g.store(a, "y", tile=(8, 16), name="store_y")
    g.store(g.map(b, "row_sum", name="sum"), "s", tile=(8, 1), name="store_s")
    return g, {"x": floats.round_to(RNG.standard_normal((8, 16)) * 30, floats.BF16).astype(np.float32)}


@pytest.mark.parametrize("program", [scalar_times_column, gamma_times_tiles, matrix_vector, expand_tiles,
                                     float_scale],
                         ids=lambda f: f.__name__)
def test_user_form_maps_and_runs_bit_exact(program):
    w = workload(*program())
    prep = prepare(w, 4)
    res = run_rtl(prep, "amaranth")
    assert res.outputs_match, res.mismatches
    assert w.mismatches(SimpleNamespace(memory=res.outputs)) == {}
    # the model times the same lowering
    m = model(w, lowered=prep.lowered)
    assert abs(m.cycles / res.cycles - 1) < 0.25, (m.cycles, res.cycles)


def two_pass(n=80):
    """``y = x - sum(x)`` over ``n`` rows: one branch of the split stream waits for a reduction over all of it,
    so the other must hold every row meanwhile (``2n + 1`` tokens, more than the fabric's 64-deep FIFO)."""
    from step_hdl.functions import fn
    g = Graph("two_pass")
    g.tensor("x", n, 4, "int16"), g.tensor("y", n, 4, "int32")
    x = g.load("x", tile=(1, 4), out_shape=[1, n], stride=[0, 1], name="load_x")
    a, r, b = g.broadcast(x, 3, name="split")
    total = g.reshape(g.accum(b, "add", fn("zeros", rows=1, cols=4, dtype="int32"), rank=1, name="total"), 0, 1,
                      name="total_1")
    g.store(g.map([a, g.expand(total, r, rank=1, name="each")], "sub", name="centre"), "y", tile=(1, 4),
            name="store_y")
    return g, {"x": _ints(n, 4)}


def test_a_branch_that_holds_a_whole_stream_gets_a_fifo_that_holds_it():
    """The two-pass program deadlocked with the reconvergent FIFO capped at max_fifo_depth (64); the mapper now
    sizes the branches that hold a chunk another branch takes whole (161 tokens: 256 deep), and nothing else
    (two matmuls buffering one operand side by side keep 64: the built-in workloads' FIFOs are unchanged)."""
    from step_hdl.mapper.fifo import whole_chunk_edges
    w = workload(*two_pass())
    prep = prepare(w, 4)
    depth = {e.label: e.depth for e in prep.design.edges}
    assert depth["split.out0"] == depth["split.out1"] == 256 and depth["split.out2"] == 64
    res = run_rtl(prep, "amaranth")
    assert res.outputs_match, res.mismatches
    assert model(w, lowered=prep.lowered).cycles > 0          # no deadlock in the model either
    from step_hdl.workloads import swiglu
    sw = swiglu(16, 64, 128, 8, 4, "int16")
    from step_hdl.flow import lower
    lo = lower(sw, 4)
    assert whole_chunk_edges(lo.graph, lo.bindings) == {}
