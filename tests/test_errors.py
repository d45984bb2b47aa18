"""Malformed STeP programs are rejected with a specific :class:`~step_hdl.errors.StepError`.

One table row per malformed program. A row builds the bad graph (or feeds bad
JSON to :meth:`Graph.from_json`, or a bad run-time input to :func:`step_hdl.run`
where the problem can only show at run time) and states

* the exact error class (never a bare ``KeyError``/``TypeError``/...),
* substrings the message must contain: the node, the port where one applies,
  and the specific problem,
* the ``(kind, name)`` of the node involved, if any: the message must contain
  ``Kind 'name'``.

Rows marked ``bug=`` are library problems (a bare Python exception, a malformed
program silently accepted, or an unclear message). They are strict xfails: they
start failing loudly (XPASS) once the library is fixed, so the mark must then go.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from step_hdl import Graph, StreamType, Tile, fn, run
from step_hdl.errors import (InputError, StepDeadlockError, StepError, StepGraphError, StepRuntimeError,
                             StepShapeError, StepTypeError)
from step_hdl.types import Index, Selector

ERROR_CLASSES = (StepShapeError, StepTypeError, StepGraphError, StepRuntimeError, StepDeadlockError, InputError)


@dataclass
class Case:
    id: str
    build: Callable[[], object]
    exc: type
    contains: tuple[str, ...]
    node: tuple[str, str] | None = None      # (kind, name): message must contain "Kind 'name'"
    absent: tuple[str, ...] = ()              # substrings a clear message must not contain
    bug: str | None = None                    # library problem -> strict xfail with this reason
    bug_raises: type | None = None            # the bare exception the buggy library raises (None: it
                                              # accepts the program, or its message is unclear)


# --------------------------------------------------------------------------- graph fixtures

ZEROS16 = fn("zeros", rows=16, cols=16, dtype="fp32")


def g_vec(dt="fp32", rows=64, name="x"):
    """Graph with tensor ``name`` [rows, 16] loaded as a rank-0 stream ``[rows/16]`` of [16, 16] tiles."""
    g = Graph("bad")
    g.tensor(name, rows, 16, dt)
    return g, g.load(name, tile=(16, 16), out_shape=[rows // 16], stride=[1], name="ld")


def g_mat(dt="fp32"):
    """Graph with a rank-1 stream ``[4, 4]`` of [16, 16] tiles (node 'ld')."""
    g = Graph("bad")
    g.tensor("x", 64, 64, dt)
    return g, g.load("x", tile=(16, 16), out_shape=[4, 4], stride=[4, 1], name="ld")


def g_two_lengths():
    """Two rank-0 [16, 16] tile streams of static lengths 4 and 8 (nodes 'ld', 'ly')."""
    g, x = g_vec()
    g.tensor("y", 128, 16, "fp32")
    return g, x, g.load("y", tile=(16, 16), out_shape=[8], stride=[1], name="ly")


def sel_src(g, n, count=4, name="route"):
    return g.selector_source(n, values=[[0]] * count, name=name)


def good_json():
    """A valid graph in JSON form: IndexSource 'src' -> Map 'm' (affine) -> Output 'o'."""
    g = Graph("good")
    src = g.index_source(values=[1, 2, 3], name="src")
    g.output(g.map(src, "affine", name="m", scale=2), name="o")
    return g.to_json()


def json_with(edit):
    obj = copy.deepcopy(good_json())
    edit(obj)
    return obj


def load_json():
    """A valid JSON graph with one off-chip tensor and a load (used to vary tensor/param encodings)."""
    g, x = g_vec()
    g.output(x, name="o")
    return g.to_json()


def node_entry(obj, name):
    return next(n for n in obj["nodes"] if n["name"] == name)


# --------------------------------------------------------------------------- builders: rank too high

def accum_rank():
    g, x = g_mat()                         # rank 1 input
    g.accum(x, "add", ZEROS16, rank=2, name="down_proj")


def scan_rank():
    g, x = g_vec()
    g.scan(x, "add", ZEROS16, rank=1, name="prefix")


def bufferize_rank():
    g, x = g_mat()
    g.bufferize(x, 2, name="kv_buf")


def partition_rank():
    g, x = g_vec()
    g.partition(x, sel_src(g, 2), 2, rank=1, name="router")


def reshape_rank():
    g, x = g_mat()
    g.reshape(x, 2, 2, name="split")


def flatten_rank():
    g, x = g_mat()
    g.flatten(x, 0, 2, name="flat")


def expand_rank():
    g, x = g_vec()
    g.expand(x, g.index_source(values=[1, 2, 3, 4], name="ref"), rank=1, name="bcast_rows")


# --------------------------------------------------------------------------- shapes

def map2_shape():
    g, a, b = g_two_lengths()
    g.map([a, b], "add", name="residual")


def zip_shape():
    g, a, b = g_two_lengths()
    g.zip(a, b, name="pair_up")


def reshape_nondiv_rank0():
    g, x = g_vec(rows=80)                  # [5] tiles
    g.reshape(x, 0, 2, name="chunker")


def reshape_nondiv_rank1():
    g = Graph("bad")
    g.tensor("x", 80, 64, "fp32")
    x = g.load("x", tile=(16, 16), out_shape=[5, 4], stride=[4, 1], name="ld")
    g.reshape(x, 1, 2, name="chunker")


def reshape_pad_rank1():
    g, x = g_mat()
    g.reshape(x, 1, 3, pad=0.0, name="chunker")


def expand_inner_not_one():
    g, x = g_mat()                         # inner dimension 4, not 1
    g.tensor("r", 64, 64, "fp32")
    ref = g.load("r", tile=(16, 16), out_shape=[4, 4], stride=[4, 1], name="lr")
    g.expand(x, ref, rank=1, name="bcast_rows")


def reassemble_rank():
    g, x = g_vec()
    p0, p1 = g.partition(x, sel_src(g, 2), 2, name="router")
    g.reassemble([p0, p1], sel_src(g, 2, 1, name="gather_sel"), rank=1, name="gather")


def random_store_shape():
    g, x = g_vec()
    g.tensor("y", 64, 16, "fp32")
    g.random_store(g.index_source(values=[1, 2], name="addr"), x, "y", tile=(16, 16), name="scatter")


def stride_length():
    g, _ = g_vec()
    g.load("x", tile=(16, 16), out_shape=[4], stride=[1, 1], name="ld2")


# --------------------------------------------------------------------------- element types / selectors

def partition_sel_type():
    g, x = g_vec()
    g.partition(x, g.index_source(values=[0] * 4, name="idx"), 2, name="router")


def reassemble_sel_type():
    g, x = g_vec()
    p0, p1 = g.partition(x, sel_src(g, 2), 2, name="router")
    g.reassemble([p0, p1], g.index_source(values=[0] * 4, name="idx"), name="gather")


def partition_sel_width():
    g, x = g_vec()
    g.partition(x, sel_src(g, 3), 2, name="router")


def reassemble_sel_width():
    g, x = g_vec()
    p0, p1 = g.partition(x, sel_src(g, 2), 2, name="router")
    g.reassemble([p0, p1], sel_src(g, 3, name="gather_sel"), name="gather")


def random_load_addr():
    g, x = g_vec()
    g.random_load(x, "x", tile=(16, 16), name="gather_rows")


def eager_merge_types():
    g, x = g_vec()
    g.eager_merge([x, g.index_source(values=[1], name="idx")], name="merge")


def streamify_not_buffer():
    g, x = g_vec()
    g.streamify(x, repeat=2, name="reread")


# --------------------------------------------------------------------------- functions

def unknown_fn():
    g, x = g_vec()
    g.map(x, "gelu", name="act")


def wrong_arity():
    g, x = g_vec()
    g.map(x, "add", name="residual")


def requant_shift():
    g, x = g_vec("int32")
    g.map(x, "requantize", name="rq", shift=40, dtype="int8")


def requant_float():
    g, x = g_vec("int32")
    g.map(x, "requantize", name="rq", shift=4, dtype="fp32")


def silu_int32():
    g, x = g_vec("int32")
    g.map(x, "silu", name="act")


def exp_int32():
    g, x = g_vec("int32")
    g.map(x, "exp", name="act")


def div_int_float():
    g, x = g_vec("int8")
    g.tensor("s", 64, 16, "fp32")
    s = g.load("s", tile=(16, 16), out_shape=[4], stride=[1], name="ls")
    g.map([x, s], "div", name="norm")


def div_broadcast():
    g, x = g_vec("int16")
    g.tensor("s", 64, 8, "int16")
    s = g.load("s", tile=(16, 8), out_shape=[4], stride=[1], name="ls")
    g.map([x, s], "div", name="norm")


def matmul_transpose_a_flag():
    g, x = g_vec()
    a, b = g.broadcast(x, name="fan")
    g.map([a, b], "matmul", name="outer", transpose_a="yes")


def matmul_transpose_a_inner():
    g, x = g_vec()                         # [16, 16] tiles
    g.tensor("w", 64, 32, "fp32")
    w = g.load("w", tile=(32, 32), out_shape=[4], stride=[0], name="lw")
    g.map([x, w], fn("matmul", transpose_a=True), name="grad_w")


def col_sum_selector():
    g = Graph("bad")
    sel = g.selector_source(2, values=[[0], [1]], name="route")
    g.map(sel, "col_sum", name="colsum")


def matmul_inner():
    g, x = g_vec()                         # [16, 16] tiles
    g.tensor("w", 64, 32, "fp32")
    w = g.load("w", tile=(32, 32), out_shape=[4], stride=[0], name="lw")
    g.map([x, w], "matmul", name="up_proj")


def accum_init_not_init():
    g, x = g_mat()
    g.accum(x, "add", "add", rank=1, name="acc")


def accum_state_dtype():
    g, x = g_mat("int8")
    g.accum(x, "add", ZEROS16, rank=1, name="acc")


def flat_map_not_flat():
    g, x = g_vec()
    g.flat_map(x, "silu", name="rows")


def fn_missing_param():
    g, x = g_vec("int32")
    g.map(x, "requantize", name="rq", shift=3)


# --------------------------------------------------------------------------- off-chip memory

def unknown_tensor():
    g = Graph("bad")
    g.load("weights", tile=(16, 16), out_shape=[4], stride=[1], name="lw")


def tile_not_dividing():
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    g.load("x", tile=(24, 16), out_shape=[2], stride=[1], name="ld")


def store_dtype():
    g, x = g_vec()
    g.tensor("y", 64, 16, "int8")
    g.store(x, "y", tile=(16, 16), name="writeback")


# --------------------------------------------------------------------------- graph structure

def consumed_twice():
    g, x = g_vec()
    g.map(x, "silu", name="act")
    g.map(x, "exp", name="softmax_exp")


def other_graph_stream():
    _, x = g_vec()
    Graph("other").map(x, "silu", name="act")


def dangling_feedback():
    g, x = g_vec()
    fb = g.feedback(StreamType(Tile("fp32", 16, 16), (4,)), name="loop")
    g.output(g.map([x, fb], "add", name="acc"), name="o")
    g.validate()


def no_consumer():
    g, x = g_vec()
    g.map(x, "silu", name="act")
    g.validate()


def bad_cycle():
    g, x = g_vec()
    fb = g.feedback(StreamType(Tile("fp32", 16, 16), (4,)), name="loop")
    s = g.map([x, fb], "add", name="running")
    back, out = g.broadcast(s, name="fan")
    g.bind(fb, back)
    g.output(out, name="o")
    g.validate()


def bind_type():
    g, x = g_vec()
    fb = g.feedback(StreamType(Index(), (4,)), name="loop")
    g.bind(fb, x)


def bind_shape():
    g, x = g_vec()                              # x is [4] of fp32[16,16]
    fb = g.feedback(StreamType(Tile("fp32", 16, 16), (8,)), name="loop")
    g.bind(fb, x)


def bind_twice():
    g, x = g_vec()
    fb = g.feedback(StreamType(Tile("fp32", 16, 16), (4,)), name="loop")
    a, b = g.broadcast(x, name="fan")
    g.bind(fb, a)
    g.bind(fb, b)


def unknown_operator():
    Graph("bad").add("Softmax", "sm")


def unknown_port():
    g, x = g_vec()
    g.add("Bufferize", "kv_buf", {"in": x, "ref": g.index_source(values=[1], name="idx")}, rank=1)


def unknown_param():
    g, x = g_vec()
    g.add("Bufferize", "kv_buf", {"in": x}, rank=1, depth=3)


def missing_param():
    g, x = g_vec()
    g.add("Bufferize", "kv_buf", {"in": x})


def bad_param_type():
    g, x = g_mat()
    g.bufferize(x, "1", name="kv_buf")


def missing_input():
    g, x = g_vec()
    g.partition(x, None, 2, name="router")


def duplicate_node():
    g, x = g_vec()
    g.map(x, "silu", name="ld")


def duplicate_tensor():
    g, _ = g_vec()
    g.tensor("x", 32, 32, "fp32")


def unknown_dtype():
    Graph("bad").tensor("x", 64, 16, "fp64")


def negative_dim():
    Graph("bad").tensor("x", -4, 16, "fp32")


# --------------------------------------------------------------------------- JSON

def json_dangling():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["inputs"].update(in0="nope.out")))


def json_bad_port():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["inputs"].update(in0="src.bogus")))


def json_unknown_op():
    Graph.from_json(json_with(lambda o: node_entry(o, "m").update(op="Softmax")))


def json_unknown_dtype():
    obj = load_json()
    obj["tensors"]["x"]["dtype"] = "fp64"
    Graph.from_json(obj)


def json_feedback_dangling():
    Graph.from_json({"nodes": [{"op": "Feedback", "name": "loop", "inputs": {"in": "nope.out"},
                                "params": {"type": {"tile": "int32", "rows": "1", "cols": "1"}, "shape": ["4"]}}]})


def json_param_type():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["params"].update(n="1")))


def json_duplicate_node():
    Graph.from_json(json_with(lambda o: node_entry(o, "o").update(name="m")))


def json_missing_port():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["params"].update(n=2, fn="add")))


# --------------------------------------------------------------------------- run time

def runtime_zip():
    # Both sources have the same symbolic length L, so the graph is valid; the data disagree.
    g = Graph("bad")
    a = g.index_source(data="a", length="L", name="keys")
    b = g.index_source(data="b", length="L", name="vals")
    g.output(g.zip(a, b, name="pair_up"), name="o")
    run(g, streams={"a": [1, 2, 3], "b": [1, 2]})


def runtime_map():
    g = Graph("bad")
    a = g.index_source(data="a", length="L", name="keys")
    b = g.index_source(data="b", length="L", name="vals")
    g.output(g.map([a, b], "add", name="residual"), name="o")
    run(g, streams={"a": [1, 2, 3], "b": [1, 2]})


def _run_vec(tensors=None, streams=None, bindings=None):
    g, x = g_vec()
    g.output(g.map(x, "silu", name="act"), name="o")
    run(g, tensors=tensors, streams=streams, bindings=bindings)


def runtime_tensor_dtype():
    _run_vec(tensors={"x": np.zeros((64, 16), np.int8)})


def runtime_tensor_shape():
    _run_vec(tensors={"x": np.zeros((32, 16), np.float32)})


def runtime_tensor_undeclared():
    _run_vec(tensors={"x": np.zeros((64, 16), np.float32), "w": np.zeros((16, 16), np.float32)})


def runtime_symbolic_unbound():
    g = Graph("bad")
    g.tensor("x", 16, 16, "fp32")
    g.tensor("y", "R", 16, "fp32")
    g.store(g.load("x", tile=(16, 16), out_shape=[1], stride=[1], name="ld"), "y", tile=(16, 16), name="st")
    run(g, {"x": np.zeros((16, 16), np.float32)})


def runtime_input_tensor_missing():
    g = Graph("bad")
    g.tensor("x", 16, 16, "fp32")
    g.output(g.load("x", tile=(16, 16), out_shape=[1], stride=[1], name="ld"), name="o")
    run(g)


def runtime_negative_binding():
    g = Graph("bad")
    g.tensor("y", "R", 16, "fp32")
    g.store(g.source(StreamType(Tile("fp32", 16, 16), (1,)), values=[np.zeros((16, 16), np.float32)], name="s"),
            "y", tile=(16, 16), name="st")
    run(g, bindings={"R": -16})


def runtime_missing_data():
    g = Graph("bad")
    g.output(g.index_source(data="token_ids", name="ids"), name="o")
    run(g)


def runtime_selector_range():
    g = Graph("bad")
    g.output(g.selector_source(2, data="routes", name="route"), name="o")
    run(g, streams={"routes": [[0], [5]]})


def runtime_address_range():
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    addr = g.index_source(values=[0, 1, 7], name="addr")
    g.output(g.random_load(addr, "x", tile=(16, 16), name="gather_rows"), name="o")
    run(g, {"x": np.zeros((64, 16), np.float32)})


def runtime_reshape_dynamic():
    g = Graph("bad")
    a = g.index_source(data="a", length="L", name="ids")
    g.output(g.reshape(a, 0, 4, name="chunker"), name="o")
    run(g, streams={"a": [1, 2, 3, 4, 5]})


def runtime_reassemble_k():
    g = Graph("bad")
    a = g.index_source(values=[1, 2], name="ids")
    p0, p1 = g.partition(a, g.selector_source(2, values=[[0, 1], [0]], name="route"), 2, name="router")
    g.output(g.reassemble([p0, p1], g.selector_source(2, values=[[0, 1], [0]], name="gsel"), k=2,
                          name="gather"), name="o")
    run(g)


def runtime_partition_short_sel():
    g = Graph("bad")
    a = g.index_source(values=[1, 2], name="ids")
    (p0,) = g.partition(a, g.selector_source(1, values=[[0]], name="route"), 1, name="router")
    g.output(p0, name="o")
    run(g)


def deadlock_graph():
    """EagerMerge's selector fed back as Partition's selector, with no initial credit."""
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    x = g.load("x", tile=(16, 16), out_shape=[4], stride=[1], name="ld")
    credit = g.feedback(StreamType(Selector(1), ("K",)), name="credit")
    (p0,) = g.partition(x, credit, 1, name="route")
    out, sel = g.eager_merge([p0], name="merge")
    g.bind(credit, sel)
    g.output(out, name="o")
    return g


def runtime_deadlock():
    run(deadlock_graph(), {"x": np.zeros((64, 16), np.float32)})


def livelock_graph():
    """A token that goes round a feedback loop forever: merged back with itself, copied, mapped, bound."""
    g = Graph("loop")
    g.tensor("x", 4, 4, "int16")
    x = g.load("x", tile=(4, 4), out_shape=[1], stride=[1], name="lx")
    fb = g.feedback(StreamType(Tile("int16", 4, 4), ("n",)), name="fb")
    merged, sel = g.eager_merge([x, fb], rank=0, name="m")
    a, b = g.broadcast(merged, 2, name="b")
    g.bind(fb, g.map(a, "relu", name="f"))
    g.output(b, name="o")
    g.output(sel, name="s")
    return g


def runtime_livelock():
    run(livelock_graph(), {"x": np.zeros((4, 4), np.int16)}, max_idle_steps=20_000)


# --------------------------------------------------------------------------- library bugs (xfail)

def same_stream_two_ports():
    g, x = g_vec()
    g.map([x, x], "add", name="double")


def tile_one_entry():
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    g.load("x", tile=(16,), out_shape=[4], stride=[1], name="ld")


def tile_three_entries():
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    g.load("x", tile=(16, 16, 1), out_shape=[4], stride=[1], name="ld")


def stride_scalar():
    g = Graph("bad")
    g.tensor("x", 64, 16, "fp32")
    g.load("x", tile=(16, 16), out_shape=[4], stride=1, name="ld")


def selector_values_scalar():
    Graph("bad").selector_source(2, values=5, name="route")


def map_fn_not_a_function():
    g, x = g_vec()
    g.add("Map", "act", {"in0": x}, fn=5, n=1)


def feedback_type_not_element_type():
    Graph("bad").add("Feedback", "loop", {}, type="fp32", shape=[4])


def fn_object_with_params():
    g, x = g_vec()
    g.map(x, fn("silu"), name="act", frac=3)    # frac=3 is silently dropped


def unnamed_node_fn_error():
    g, x = g_vec()
    g.map(x, "gelu")                            # the node would be called 'map0'


def map_stream_as_string():
    g, _ = g_vec()
    g.map("ld.out", "silu", name="act")


def malformed_dimension():
    g, _ = g_vec()
    g.load("x", tile=(16, 16), out_shape=["N+"], stride=[1], name="ld2")


def json_text_invalid():
    Graph.from_json('{"nodes": [')


def json_no_nodes():
    Graph.from_json({"name": "bad", "tensors": {}})


def json_nodes_not_list():
    Graph.from_json({"nodes": {"src": {"op": "IndexSource"}}})


def json_tensor_no_dtype():
    obj = load_json()
    del obj["tensors"]["x"]["dtype"]
    Graph.from_json(obj)


def json_tensor_negative_rows():
    obj = load_json()
    obj["tensors"]["x"]["rows"] = "-64"
    Graph.from_json(obj)


def json_selector_type_bad():
    Graph.from_json({"nodes": [{"op": "Feedback", "name": "loop",
                                "params": {"type": {"selector": "two"}, "shape": ["4"]}}]})


def json_unknown_param():
    Graph.from_json(json_with(lambda o: node_entry(o, "src")["params"].update(depth=3)))


def json_unknown_fn():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["params"].update(fn="gelu")))


def json_label_without_port():
    Graph.from_json(json_with(lambda o: node_entry(o, "m")["inputs"].update(in0="src")))


def runtime_stream_data_scalar():
    g = Graph("bad")
    g.output(g.index_source(data="ids", name="ids"), name="o")
    run(g, streams={"ids": 5})


def runtime_stream_data_nested():
    g = Graph("bad")
    g.output(g.index_source(data="ids", name="ids"), name="o")
    run(g, streams={"ids": [[1, 2]]})


def runtime_selector_data_str():
    g = Graph("bad")
    g.output(g.selector_source(2, data="routes", name="route"), name="o")
    run(g, streams={"routes": [["x"]]})


def runtime_binding_not_int():
    _run_vec(tensors={"x": np.zeros((64, 16), np.float32)}, bindings={"B": "sixty-four"})


# --------------------------------------------------------------------------- the table

CASES = [
    # rank too high
    Case("accum-rank", accum_rank, StepShapeError,
         ("Accum 'down_proj'", "rank 2 > input rank 1", "input 'in' has shape [4, 4]; a stream's rank is its "
                                "number of dimensions less one: [N] is rank 0, [B, N] rank 1"), ("Accum", "down_proj")),
    Case("scan-rank", scan_rank, StepShapeError, ("Scan 'prefix'", "rank 1 > input rank 0", "input 'in'"),
         ("Scan", "prefix")),
    Case("bufferize-rank", bufferize_rank, StepShapeError, ("Bufferize 'kv_buf'", "rank 2 > input rank 1"),
         ("Bufferize", "kv_buf")),
    Case("partition-rank", partition_rank, StepShapeError, ("Partition 'router'", "rank 1 > input rank 0"),
         ("Partition", "router")),
    Case("reshape-rank", reshape_rank, StepShapeError, ("Reshape 'split'", "rank 2 > input rank 1"),
         ("Reshape", "split")),
    Case("flatten-rank", flatten_rank, StepShapeError, ("Flatten 'flat'", "hi <= input rank 1", "hi=2"),
         ("Flatten", "flat")),
    Case("expand-rank", expand_rank, StepShapeError, ("Expand 'bcast_rows'", "rank 1 > input rank 0"),
         ("Expand", "bcast_rows")),
    # shapes
    Case("map2-shape", map2_shape, StepShapeError,
         ("Map 'residual'", "input 'in0' has shape [4]", "input 'in1' has shape [8]", "must be equal"),
         ("Map", "residual")),
    Case("zip-shape", zip_shape, StepShapeError,
         ("Zip 'pair_up'", "input 'in0' has shape [4]", "input 'in1' has shape [8]"), ("Zip", "pair_up")),
    Case("reshape-nondivisible-rank0", reshape_nondiv_rank0, StepShapeError,
         ("Reshape 'chunker'", "chunk 2 does not divide dimension D0 = 5", "give pad="), ("Reshape", "chunker")),
    Case("reshape-nondivisible-rank1", reshape_nondiv_rank1, StepShapeError,
         ("Reshape 'chunker'", "chunk 2 does not divide dimension D1 = 5"), ("Reshape", "chunker"),
         absent=("give pad=",)),
    Case("reshape-pad-rank1", reshape_pad_rank1, StepShapeError,
         ("Reshape 'chunker'", "padding only applies at rank 0, got rank 1"), ("Reshape", "chunker")),
    Case("expand-inner-not-1", expand_inner_not_one, StepShapeError,
         ("Expand 'bcast_rows' port 'in'", "inner 1 dimension(s) of the input must be 1"), ("Expand", "bcast_rows")),
    Case("reassemble-input-rank", reassemble_rank, StepShapeError,
         ("Reassemble 'gather' port 'in0'", "input has rank 0, expected rank 1"), ("Reassemble", "gather")),
    Case("random-store-shape", random_store_shape, StepShapeError,
         ("RandomOffChipStore 'scatter'", "input 'addr' has shape [2]", "input 'data' has shape [4]"),
         ("RandomOffChipStore", "scatter")),
    Case("load-stride-length", stride_length, StepShapeError,
         ("LinearOffChipLoad 'ld2'", "stride has 2 entries but the output has 1 dimensions"),
         ("LinearOffChipLoad", "ld2")),
    # selectors and element types
    Case("partition-sel-type", partition_sel_type, StepTypeError,
         ("Partition 'router' port 'sel'", "expected a selector stream, got int32[1,1]"), ("Partition", "router")),
    Case("reassemble-sel-type", reassemble_sel_type, StepTypeError,
         ("Reassemble 'gather' port 'sel'", "expected a selector stream, got int32[1,1]"), ("Reassemble", "gather")),
    Case("partition-sel-width", partition_sel_width, StepTypeError,
         ("Partition 'router' port 'sel'", "selector chooses among 3, but there are 2 streams"),
         ("Partition", "router")),
    Case("reassemble-sel-width", reassemble_sel_width, StepTypeError,
         ("Reassemble 'gather' port 'sel'", "selector chooses among 3, but there are 2 streams"),
         ("Reassemble", "gather")),
    Case("random-load-addr-not-index", random_load_addr, StepTypeError,
         ("RandomOffChipLoad 'gather_rows' port 'addr'", "expected a stream of [1, 1] integer indices",
          "fp32[16,16]"), ("RandomOffChipLoad", "gather_rows")),
    Case("eager-merge-types", eager_merge_types, StepTypeError,
         ("EagerMerge 'merge' port 'in1'", "element type int32[1,1] differs from in0's fp32[16,16]"),
         ("EagerMerge", "merge")),
    Case("streamify-not-buffer", streamify_not_buffer, StepTypeError,
         ("Streamify 'reread' port 'in'", "expected a stream of buffer references"), ("Streamify", "reread")),
    # functions
    Case("unknown-function", unknown_fn, StepTypeError, ("Map 'act'", "unknown function 'gelu'", "silu"),
         ("Map", "act")),
    Case("function-arity", wrong_arity, StepTypeError,
         ("Map 'residual'", "function 'add' takes 2 operand(s)", "this Map has 1 input(s)"), ("Map", "residual")),
    Case("requantize-shift-range", requant_shift, StepTypeError,
         ("Map 'rq'", "requantize: shift must be an integer in 0..31, got 40"), ("Map", "rq")),
    Case("requantize-to-float", requant_float, StepTypeError,
         ("Map 'rq'", "requantize: dtype must be an integer type, got fp32"), ("Map", "rq")),
    Case("requantize-missing-param", fn_missing_param, StepTypeError,
         ("Map 'rq'", "function 'requantize' needs parameter(s) ['dtype']"), ("Map", "rq")),
    Case("silu-int32", silu_int32, StepTypeError,
         ("Map 'act'", "fixed-point silu takes int8 or int16, got int32"), ("Map", "act")),
    Case("exp-int32", exp_int32, StepTypeError,
         ("Map 'act'", "fixed-point exp takes int8 or int16, got int32 (requantize first)"), ("Map", "act")),
    Case("div-int-float", div_int_float, StepTypeError,
         ("Map 'norm'", "function div cannot combine int8 and fp32"), ("Map", "norm")),
    Case("div-broadcast", div_broadcast, StepTypeError,
         ("Map 'norm'", "function div: operand cols 16 and 8 differ", "may be 1 to broadcast"), ("Map", "norm")),
    Case("matmul-transpose-a-flag", matmul_transpose_a_flag, StepTypeError,
         ("Map 'outer'", "matmul: transpose_a must be true or false, got 'yes'"), ("Map", "outer")),
    Case("matmul-transpose-a-inner", matmul_transpose_a_inner, StepTypeError,
         ("Map 'grad_w'", "matmul(transpose_a=True, transpose_b=False)",
          "inner dimensions differ: fp32[16,16] x fp32[32,32]"), ("Map", "grad_w")),
    Case("col-sum-selector", col_sum_selector, StepTypeError,
         ("Map 'colsum'", "function col_sum needs a tile operand"), ("Map", "colsum")),
    Case("matmul-inner-dim", matmul_inner, StepTypeError,
         ("Map 'up_proj'", "matmul", "inner dimensions differ: fp32[16,16] x fp32[32,32]"), ("Map", "up_proj")),
    Case("accum-init-not-init", accum_init_not_init, StepTypeError,
         ("Accum 'acc'", "init 'add' is not an init function"), ("Accum", "acc")),
    Case("accum-state-dtype", accum_state_dtype, StepTypeError,
         ("Accum 'acc'", "cannot combine fp32 and int8"), ("Accum", "acc")),
    Case("flat-map-not-flat", flat_map_not_flat, StepTypeError,
         ("FlatMap 'rows'", "function 'silu' is not a flat-map function"), ("FlatMap", "rows")),
    # off-chip memory
    Case("unknown-tensor", unknown_tensor, StepTypeError,
         ("LinearOffChipLoad 'lw'", "unknown off-chip tensor 'weights'"), ("LinearOffChipLoad", "lw")),
    Case("tile-not-dividing", tile_not_dividing, StepShapeError,
         ("LinearOffChipLoad 'ld'", "tile rows 24 does not divide tensor 'x' rows 64"), ("LinearOffChipLoad", "ld")),
    Case("store-dtype", store_dtype, StepTypeError,
         ("LinearOffChipStore 'writeback' port 'in'", "stores fp32 tiles into int8 tensor 'y'"),
         ("LinearOffChipStore", "writeback")),
    # graph structure
    Case("consumed-twice", consumed_twice, StepGraphError,
         ("Map 'softmax_exp' port 'in0'", "stream ld.out is already consumed by Map 'act' port 'in0'",
          "broadcast()"), ("Map", "softmax_exp")),
    Case("stream-of-other-graph", other_graph_stream, StepGraphError,
         ("Map 'act' port 'in0'", "ld.out belongs to another graph"), ("Map", "act")),
    Case("dangling-feedback", dangling_feedback, StepGraphError,
         ("Feedback 'loop' port 'in'", "dangling input", "bind() it"), ("Feedback", "loop")),
    Case("output-no-consumer", no_consumer, StepGraphError,
         ("Map 'act' output 'out'", "has no consumer", "output()"), ("Map", "act")),
    Case("cycle-without-merge", bad_cycle, StepGraphError,
         ("cycle with no EagerMerge or Bufferize", "Feedback 'loop'", "Map 'running'", "Broadcast 'fan'"),
         ("Map", "running")),
    Case("feedback-bind-type", bind_type, StepShapeError,
         ("Feedback 'loop'", "declared [4] of int32[1,1]", "bound to ld.out of [4] of fp32[16,16]"),
         ("Feedback", "loop")),
    Case("feedback-bound-twice", bind_twice, StepGraphError, ("Feedback 'loop'", "is bound already"),
         ("Feedback", "loop")),
    Case("unknown-operator", unknown_operator, StepGraphError,
         ("unknown operator 'Softmax'", "known operators", "'sm'")),
    Case("unknown-input-port", unknown_port, StepGraphError,
         ("Bufferize 'kv_buf'", "unknown input port(s) ['ref']", "ports are ['in']"), ("Bufferize", "kv_buf")),
    Case("unknown-parameter", unknown_param, StepTypeError,
         ("Bufferize 'kv_buf'", "unknown parameter(s) ['depth']", "it takes ['rank']"), ("Bufferize", "kv_buf")),
    Case("missing-parameter", missing_param, StepTypeError, ("Bufferize 'kv_buf'", "missing parameter 'rank'"),
         ("Bufferize", "kv_buf")),
    Case("parameter-type", bad_param_type, StepTypeError,
         ("Bufferize 'kv_buf'", "parameter 'rank' must be an integer, got '1'"), ("Bufferize", "kv_buf")),
    Case("input-not-connected", missing_input, StepGraphError,
         ("Partition 'router' port 'sel'", "input is not connected"), ("Partition", "router")),
    Case("duplicate-node", duplicate_node, StepGraphError,
         ("Map 'ld'", "a node with this name exists already (LinearOffChipLoad)"), ("Map", "ld")),
    Case("duplicate-tensor", duplicate_tensor, StepGraphError, ("off-chip tensor 'x' is declared twice",)),
    Case("unknown-element-type", unknown_dtype, StepTypeError, ("unknown element type 'fp64'", "fp32")),
    Case("negative-dimension", negative_dim, StepTypeError, ("a dimension must be >= 0, got -4",)),
    # JSON
    Case("json-dangling-input", json_dangling, StepGraphError,
         ("Map 'm' port 'in0'", "dangling input 'nope.out'", "no node 'nope'"), ("Map", "m")),
    Case("json-unknown-output-port", json_bad_port, StepGraphError,
         ("IndexSource 'src'", "has no output 'bogus'", "outputs are ['out']"), ("IndexSource", "src")),
    Case("json-unknown-operator", json_unknown_op, StepGraphError, ("node 'm'", "unknown operator 'Softmax'")),
    Case("json-unknown-element-type", json_unknown_dtype, StepTypeError, ("unknown element type 'fp64'",)),
    Case("json-feedback-dangling", json_feedback_dangling, StepGraphError,
         ("Feedback 'loop' port 'in'", "dangling input nope.out"), ("Feedback", "loop")),
    Case("json-parameter-type", json_param_type, StepTypeError,
         ("Map 'm'", "parameter 'n' must be an integer, got '1'"), ("Map", "m")),
    Case("json-duplicate-node", json_duplicate_node, StepGraphError,
         ("Output 'm'", "a node with this name exists already (Map)"), ("Output", "m")),
    Case("json-port-not-connected", json_missing_port, StepGraphError,
         ("Map 'm' port 'in1'", "input is not connected"), ("Map", "m")),
    # run time
    Case("runtime-zip-shapes", runtime_zip, StepRuntimeError,
         ("Zip 'pair_up'", "input 'in0' has <3> where input 'in1' has D", "shapes differ at run time"),
         ("Zip", "pair_up")),
    Case("runtime-map-shapes", runtime_map, StepRuntimeError,
         ("Map 'residual'", "input 'in0' has <3> where input 'in1' has D", "shapes differ at run time"),
         ("Map", "residual")),
    Case("runtime-tensor-dtype", runtime_tensor_dtype, StepRuntimeError,
         ("off-chip tensor 'x'", "expected fp32", "got int8")),
    Case("runtime-tensor-shape", runtime_tensor_shape, StepRuntimeError,
         ("off-chip tensor 'x'", "declared rows 64, array has 32")),
    Case("runtime-tensor-undeclared", runtime_tensor_undeclared, StepRuntimeError,
         ("tensor 'w' given but not declared",)),
    Case("runtime-symbolic-size-unbound", runtime_symbolic_unbound, StepRuntimeError,
         ("off-chip tensor 'y' has symbolic shape [R, 16]", "bindings")),
    Case("runtime-input-tensor-missing", runtime_input_tensor_missing, InputError,
         ("graph 'bad' reads tensor(s) 'x' that no array is given for", "tensors={'x': ...}")),
    Case("runtime-negative-binding", runtime_negative_binding, InputError,
         ("binding 'R': expected an integer >= 0 (a dynamic size), got -16",)),
    Case("runtime-missing-source-data", runtime_missing_data, InputError,
         ("IndexSource 'ids'", "no data 'token_ids' for the source", "streams={'token_ids': ...}",
          "'stream.token_ids'"), ("IndexSource", "ids")),
    Case("runtime-selector-out-of-range", runtime_selector_range, StepRuntimeError,
         ("SelectorSource 'route'", "choice 5 of element 1 out of range for 2 outputs"), ("SelectorSource", "route")),
    Case("runtime-address-out-of-range", runtime_address_range, StepRuntimeError,
         ("RandomOffChipLoad 'gather_rows'", "tile index 7 outside tensor 'x'"), ("RandomOffChipLoad", "gather_rows")),
    Case("runtime-reshape-dynamic", runtime_reshape_dynamic, StepRuntimeError,
         ("Reshape 'chunker'", "chunk 4 does not divide", "not a multiple of 4"), ("Reshape", "chunker")),
    Case("runtime-reassemble-k", runtime_reassemble_k, StepRuntimeError,
         ("Reassemble 'gather' port 'sel'", "selector has 1 bits set, declared k=2"), ("Reassemble", "gather")),
    Case("runtime-partition-selector-short", runtime_partition_short_sel, StepRuntimeError,
         ("Partition 'router' port 'sel'", "selector stream ended while input chunks remain"),
         ("Partition", "router")),
    Case("runtime-livelock", runtime_livelock, StepRuntimeError,
         ("no progress in 20,0", "steps: only", "EagerMerge 'm'", "Broadcast 'b'", "Map 'f'", "Feedback 'fb'",
          "tokens going round a cycle without the program finishing (max_idle_steps 20,000"), ("EagerMerge", "m")),
    Case("runtime-deadlock", runtime_deadlock, StepDeadlockError,
         ("deadlock", "Partition 'route' waits on credit.out", "EagerMerge 'merge' waits on route.out0",
          "Feedback 'credit' waits on merge.sel", "ld.out (5 tokens)"), ("Partition", "route")),

    # ---- library problems: strict xfails (see the module docstring) ----
    Case("same-stream-on-two-ports", same_stream_two_ports, StepGraphError,
         ("Map 'double' port 'in1'", "already feeds port 'in0'", "broadcast()"), ("Map", "double")),
    Case("load-tile-one-entry", tile_one_entry, StepTypeError, ("LinearOffChipLoad 'ld'", "tile"),
         ("LinearOffChipLoad", "ld")),
    Case("load-tile-three-entries", tile_three_entries, StepTypeError, ("LinearOffChipLoad 'ld'", "tile"),
         ("LinearOffChipLoad", "ld")),
    Case("load-stride-scalar", stride_scalar, StepTypeError, ("LinearOffChipLoad 'ld'", "stride"),
         ("LinearOffChipLoad", "ld")),
    Case("selector-values-scalar", selector_values_scalar, StepTypeError, ("SelectorSource 'route'", "values"),
         ("SelectorSource", "route")),
    Case("map-fn-not-a-function", map_fn_not_a_function, StepTypeError, ("Map 'act'", "5"), ("Map", "act")),
    Case("feedback-type-not-element-type", feedback_type_not_element_type, StepTypeError,
         ("Feedback 'loop'", "type"), ("Feedback", "loop")),
    Case("fn-object-with-extra-params", fn_object_with_params, StepTypeError, ("Map 'act'", "frac"), ("Map", "act")),
    Case("unnamed-node-function-error", unnamed_node_fn_error, StepTypeError,
         ("Map 'map0'", "unknown function 'gelu'"), ("Map", "map0")),
    Case("map-stream-given-as-string", map_stream_as_string, StepGraphError,
         ("Map 'act'", "expected a stream", "'ld.out'"), ("Map", "act")),
    Case("bind-shape", bind_shape, StepShapeError,
         ("Feedback 'loop'", "declared [8] of fp32[16,16]", "bound to ld.out of [4]", "dimension 0 is 4, expected 8"),
         ("Feedback", "loop")),
    Case("malformed-dimension", malformed_dimension, StepTypeError,
         ("LinearOffChipLoad 'ld2'", "cannot parse dimension 'N+'", "expected an integer >= 0, a name"),
         ("LinearOffChipLoad", "ld2"), absent=("Sympify", "SyntaxError", "<string>")),
    Case("json-invalid-text", json_text_invalid, StepGraphError, ("JSON",)),
    Case("json-no-nodes", json_no_nodes, StepGraphError, ("nodes",)),
    Case("json-nodes-not-a-list", json_nodes_not_list, StepGraphError, ("nodes",)),
    Case("json-tensor-without-dtype", json_tensor_no_dtype, StepGraphError, ("tensor 'x'", "dtype")),
    Case("json-tensor-negative-rows", json_tensor_negative_rows, StepTypeError, ("'x'", "non-negative", "-64")),
    Case("json-selector-type-bad", json_selector_type_bad, StepTypeError, ("parameter 'type'", "selector"),
         ("Feedback", "loop")),
    Case("json-unknown-parameter", json_unknown_param, StepTypeError,
         ("IndexSource 'src'", "unknown parameter 'depth'"), ("IndexSource", "src")),
    Case("json-unknown-function", json_unknown_fn, StepTypeError, ("Map 'm'", "unknown function 'gelu'"),
         ("Map", "m")),
    Case("json-input-label-without-port", json_label_without_port, StepGraphError,
         ("Map 'm' port 'in0'", "'src'"), ("Map", "m"), absent=("no node ''",)),
    Case("runtime-stream-data-scalar", runtime_stream_data_scalar, StepRuntimeError, ("IndexSource 'ids'",),
         ("IndexSource", "ids")),
    Case("runtime-stream-data-nested", runtime_stream_data_nested, StepRuntimeError, ("IndexSource 'ids'",),
         ("IndexSource", "ids")),
    Case("runtime-selector-data-str", runtime_selector_data_str, StepRuntimeError, ("SelectorSource 'route'",),
         ("SelectorSource", "route")),
    Case("runtime-binding-not-int", runtime_binding_not_int, InputError,
         ("binding 'B': expected an integer >= 0 (a dynamic size), got 'sixty-four'",)),
]

GOOD = [c for c in CASES if c.bug is None]


def _param(c: Case):
    # Failures are reported with pytest.fail(pytrace=False): formatting full tracebacks
    # through the library for every xfail row would cost seconds.
    marks = pytest.mark.xfail(strict=True, reason=c.bug, raises=pytest.fail.Exception) if c.bug else ()
    return pytest.param(c, id=c.id, marks=marks)


def _raise(c: Case) -> StepError:
    """Run the row's builder; return the StepError it raised, or fail (briefly) saying what happened."""
    try:
        c.build()
    except StepError as exc:
        return exc
    except Exception as exc:  # a bare Python exception is a library problem
        if c.bug and c.bug_raises is not None and not isinstance(exc, c.bug_raises):
            # the library changed behaviour in a way the xfail reason does not describe
            raise RuntimeError(f"{c.id}: expected the documented {c.bug_raises}, got "
                               f"{type(exc).__name__}: {exc}") from exc
        pytest.fail(f"{c.id}: bare {type(exc).__name__} instead of {c.exc.__name__}: {exc}", pytrace=False)
    pytest.fail(f"{c.id}: malformed program accepted; expected {c.exc.__name__}", pytrace=False)


