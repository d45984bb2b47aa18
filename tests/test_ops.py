"""Token-level semantics of every operator (spec section 2), on hand-checked examples.

Each case runs one operator through the reference interpreter
(:func:`step_hdl.interp.run_operator`) and compares its output tokens with the
sequence derived by hand from the spec, including empty and ragged dimensions
and several stop levels.
"""

import numpy as np
import pytest
import sympy

from step_hdl import Selector, dyn, fn
from step_hdl.interp import run_operator
from step_hdl.types import Ragged

from helpers import ints, sels, text, tiles, toks

N = dyn("N")
L = Ragged("L", integer=True, nonnegative=True)


def out(kind, inputs, port="out", **params):
    res = run_operator(kind, {p: (t, toks(v, sel=isinstance(t.dtype, Selector))) for p, (t, v) in inputs.items()},
                       **params)
    return text(res[port]), res


CASES = [
    # (id, kind, inputs {port: (type, tokens)}, params, {out port: expected tokens})
    ("flatten-inner", "Flatten", {"in": (ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D")},
     dict(lo=0, hi=1), {"out": "1 2 3 4 5 6 S1 7 8 9 1 2 3 S1 D"}),
    ("flatten-outer", "Flatten", {"in": (ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D")},
     dict(lo=1, hi=2), {"out": "1 2 3 S1 4 5 6 S1 7 8 9 S1 1 2 3 S1 D"}),
    ("flatten-ragged", "Flatten", {"in": (ints(2, L), "1 2 S1 S1 D")}, dict(lo=0, hi=1), {"out": "1 2 D"}),
    ("reshape-pad", "Reshape", {"in": (ints(2, 3), "1 2 3 S1 4 S1 D")}, dict(rank=0, chunk=2, pad=0),
     {"out": "1 2 S1 3 0 S2 4 0 S2 D", "pad": "0 0 S1 0 1 S2 0 1 S2 D"}),
    ("reshape-rank0-exact", "Reshape", {"in": (ints(4), "1 2 3 4 D")}, dict(rank=0, chunk=2),
     {"out": "1 2 S1 3 4 S1 D"}),
    ("reshape-rank1", "Reshape", {"in": (ints(4, 1), "1 S1 2 S1 3 S1 4 S1 D")}, dict(rank=1, chunk=2),
     {"out": "1 S1 2 S2 3 S1 4 S2 D"}),
    ("reshape-empty-run", "Reshape", {"in": (ints(2, L), "S1 1 S1 D")}, dict(rank=0, chunk=2, pad=9),
     {"out": "S2 1 9 S2 D"}),
    ("promote-rank0", "Promote", {"in": (ints(3), "1 2 3 D")}, {}, {"out": "1 2 3 S1 D"}),
    ("promote-rank1", "Promote", {"in": (ints(2, 1), "1 S1 2 S1 D")}, {}, {"out": "1 S1 2 S2 D"}),
    ("promote-empty", "Promote", {"in": (ints(N), "D")}, {}, {"out": "D"}),
    ("repeat", "RepeatStatic", {"in": (ints(2, L), "1 2 S1 3 S1 D")}, dict(count=2),
     {"out": "1 1 S1 2 2 S2 3 3 S2 D"}),
    ("expand", "Expand", {"in": (ints(2, 1), "1 S1 2 S1 D"), "ref": (ints(2, L), "0 0 0 S1 0 S1 D")},
     dict(rank=1), {"out": "1 1 1 S1 2 S1 D"}),
    ("expand-empty-chunk", "Expand", {"in": (ints(2, 1), "1 S1 2 S1 D"), "ref": (ints(2, L), "S1 0 S1 D")},
     dict(rank=1), {"out": "S1 2 S1 D"}),
    ("zip", "Zip", {"in0": (ints(2, L), "1 S1 2 3 S1 D"), "in1": (ints(2, L), "4 S1 5 6 S1 D")}, {},
     {"out": "(1,4) S1 (2,5) (3,6) S1 D"}),
    ("map-add", "Map", {"in0": (ints(2, L), "1 S1 2 3 S1 D"), "in1": (ints(2, L), "4 S1 5 6 S1 D")},
     dict(fn=fn("add"), n=2), {"out": "5 S1 7 9 S1 D"}),
    ("map-affine", "Map", {"in0": (ints(3), "1 2 3 D")}, dict(fn=fn("affine", scale=3, offset=1), n=1),
     {"out": "4 7 10 D"}),
    ("accum-rank1", "Accum", {"in": (ints(2, 2, L), "1 2 S1 3 S2 S1 4 S2 D")},
     dict(update=fn("add"), init=fn("zeros", rows=1, cols=1, dtype="int32"), rank=1),
     {"out": "3 3 S1 0 4 S1 D"}),
    ("accum-rank2", "Accum", {"in": (ints(2, 2, L), "1 2 S1 3 S2 S1 4 S2 D")},
     dict(update=fn("add"), init=fn("zeros", rows=1, cols=1, dtype="int32"), rank=2), {"out": "6 4 D"}),
    ("scan", "Scan", {"in": (ints(2, L), "1 2 S1 3 S1 D")},
     dict(update=fn("add"), init=fn("zeros", rows=1, cols=1, dtype="int32"), rank=1),
     {"out": "1 3 S1 3 S1 D"}),
    ("flatmap-range", "FlatMap", {"in": (tiles(1, 2, 2), "D")}, dict(fn=fn("range")), {"out": "D"}),
    ("partition-multihot", "Partition",
     {"in": (ints(3, 2), "1 2 S1 3 4 S1 5 6 S1 D"), "sel": (sels(3, 3), "0b011 0b000 0b110 D")},
     dict(n=3, rank=1), {"out0": "1 2 S1 D", "out1": "1 2 S1 5 6 S1 D", "out2": "5 6 S1 D"}),
    ("partition-rank0-skips-stops", "Partition",
     {"in": (ints(2, 2), "1 2 S1 3 4 S1 D"), "sel": (sels(2, 4), "1 2 2 1 D")},
     dict(n=2, rank=0), {"out0": "1 4 D", "out1": "2 3 D"}),
    ("reassemble", "Reassemble",
     {"in0": (ints(N), "1 2 D"), "in1": (ints(N), "3 D"), "sel": (sels(2, 3), "0b11 0b01 0b00 D")},
     dict(n=2, rank=0), {"out": "1 3 S1 2 S1 S1 D"}),
    ("reassemble-rank1", "Reassemble",
     {"in0": (ints(N, 2), "1 2 S1 D"), "in1": (ints(N, 2), "3 4 S1 D"), "sel": (sels(2, 1), "0b11 D")},
     dict(n=2, rank=1), {"out": "1 2 S1 3 4 S2 D"}),
    ("broadcast", "Broadcast", {"in": (ints(2, L), "1 S1 S1 D")}, dict(n=2),
     {"out0": "1 S1 S1 D", "out1": "1 S1 S1 D"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_operator_tokens(case):
    _, kind, inputs, params, want = case
    res = run_operator(kind, {p: (t, toks(v, sel=isinstance(t.dtype, Selector))) for p, (t, v) in inputs.items()},
                       **params)
    for port, expected in want.items():
        assert text(res[port]) == expected, port


def test_flatmap_range_ragged():
    st = tiles(1, 2, 3)
    res = run_operator("FlatMap", {"in": (st, [[np.array([[5, 2]], np.int32), np.array([[0, 0]], np.int32),
                                               np.array([[7, 1]], np.int32)]][0])}, fn=fn("range"))
    assert text(res["out"]) == "5 6 S1 S1 7 S1 D"


def test_flatmap_retile_streamify_rank1_input():
    st = tiles(2, 2, 2, 1)
    t0, t1 = np.arange(4, dtype=np.int32).reshape(2, 2), np.arange(4, 8, dtype=np.int32).reshape(2, 2)
    res = run_operator("FlatMap", {"in": (st, [[t0], [t1]])}, fn=fn("retile_streamify"))
    got = res["out"]
    assert [t.stop for t in got if not t.is_data] == [2, 2, 0]
    assert [t.payload.tolist() for t in got if t.is_data] == [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]]


def test_bufferize_streamify_reuse():
    st = ints(2, 3)
    from step_hdl import Graph
    g = Graph("reuse")
    src = g.source(st, data="x")
    buf = g.bufferize(src, 1)
    g.output(g.streamify(buf, repeat=2), name="o")
    from step_hdl import run
    res = run(g, streams={"x": toks("1 2 3 S1 4 5 6 S1 D")})
    assert text(res.outputs["o"]) == "1 2 3 S1 1 2 3 S2 4 5 6 S1 4 5 6 S2 D"


def test_streamify_ref_and_affine_read():
    from step_hdl import Graph, run
    g = Graph("ref")
    buf = g.bufferize(g.source(ints(1, 4), data="x"), 1)
    ref = g.source(ints(1, L), data="r")
    g.output(g.streamify(buf, ref=ref, read_shape=[2], read_stride=[2]), name="o")
    res = run(g, streams={"x": toks("1 2 3 4 S1 D"), "r": toks("0 0 0 S1 D")})
    assert text(res.outputs["o"]) == "1 3 S1 1 3 S1 1 3 S2 D"


def test_streamify_transpose_reads_each_buffer_at_its_own_size():
    from step_hdl import Graph, run
    g = Graph("transpose")
    R, C = Ragged("R", integer=True, nonnegative=True), Ragged("C", integer=True, nonnegative=True)
    out_ = g.streamify(g.bufferize(g.source(ints(N, R, C), data="x"), 2), transpose=True)
    assert out_.type.shape == (N, C, R)
    g.output(out_, name="o")
    res = run(g, streams={"x": toks("1 2 3 S1 4 5 6 S2 7 S1 8 S2 D")})
    assert text(res.outputs["o"]) == "1 4 S1 2 5 S1 3 6 S2 7 8 S2 D"


def test_reshape_partial_keeps_a_short_last_chunk():
    assert text(run_operator("Reshape", {"in": (ints(2, L, 1), toks("1 S1 2 S1 3 S2 4 S2 D"))}, rank=1, chunk=2,
                             partial=True)["out"]) == "1 S1 2 S2 3 S3 4 S3 D"
    # the stream's end closes the outermost run: its short chunk still ends with the chunk's stop
    assert text(run_operator("Reshape", {"in": (ints(3, 1), toks("1 S1 2 S1 3 S1 D"))}, rank=1, chunk=2,
                             partial=True)["out"]) == "1 S1 2 S2 3 S2 D"


@pytest.mark.parametrize("kind, inputs, params, match", [
    ("Reshape", {"in": ints(3, 1)}, dict(rank=0, chunk=2, pad=0, partial=True),
     r"give either pad \(fill the last chunk\) or partial \(keep it short\), not both"),
    ("Streamify", "rank1", dict(transpose=True), r"transpose reads rank-2 buffers, got buffers of shape \[4\]"),
    ("Streamify", "rank2", dict(transpose=True, read_shape=[2], read_stride=[1]),
     r"give either read_shape or transpose, not both"),
])
def test_partial_and_transpose_errors(kind, inputs, params, match):
    from step_hdl import Graph, StepError
    g = Graph("bad")
    with pytest.raises(StepError, match=match):
        if kind == "Reshape":
            g.reshape(g.source(inputs["in"], data="x"), params.pop("rank"), params.pop("chunk"), **params)
        else:
            buf = g.bufferize(g.source(ints(2, 4) if inputs == "rank1" else ints(2, 3, 4), data="x"),
                              1 if inputs == "rank1" else 2)
            g.streamify(buf, **params)


def test_streamify_transpose_of_ragged_rows_is_an_error():
    from step_hdl import Graph, StepError, run
    g = Graph("ragged")
    R, C = Ragged("R", integer=True, nonnegative=True), Ragged("C", integer=True, nonnegative=True)
    g.output(g.streamify(g.bufferize(g.source(ints(N, R, C), data="x"), 2), transpose=True), name="o")
    with pytest.raises(StepError, match=r"transpose of a buffer whose rows differ in length \(\[2, 1\]\)"):
        run(g, streams={"x": toks("1 2 S1 3 S2 D")})


def test_eager_merge_whole_chunks_and_selector():
    res = run_operator("EagerMerge", {"in0": (ints(N, 2), toks("1 2 S1 3 4 S1 D")),
                                      "in1": (ints(N, 2), toks("5 6 S1 D"))}, n=2, rank=1)
    body = text(res["out"])
    sel = text(res["sel"])
    chunks = [c.strip() for c in body.replace("D", "").split("S1") if c.strip()]
    assert sorted(chunks) == ["1 2", "3 4", "5 6"]       # never interleaved
    order = {"1 2": 1, "3 4": 1, "5 6": 2}
    assert sel.split()[:-1] == [str(order[c]) for c in chunks]
    assert chunks.index("1 2") < chunks.index("3 4")       # per-input order kept


def test_eager_merge_seeded_orders_differ_but_agree_on_content():
    inputs = {f"in{k}": (ints(N), toks(" ".join(str(10 * k + j) for j in range(6)) + " D")) for k in range(3)}
    seen = set()
    for seed in (None, 1, 2, 3, 4):
        res = run_operator("EagerMerge", inputs, seed=seed, n=3, rank=0)
        vals = text(res["out"]).split()[:-1]
        assert sorted(vals, key=int) == sorted((str(10 * k + j) for k in range(3) for j in range(6)), key=int)
        seen.add(tuple(vals))
    assert len(seen) > 1
    a = run_operator("EagerMerge", inputs, seed=7, n=3, rank=0)
    b = run_operator("EagerMerge", inputs, seed=7, n=3, rank=0)
    assert text(a["out"]) == text(b["out"])                 # seeded runs repeat


def test_offchip_linear_load_affine_and_store():
    mem = {"t": np.arange(16, dtype=np.int32).reshape(4, 4)}
    decl = {"t": (4, 4, "int32")}
    # 2x2 tiles: grid 2x2; out [2, 2] with stride (0, 1) rereads row 0 of the grid twice
    res = run_operator("LinearOffChipLoad", {}, tensors=mem, declare=decl, tensor="t", tile=[2, 2],
                       out_shape=[2, 2], stride=[0, 1])
    tiles_ = [t.payload for t in res["out"] if t.is_data]
    assert [x[0, 0] for x in tiles_] == [0, 2, 0, 2]
    assert [t.stop for t in res["out"] if not t.is_data] == [1, 1, 0]
    decl["o"] = (4, 4, "int32")
    st = tiles(2, 2, 4)
    data_ = [np.full((2, 2), v, np.int32) for v in range(4)]
    res = run_operator("LinearOffChipStore", {"in": (st, data_)}, declare=decl, tensors=mem, tensor="o",
                       tile=[2, 2])
    assert res["_memory"]["o"].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]


def test_offchip_random_load_store():
    mem = {"t": np.arange(8, dtype=np.int32).reshape(8, 1)}
    decl = {"t": (8, 1, "int32"), "o": (8, 1, "int32")}
    res = run_operator("RandomOffChipLoad", {"addr": (ints(2, L), toks("3 S1 0 7 S1 D"))}, tensors=mem,
                       declare=decl, tensor="t", tile=[1, 1], base=0)
    assert text(res["out"]) == "3 S1 0 7 S1 D"
    res = run_operator("RandomOffChipStore", {"addr": (ints(2), toks("5 1 D")), "data": (ints(2), toks("9 8 D"))},
                       tensors=mem, declare=decl, tensor="o", tile=[1, 1])
    assert text(res["out"]) == "5 1 D"
    assert res["_memory"]["o"][:, 0].tolist() == [0, 8, 0, 0, 0, 9, 0, 0]


def test_selector_and_index_sources():
    from step_hdl import Graph, run
    g = Graph("src")
    g.output(g.selector_source(4, data="r"), name="s")
    g.output(g.index_source(values=[3, 1]), name="i")
    res = run(g, streams={"r": np.array([[0, 2], [3, -1]])})
    assert text(res.outputs["s"]) == "5 8 D"
    assert text(res.outputs["i"]) == "3 1 D"


def test_shapes_inferred_symbolically():
    from step_hdl import Graph
    g = Graph("shapes")
    x = g.source(ints(N, 6), data="x")
    r = g.reshape(x, 0, 4, pad=0)[0]
    assert r.type.shape == (N, sympy.Integer(2), sympy.Integer(4))
    p = g.partition(g.source(ints(N), data="y"), g.source(sels(3, N), data="s"), 3)
    assert str(p[1].type.shape[0]) == "partition0_n1"
    f = g.flatten(r, 0, 2)
    assert sympy.simplify(f.type.shape[0] - 8 * N) == 0
    m = g.flat_map(g.source(tiles(1, 2, N), data="m"), "range")
    assert isinstance(m.type.shape[-1], Ragged)
    acc = g.accum(m, "add", fn("zeros", rows=1, cols=1, dtype="int32"), 1)
    assert acc.type.shape == (N,)


def test_no_module_keeps_a_list_of_operator_kinds():
    """What the interpreter, the mapper and the model ask of an operator (does it touch memory, route, buffer,
    compute; which unit runs it) is a trait of its class in ``step_hdl.ops``, not a list of kind names each
    module keeps (the model's list of stores once meant every store, the mapper's the linear ones)."""
    import ast
    from step_hdl import sources
    from step_hdl.ops import OPS
    found = []
    for m in sources.package_modules():
        if m.startswith("step_hdl.ops"):
            continue
        path = sources.source_file(m)
        tree = ast.parse(path.read_text())
        exported = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in exported:
                kinds = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in OPS]
                if len(kinds) >= 2:
                    found.append(f"{m}:{node.lineno}: {kinds}")
    assert found == []
