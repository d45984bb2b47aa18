"""Element types through the whole flow: graphs whose streams mix int8, int16 and int32 operands and
results (matmul with its operand buffers and accumulation, element-wise maps, requantize, relu, an Accum
over logical tiles, stores of every width) run bit-exactly in RTL on fabrics of every element type, because
every unit, buffer, FIFO and memory word is sized by the stream it carries; a type the units cannot
compute on is an error at map time naming the node and port."""

import itertools

import numpy as np
import pytest

from step_hdl import Graph, floats, fn
from step_hdl.flow import prepare, run_rtl
from step_hdl.interp import run as interp_run
from step_hdl.mapper.fabric import FabricError
from step_hdl.types import dtype as make_dtype
from step_hdl.workloads.base import Workload

INTS = ("int8", "int16", "int32")


def _rand(rng, shape, dt, span=20):
    return rng.integers(-span, span, shape).astype(make_dtype(dt).numpy)


def _store(g, stream, rows, cols, tile=(4, 4)):
    g.tensor("y", rows, cols, stream.type.dtype.dtype.name)
    g.store(stream, "y", tile=tile, name="store_y")


def matmul_graph(ta, tw, rng):
    """``y = a @ w`` on 8x8 tensors in logical tiles ``[4, 8] x [8, 4]``: on 4x4 physical tiles both operands
    are buffered, re-read and the K blocks accumulated, all in the operands' own types."""
    g = Graph(f"mm_{ta}_{tw}")
    g.tensor("a", 8, 8, ta)
    g.tensor("w", 8, 8, tw)
    a = g.load("a", tile=(4, 8), out_shape=[2, 2], stride=[1, 0], name="load_a")
    w = g.load("w", tile=(8, 4), out_shape=[2, 2], stride=[0, 1], name="load_w")
    _store(g, g.map([a, w], "matmul", name="mm"), 8, 8)
    return g, {"a": _rand(rng, (8, 8), ta), "w": _rand(rng, (8, 8), tw)}


def elementwise_graph(ta, tb, f, rng):
    g = Graph(f"{f}_{ta}_{tb}")
    g.tensor("a", 8, 8, ta)
    g.tensor("b", 8, 8, tb)
    a, b = (g.load(t, tile=(4, 4), out_shape=[2, 2], stride=[2, 1], name=f"load_{t}") for t in "ab")
    _store(g, g.map([a, b], f, name=f), 8, 8)
    return g, {"a": _rand(rng, (8, 8), ta), "b": _rand(rng, (8, 8), tb)}


def requantize_graph(ta, to, rng):
    """requantize (shift 2, saturating to ``to``) then relu."""
    g = Graph(f"rq_{ta}_{to}")
    g.tensor("a", 8, 8, ta)
    a = g.load("a", tile=(4, 4), out_shape=[2, 2], stride=[2, 1], name="load_a")
    q = g.map(a, fn("requantize", shift=2, dtype=to), name="q")
    _store(g, g.map(q, "relu", name="act"), 8, 8)
    return g, {"a": _rand(rng, (8, 8), ta, 100 if ta == "int8" else 2000)}


def accum_graph(ta, rng):
    """The sum of four 8x8 logical tiles (int32 state) over a stream of ``ta`` tiles, stored as int32."""
    g = Graph(f"acc_{ta}")
    g.tensor("a", 8, 32, ta)
    a = g.load("a", tile=(8, 8), out_shape=[1, 4], stride=[4, 1], name="load_a")
    s = g.accum(a, "add", fn("zeros", rows=8, cols=8, dtype="int32"), rank=1, name="sum")
    _store(g, s, 8, 8, tile=(8, 8))
    return g, {"a": _rand(rng, (8, 32), ta, 100)}


CASES = ([("matmul", ta, tw) for ta, tw in itertools.product(INTS, INTS)]
         + [(f, ta, tb) for f in ("add", "mul", "max") for ta, tb in itertools.product(INTS, INTS)]
         + [("requantize", ta, to) for ta, to in (("int32", "int8"), ("int16", "int8"), ("int8", "int32"))]
         + [("accum", ta, None) for ta in INTS])


def _graph(case, rng):
    f, ta, tb = case
    if f == "matmul":
        return matmul_graph(ta, tb, rng)
    if f == "requantize":
        return requantize_graph(ta, tb, rng)
    if f == "accum":
        return accum_graph(ta, rng)
    return elementwise_graph(ta, tb, f, rng)


@pytest.mark.parametrize("case", CASES, ids=["-".join(c for c in case if c) for case in CASES])
def test_mixed_types_bit_exact_in_rtl(case):
    """Each case on a fabric of another element type than its operands (the fabric's type only sets the
    default memory word; it must not size any stream)."""
    rng = np.random.default_rng(hash(case) % 2**32)
    g, tensors = _graph(case, rng)
    ref = interp_run(g, tensors).memory["y"]
    fabric_type = INTS[(INTS.index(case[1]) + 1) % 3]
    w = Workload(g, tensors, {}, {"y": ref}, make_dtype(fabric_type))
    res = run_rtl(prepare(w, 4), "amaranth")
    assert res.outputs_match, res.mismatches
    assert res.outputs["y"].dtype == ref.dtype and np.array_equal(res.outputs["y"], ref)


def test_rtl_result_reads_back_outputs_and_positions():
    """The RTL result carries the output tensors and, on a mismatch, every position that differs (here the
    reference is altered at two places after preparing, so the RTL's own result is the unaltered one)."""
    g, tensors = matmul_graph("int8", "int16", np.random.default_rng(1))
    ref = interp_run(g, tensors).memory["y"]
    prep = prepare(Workload(g, tensors, {}, {"y": ref}, make_dtype("int16")), 4)
    prep.expected["y"] = ref.copy()
    prep.expected["y"][1, 2] += 1
    prep.expected["y"][7, 0] -= 3
    res = run_rtl(prep, "amaranth")
    assert not res.outputs_match
    assert res.differ["y"].tolist() == [[1, 2], [7, 0]]
    assert res.mismatches["y"] == f"2 of 64 elements differ, first at (1, 2): got {ref[1, 2]}, " \
                                  f"interpreter {ref[1, 2] + 1}"
    assert np.array_equal(res.outputs["y"], ref)
    assert res.to_json()["differ"] == {"y": [[1, 2], [7, 0]]}


@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_float_tiles_inside_an_integer_workload_run_bit_for_bit(dt):
    """A floating-point tensor inside an integer workload: its relu unit is a float unit of its own, and the
    result is the interpreter's bit for bit (negative values clipped to +0, a NaN kept)."""
    g = Graph("float_inside")
    g.tensor("s", 8, 8, dt)
    g.tensor("y", 8, 8, dt)
    s = g.load("s", tile=(4, 4), out_shape=[2, 2], stride=[2, 1], name="load_s")
    g.store(g.map(s, "relu", name="act"), "y", tile=(4, 4), name="store_y")
    x = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
    x[0, 0] = np.nan
    x = floats.round_to(floats.read(x), floats.fmt_of(dt))
    want = interp_run(g, {"s": x}).memory["y"]
    res = run_rtl(prepare(Workload(g, {"s": x}, {}, {"y": want}, make_dtype("int16")), 4), "amaranth")
    assert res.outputs_match and np.array_equal(res.outputs["y"].view(np.uint32), want.view(np.uint32))
    assert (want == 0).sum() > 10 and np.isnan(want[0, 0])