def _check(c: Case, exc: StepError) -> None:
    msg = str(exc)
    problems = []
    if type(exc) is not c.exc:
        problems.append(f"{type(exc).__name__} raised, expected exactly {c.exc.__name__}")
    problems += [f"{part!r} missing" for part in c.contains if part not in msg]
    problems += [f"{part!r} should not appear" for part in c.absent if part in msg]
    if c.node and f"{c.node[0]} '{c.node[1]}'" not in msg:
        problems.append(f"message does not name {c.node[0]} '{c.node[1]}'")
    if problems:
        pytest.fail(f"{c.id}: {'; '.join(problems)}. Message: {msg}", pytrace=False)


# --------------------------------------------------------------------------- tests

def test_table_is_well_formed():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(GOOD) >= 36
    builders = [c.build for c in CASES]
    assert len(builders) == len(set(builders)), "two rows share a builder"
    for c in CASES:
        assert c.exc in ERROR_CLASSES and c.contains


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_malformed_program_is_rejected(case: Case):
    _check(case, _raise(case))


# messages about several nodes at once: they name each node, but do not start with one
GRAPH_WIDE = {"cycle-without-merge", "runtime-deadlock", "runtime-livelock"}
# rows where no node is involved (off-chip tensor declarations and run() arguments), or the
# node's kind is what is wrong (unknown operator: the message names the node instead)
NO_NODE = {"duplicate-tensor", "unknown-element-type", "negative-dimension", "json-unknown-operator",
           "json-unknown-element-type", "runtime-tensor-dtype", "runtime-tensor-shape",
           "runtime-tensor-undeclared", "runtime-symbolic-size-unbound", "runtime-input-tensor-missing",
           "runtime-negative-binding",
           # whole-graph JSON problems and run-time bindings involve no single node
           "runtime-binding-not-int", "json-nodes-not-a-list", "json-invalid-text", "json-tensor-without-dtype",
           "json-no-nodes", "json-tensor-negative-rows",
           "unknown-operator"}  # names the node, but its kind is what is unknown


