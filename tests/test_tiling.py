"""Hierarchical tiling: the lowered graph computes what the logical graph computes."""

import itertools

import numpy as np
import pytest
import sympy

from step_hdl import Graph, fn, run
from step_hdl.mapper.tiling import TilingError, counted_streams, tile_physical
from step_hdl.metrics import metrics
from step_hdl.workloads import swiglu

SWEEP = list(itertools.product([16, 32, 64], [16, 32, 64, 128, 256]))


@pytest.mark.parametrize("tile_b, tile_inter", SWEEP)
def test_swiglu_paper_sweep_at_16x16(tile_b, tile_inter):
    w = swiglu(64, 256, 512, tile_b, tile_inter, "int16", seed=tile_b * tile_inter)
    lowered = tile_physical(w.graph, 16)
    res = run(lowered, w.tensors)
    assert np.array_equal(res.memory["y"], w.expected["y"])
    # the same tiles cross the chip boundary, in smaller pieces
    assert res.offchip_bytes == w.run().offchip_bytes
    assert sympy.simplify(metrics(lowered).offchip_bytes - metrics(w.graph).offchip_bytes) == 0
    assert all(t.payload.shape == (16, 16) for t in res.edges["down_proj_tiles.out"] if t.is_data)


@pytest.mark.parametrize("dt", ["int8", "fp32"])
def test_swiglu_small_at_4x4(dt):
    w = swiglu(32, 64, 128, 16, 32, dt)
    res = run(tile_physical(w.graph, 4), w.tensors)
    assert w.mismatches(res) == {}


def test_unsupported_operator_is_named():
    g = Graph("t")
    g.tensor("x", 8, 8, "int16")
    x = g.load("x", tile=(8, 8), out_shape=[1, 1], stride=[1, 1])
    g.output(g.scan(x, "add", fn("zeros", rows=8, cols=8, dtype="int32"), name="sc"))
    with pytest.raises(TilingError, match=r"Scan 'sc': a scan of int16\[8,8\] tiles \(2x2 physical 4x4 tiles each\) "
                                          r"is not supported yet; scans of one physical tile are"):
        tile_physical(g, 4)
    g = Graph("t")
    g.tensor("x", 8, 8, "int16")
    x = g.load("x", tile=(4, 4), out_shape=[2, 2], stride=[2, 1])
    g.output(g.scan(x, "sub", fn("zeros", rows=4, cols=4, dtype="int32"), name="sc"))
    with pytest.raises(TilingError, match="Scan 'sc': only add/max scans from zeros/lowest are supported"):
        tile_physical(g, 4)


#: logical tiles on 4x4 physical tiles: blocks of P x P tiles (one or several along each side), row tiles
#: (6 or 1 rows: not a multiple of 4), narrow and wide
REDUCE_TILES = [(4, 4), (8, 4), (4, 8), (8, 8), (8, 16), (12, 8), (6, 8), (6, 4), (1, 8), (1, 4)]


def reduce_graph(rows, cols, f, dt):
    """Two ``[rows, cols]`` tiles of ``x`` (one above the other) reduced by ``f`` (or, for ``sub_row_max``,
    ``x`` minus its row maxima) and stored."""
    g = Graph(f"{f}_{rows}x{cols}")
    g.tensor("x", 2 * rows, cols, dt)
    x = g.load("x", tile=(rows, cols), out_shape=[2, 1], stride=[1, 0], name="load_x")
    if f == "sub_row_max":
        a, b = g.broadcast(x, 2, name="split")
        y = g.map([a, g.map(b, "row_max", name="m")], "sub", name="y")
    else:
        y = g.map(x, f, name="y")
    t = y.type.dtype
    yr, yc = (int(t.rows), int(t.cols))
    g.tensor("y", 2 * yr, yc, t.dtype.name)
    g.store(y, "y", tile=(yr, yc), name="store_y")
    return g