def test_every_message_names_the_node_involved():
    """Where a node is involved the message starts with ``Kind 'name'`` (or contains it, if graph-wide)."""
    assert {c.id for c in GOOD if c.node is None} == NO_NODE
    assert GRAPH_WIDE <= {c.id for c in GOOD}
    for c in GOOD:
        if c.node is None:
            continue
        msg = str(_raise(c))
        head = f"{c.node[0]} '{c.node[1]}'"
        if c.id in GRAPH_WIDE:
            assert head in msg, f"{c.id}: {msg}"
        else:
            assert msg.startswith(head), f"{c.id}: message should start with {head}: {msg}"


def test_error_classes_nonempty_messages_and_hierarchy():
    assert issubclass(StepError, ValueError)
    for cls in ERROR_CLASSES:
        assert issubclass(cls, StepError), cls
    assert issubclass(StepDeadlockError, StepRuntimeError)
    seen = set()
    for c in GOOD:
        try:
            c.build()
        except StepError as exc:
            assert isinstance(exc, ValueError)
            assert str(exc).strip(), f"{c.id}: {type(exc).__name__} raised with an empty message"
            assert exc.args and all(str(a).strip() for a in exc.args[:1]), c.id
            seen.add(type(exc))
        else:
            pytest.fail(f"{c.id}: no error raised")
    assert seen == set(ERROR_CLASSES), f"error classes never raised by the table: {set(ERROR_CLASSES) - seen}"


def test_deadlock_names_blocked_channels():
    with pytest.raises(StepDeadlockError) as info:
        run(deadlock_graph(), {"x": np.zeros((64, 16), np.float32)})
    exc = info.value
    blocked = " | ".join(exc.blocked)
    for channel in ("credit.out", "route.out0", "merge.sel", "merge.out"):
        assert channel in blocked and channel in str(exc), channel
    assert exc.pending == {"ld.out": 5}


def test_fixtures_are_valid_programs():
    """The graphs the rows start from are valid, so each row fails only for the reason it states."""
    g, x = g_vec()
    g.output(g.map(x, "silu", name="act"), name="o")
    run(g.validate(), tensors={"x": np.ones((64, 16), np.float32)})
    g, x = g_mat()
    g.output(g.accum(x, "add", ZEROS16, rank=1, name="down_proj"), name="o")
    g.validate()
    Graph.from_json(good_json()).validate()
    Graph.from_json(load_json()).validate()
    g = Graph("ok")
    a = g.index_source(data="a", length="L", name="keys")
    b = g.index_source(data="b", length="L", name="vals")
    g.output(g.zip(a, b, name="pair_up"), name="o")
    run(g, streams={"a": [1, 2], "b": [3, 4]})


def test_json_accepts_plain_numbers_for_sizes():
    """Hand-written JSON may give sizes as numbers instead of strings."""
    obj = load_json()
    obj["tensors"]["x"]["rows"] = 64
    node_entry(obj, "ld")["params"]["tile"] = [16, 16]
    g = Graph.from_json(obj)
    assert g.tensors["x"].rows == 64 and g.nodes["ld"].params["tile"] == (16, 16)