@pytest.mark.parametrize("rows, cols", REDUCE_TILES)
@pytest.mark.parametrize("f", ["row_max", "row_sum", "col_max", "col_sum", "sub_row_max"])
def test_reductions_lower_on_every_tile_shape(rows, cols, f):
    """row_max/row_sum combine a block row's per-tile results with an Accum; col_max/col_sum accumulate
    down the block keeping its column positions; x - row_max(x) repeats each column piece along its block
    row. Same values and types as the logical graph (int16 inputs spanning the whole range)."""
    g = reduce_graph(rows, cols, f, "int16")
    x = np.random.default_rng(rows * 100 + cols).integers(-32768, 32767, (2 * rows, cols)).astype(np.int16)
    want = run(g, {"x": x}).memory["y"]
    got = run(tile_physical(g, 4), {"x": x}).memory["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


def broadcast_graph(rows, cols, small, f, dt):
    """Two ``[rows, cols]`` tiles of ``x`` combined by ``f`` with a ``small`` tile of ``c`` (``[1, 1]`` or
    ``[1, cols]``: a scale or a norm's gamma) loaded once per tile from its own tensor."""
    g = Graph(f"bcast_{rows}x{cols}_{small[0]}x{small[1]}")
    g.tensor("x", 2 * rows, cols, dt)
    g.tensor("c", *small, dt)
    x = g.load("x", tile=(rows, cols), out_shape=[2, 1], stride=[1, 0], name="load_x")
    c = g.load("c", tile=small, out_shape=[2, 1], stride=[0, 0], name="load_c")
    y = g.map([x, c], f, name="y")
    t = y.type.dtype
    g.tensor("y", 2 * rows, cols, t.dtype.name)
    g.store(y, "y", tile=(rows, cols), name="store_y")
    return g


@pytest.mark.parametrize("rows, cols", REDUCE_TILES)
@pytest.mark.parametrize("small", ["scalar", "row"])
@pytest.mark.parametrize("f, dt", [("mul", "int16"), ("add", "bf16")])
def test_small_operands_broadcast_over_every_tile_shape(rows, cols, small, f, dt):
    """A ``[1, 1]`` scalar or a ``[1, C]`` row combined with ``[R, C]`` tiles of any block (row tiles, P x P
    blocks, one or several along each side): the same values as the logical graph."""
    from step_hdl import floats
    g = broadcast_graph(rows, cols, (1, 1) if small == "scalar" else (1, cols), f, dt)
    rng = np.random.default_rng(rows * 100 + cols)
    data = {n: rng.integers(-300, 300, (2 * rows if n == "x" else 1, cols if n == "x" or small == "row" else 1))
            for n in "xc"}
    data = {n: (v.astype(np.int16) if dt == "int16" else floats.round_to(v / 7, floats.BF16).astype(np.float32))
            for n, v in data.items()}
    want = run(g, data).memory["y"]
    got = run(tile_physical(g, 4), data).memory["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("a, b", [((8, 16), (16, 1)), ((6, 16), (16, 1)), ((8, 1), (1, 8)), ((1, 8), (8, 1)),
                                  ((4, 4), (4, 1))])
@pytest.mark.parametrize("dt", ["int16", "bf16"])
def test_matmul_operands_with_a_side_of_one_lower(a, b, dt):
    """A matrix-vector product (``[C, 1]`` second operand), on blocks or row tiles, and the outer product of a
    column and a row: the same values as the logical graph."""
    from step_hdl import floats
    g = Graph("mv")
    g.tensor("a", 2 * a[0], a[1], dt)
    g.tensor("b", *b, dt)
    x = g.load("a", tile=a, out_shape=[2], stride=[1], name="load_a")
    v = g.load("b", tile=b, out_shape=[2], stride=[0], name="load_b")
    y = g.map([x, v], "matmul", name="mm")
    g.tensor("y", 2 * a[0], b[1], y.type.dtype.dtype.name)
    g.store(y, "y", tile=(a[0], b[1]), name="store_y")
    rng = np.random.default_rng(a[0] + b[1])
    data = {"a": rng.integers(-100, 100, (2 * a[0], a[1])), "b": rng.integers(-100, 100, b)}
    data = {n: (v.astype(np.int16) if dt == "int16" else floats.round_to(v / 7, floats.BF16).astype(np.float32))
            for n, v in data.items()}
    want = run(g, data).memory["y"]
    got = run(tile_physical(g, 4), data).memory["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("tile", [(4, 4), (8, 8), (6, 8), (1, 8)])
@pytest.mark.parametrize("rank", [1, 2])
def test_expand_of_tiles_lowers(tile, rank):
    """Expand repeats each logical tile (its block of physical tiles) over the ref's inner dims."""
    r, c = tile
    g = Graph("expand")
    g.tensor("x", 2 * r, c, "int16")
    g.tensor("z", 12 * r, c, "int16")
    g.tensor("y", 12 * r, c, "int32")
    shape = [2, 1, 1] if rank == 2 else [2, 1]
    x = g.load("x", tile=tile, out_shape=shape, stride=[1] + [0] * (len(shape) - 1), name="load_x")
    zshape, zstride = ([2, 2, 3], [6, 3, 1]) if rank == 2 else ([2, 6], [6, 1])
    z = g.load("z", tile=tile, out_shape=zshape, stride=zstride, name="load_z")
    z1, z2 = g.broadcast(z, 2, name="split_z")
    y = g.map([g.expand(x, z1, rank=rank, name="ex"), z2], "add", name="y")
    g.store(y, "y", tile=tile, name="store_y")
    rng = np.random.default_rng(r * c + rank)
    data = {"x": rng.integers(-300, 300, (2 * r, c)).astype(np.int16),
            "z": rng.integers(-300, 300, (12 * r, c)).astype(np.int16)}
    want = run(g, data).memory["y"]
    got = run(tile_physical(g, 4), data).memory["y"]
    each_six_times = np.repeat(data["x"].reshape(2, r, c), 6, axis=0).reshape(12 * r, c)
    assert np.array_equal(got, want) and np.array_equal(want, each_six_times + data["z"])


def test_partial_physical_tiles_are_reported():
    w = swiglu(32, 64, 128, 16, 32, "int16")
    with pytest.raises(TilingError, match=r"logical tile \[16, 64\] is not a multiple of the physical tile 3x3"):
        tile_physical(w.graph, 3)


def _blocks(n, cb):
    """The packed physical tiles of ``n`` rows of ``cb`` column tiles: each block of 4 rows (the last one
    ``n mod 4``) as ``cb`` tiles."""
    return [(min(4, n - r), 4) for r in range(0, n, 4) for _ in range(cb)]


def test_moe_dynamic_tiling_lowers_to_blocks_of_p_rows(routing):
    """Dynamic token tiles [N_e, H] become ceil(N_e / P) blocks of P rows, the last one partial (each physical
    tile with its valid rows), and the matmuls work on those blocks; same result, same bytes."""
    from step_hdl.workloads.moe import moe
    w = moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic")
    assert "e0_pack.out" in counted_streams(w.graph, 4)
    lowered = tile_physical(w.graph, 4)
    res = run(lowered, w.tensors, w.streams)
    assert w.mismatches(res) == {}
    assert res.offchip_bytes == w.run().offchip_bytes
    n0 = int(w.subs["route_n0"])
    assert n0 % 4, "the trace's expert 0 should leave a partial block"
    shape = lambda edge: [t.payload.shape for t in res.edges[edge] if t.is_data]   # noqa: E731
    assert shape("e0_pack.out") == _blocks(n0, 4)                     # H = 16: 4 column tiles a block
    # per block row and intermediate tile (2 of 16 columns): 4 x 4 products of the block's rows
    products = shape("e0_gate_proj_tiles.out")
    assert sorted(set(products)) == [(n0 % 4, 4), (4, 4)] and len(products) == -(-n0 // 4) * 2 * 4 * 4
    assert shape("e0_unpack.out") == [(1, 4)] * (n0 * 4)


def _moe_static_lowered(routing, tile):
    """The reduced MoE layer with static token tiles of ``tile`` rows, lowered to 4x4 and run: same result
    and bytes as the logical graph; the lowered run and expert 0's routed rows."""
    from step_hdl.workloads.moe import moe
    w = moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static",
            tile=tile)
    res = run(tile_physical(w.graph, 4), w.tensors, w.streams)
    assert w.mismatches(res) == {}
    assert res.offchip_bytes == w.run().offchip_bytes
    return res, int(w.subs["route_n0"])


@pytest.mark.parametrize("tile", [3, 6, 10])
def test_moe_static_tiles_of_any_rows_lower_to_blocks_of_p_rows(routing, tile):
    """Static token tiles of a row count that is not a multiple of P: padded in whole rows (the padding
    flags one per row), packed into blocks of P rows with a partial last block (3 rows: one block of 3; 6:
    4 + 2; 10: 4 + 4 + 2), the padding dropped after the FFN; same result, same bytes."""
    res, n0 = _moe_static_lowered(routing, tile)
    flags = [int(t.payload[0, 0]) for t in res.edges["e0_chunk_flags.out"] if t.is_data]
    assert flags == [0] * n0 + [4] * (-n0 % tile)      # a padded row's 4 physical tiles are all padding
    tiles = -(-n0 // tile)
    shapes = [t.payload.shape for t in res.edges["e0_pack.out"] if t.is_data]
    assert shapes == _blocks(tile, 4) * tiles


@pytest.mark.parametrize("tile", [4, 8, 16])
def test_moe_static_tiles_of_p_rows_lower_to_full_tiles(routing, tile):
    """Static token tiles of a multiple of P rows are packed into full P x P tiles (each block of P rows
    buffered and re-read column block by column block) and unpacked the same way back; the matmuls run on
    P x P tiles; same result, same bytes."""
    res, n0 = _moe_static_lowered(routing, tile)
    rows = -(-n0 // tile) * tile                                       # expert 0's rows, padding included
    shapes = {e: [t.payload.shape for t in res.edges[f"e0_{e}.out"] if t.is_data]
              for e in ("pack", "gate_proj_tiles", "unpack")}
    assert shapes["pack"] == [(4, 4)] * (rows // 4 * 4)               # a row block: 16 columns = 4 tiles
    assert set(shapes["gate_proj_tiles"]) == {(4, 4)}
    assert shapes["unpack"] == [(1, 4)] * (rows * 4)


def test_packing_tiles_of_tiles_is_reported():
    g = Graph("pack_tiles")
    g.tensor("x", 16, 8, "int16")
    g.tensor("y", 16, 8, "int16")
    t = g.load("x", tile=(4, 8), out_shape=[4], stride=[1], name="load")
    packed = g.accum(g.reshape(t, 0, 2, name="pairs"), "retile_row", fn("zeros", rows=0, cols=8, dtype="int16"),
                     1, name="pack")
    g.store(g.flatten(g.flat_map(packed, "retile_streamify", name="unpack"), 0, 1, name="rows"), "y", tile=(1, 8),
            name="store")
    with pytest.raises(TilingError, match=r"Accum 'pack': retile_row of int16\[4,8\] elements: only rows"):
        tile_physical(g, 4)


def test_physical_tiles_follow_the_tiling_rule():
    from step_hdl.mapper.tiling import BLOCKS, ROWS, physical_tiles, stream_tokens
    assert physical_tiles(32, 64, 16) == 2 * 4          # P x P blocks
    assert physical_tiles(1, 64, 16) == 4               # one row: [1, P] row tiles
    assert physical_tiles(13, 64, 4) == 13 * 16         # a non-multiple row count: row tiles
    assert physical_tiles(1, 1, 4) == physical_tiles(1, 2, 4) == 1
    assert physical_tiles(8, 64, 4, ROWS) == 8 * 16     # a dynamic count: row tiles whatever its value
    assert physical_tiles(13, 64, 4, BLOCKS) == 4 * 16  # packed rows: ceil(13 / 4) blocks of 4 rows
    assert stream_tokens(13, 64, 4, BLOCKS) == 4 * 16 + 4   # and a stop after each block row


def test_packed_rows_stay_row_tiles_where_a_consumer_mixes_rows():
    """Rows packed into a tile and stored as a tile: a store takes no P-row blocks, so the graph keeps its row
    tiles."""
    g = Graph("pack_store")
    g.tensor("x", 6, 4, "int16")
    g.tensor("y", 6, 4, "int16")
    rows = g.load("x", tile=(1, 4), out_shape=[1, 6], stride=[0, 1], name="rows")
    t = g.accum(rows, "retile_row", fn("zeros", rows=0, cols=4, dtype="int16"), 1, name="pack")
    g.store(t, "y", tile=(6, 4), name="store")
    assert counted_streams(g, 4) == frozenset()


def test_gqa_lowers_its_kv_rows_in_blocks():
    """GQA decode with dynamic parallelization: the ragged KV length L is a row count everywhere, packed into
    blocks of 4 rows through the softmax (scores [L, G] in blocks, col_max and col_sum of each block down the
    stream, the rows past a block's count neutral, the P·V contraction as block products); index streams
    (items, row addresses, acknowledgements) and the credit cycle keep their shape."""
    from step_hdl.workloads.gqa import gqa_decode
    w = gqa_decode([16, 3, 15, 2, 6], group=4, head_dim=4, regions=2, strategy="dynamic", dtype="int16")
    assert {"r0_pack_k.out", "r0_scores.out", "r0_shift.out", "r0_exp.out"} <= counted_streams(w.graph, 4)
    lowered = tile_physical(w.graph, 4)
    res = run(lowered, w.tensors, w.streams)
    assert w.mismatches(res) == {}
    assert res.offchip_bytes == w.run().offchip_bytes
    shapes = lambda edge: {t.payload.shape for t in res.edges[edge] if t.is_data}   # noqa: E731
    assert shapes("r0_scores_tiles.out") == {(4, 4), (3, 4), (2, 4)}     # blocks of 4 scores rows, the last partial
    assert shapes("r0_col_sum_tiles.out") == {(1, 4)}           # each block's column sums, added down the stream
    assert shapes("r0_pv_outer.out") == {(4, 4)}                # one product per pair of V and e blocks
    assert shapes("r0_load_kv_table.out") == {(1, 2)}           # a table row stays one record
    assert lowered.nodes["dispatch"].p("rank") == 0
    assert sum(n.kind == "Feedback" for n in lowered.nodes.values()) == 1
