"""Hierarchical tiling: logical tiles of any size -> streams of physical tiles.

:func:`tile_physical` rewrites a graph whose operators work on logical tiles
(``[tb, H]``, ``[H, ti]``, ...) into one whose every tile is ``P x P``, the
fabric's physical tile, as the STeP paper does for its HDL validation:

* a logical tile ``[R, C]`` becomes an innermost block ``[R/P, C/P]`` of
  physical tiles (row-major), so a stream ``[..., n]`` of logical tiles
  becomes ``[..., n, R/P, C/P]``;
* loads and stores address the tensor's grid of physical tiles, with the
  logical strides converted (a logical stride ``q·G + r`` over a grid ``G``
  tiles wide becomes ``q·(R/P)·G' + r·(C/P)`` over the physical grid ``G'``);
* a logical matmul ``[m, k] x [k, n]`` buffers both operands on chip
  (Bufferize), re-reads them in output order (Streamify with an affine
  pattern ``[m/P, n/P, k/P]``, flattened to ``[m/P, n/P·k/P]``), multiplies
  physical tiles and accumulates each run of ``k/P`` products (Reshape into
  runs, Accum): the mapper fuses the chain into one MatMul unit and each read
  with its Flatten, so no stop separates the runs on the wires;
* element-wise functions apply tile by tile;
* an Accum over logical tiles keeps one physical-tile state per position
  (Accum with ``keep=2``).

Rows: a tile dimension that is not a static multiple of ``P`` (a dynamic
number of token rows ``[N, H]``, a single row ``[1, H]``, a scalar ``[1, 1]``)
is cut into blocks of 1, so its physical tiles are partial: ``[1, P]`` rows (or
``[1, 1]``) instead of ``P x P`` — except packed rows (below). Every logical tile still becomes two block
dimensions, so a dynamic tile size becomes a dynamic stream dimension
(``[N, H]`` -> ``[N, H/P]`` of ``[1, P]``), and the stream operators above the
tile (Partition, Reassemble, Promote, Flatten, ...) keep their meaning with
their ranks shifted by the two block dimensions:

* packing rows into a tile (Accum ``retile_row``): every ``P`` rows' ``[P,
  C/P]`` block of row tiles is buffered and re-read column block by column
  block (Reshape into ``P``-row blocks, Bufferize + Streamify ``transpose``)
  and an Accum ``retile_row`` packs each column block's rows into one ``P x
  P`` tile. When the tile's row count is not a static multiple of ``P`` (a
  dynamic token count, a static tile of 3, 6, 10 rows), the last block is
  partial (Reshape ``partial``): its tiles carry their valid rows in the
  token (``units.layout``), so a dynamic ``[N, H]`` tile is ``ceil(N/P)``
  block rows of ``H/P`` tiles and its matmuls run at the array's full rate.
  That holds where every consumer of such tiles works row by row
  (:func:`counted_streams`); otherwise (a column reduction, as in GQA's
  softmax) the rows stay ``[1, P]`` row tiles and packing only regroups them
  (Flatten). Unpacking (FlatMap ``retile_streamify``) is a FlatMap of each
  tile into its valid rows and the same kind of buffer read back in row
  order;
* a padded Reshape (static token tiles) pads single physical tiles: the
  elements' blocks are flattened, padded in whole elements, and split again;
  its padding flags are summed per element (0: real);
* RepeatStatic of a logical tile buffers its block (Bufferize + Streamify
  ``repeat``);
* a matmul of row tiles ``[N, K] x [K, M]`` buffers each row (``K/P`` tiles)
  and the ``[K, M]`` operand, and re-reads the operand once per row (a
  Streamify whose ``ref`` is the row stream), so the dynamic ``N`` is never
  needed as a configuration value; a matmul of packed rows does the same per
  block row of ``P`` rows;
* a ``ref`` stream of logical tiles (an off-chip load per logical tile)
  becomes one token per logical tile (an Accum over the two block dims);
* an element-wise function with a ``[1, 1]`` second operand repeats that
  operand along a single row; with a ``[1, C]`` (a norm's gamma, softmax's
  ``s - col_max(s)``) or ``[1, 1]`` second operand over any other block the
  block is buffered whole until the operand is there, then replayed with the
  operand re-read once per block row;
* Expand of tiles buffers each logical tile's block and replays it once per
  element of the ``ref``'s inner dims (a Streamify with a ``ref``);
* a matmul operand may have a side of 1 (a ``[K, 1]`` vector: ``[P, 1]``
  physical pieces);
* ``row_max``/``row_sum`` reduce each physical tile to a ``[pr, 1]`` column
  piece (``[P, 1]``, or ``[1, 1]`` for row tiles) and combine a block row's
  pieces with an Accum (a float sum: each tile's group sums, ``row_group_sums``,
  added to an fp32 running sum, Accum ``add_groups``); ``col_max``/``col_sum`` reduce each ``P x P`` tile to
  a ``[1, P]`` row (row tiles already are one) and accumulate down the block
  keeping its column positions (Accum ``keep=1``). Their int32 state is cast
  back (requantize by 0, exact) to the logical type of a ``max`` unless every
  consumer computes in int32 anyway;
* an element-wise function with a ``[R, 1]`` second operand (``x -
  row_max(x)``) repeats each column piece along its block row; the unit
  broadcasts it over the tile's columns;
* a ``transpose_a`` matmul of two row-tiled operands (``Vᵀ·e``, contracting the
  dynamic ``N``) is one outer product ``[1, P]ᵀ x [1, P]`` per row pair,
  accumulated (its first operand buffered whole per tile: in attention it
  is loaded long before the second is computed from the same rows).

Index streams (IndexSource, FlatMap ``range``, store acknowledgements, and
the Broadcast/Partition/EagerMerge that route them) are not tiles of data:
they keep their shape. Random loads and stores move one physical tile per
address (the address is unchanged); a narrow table row (``[1, 2]`` start and
length) stays one record. A selector cycle (``Graph.feedback``, closed through
an EagerMerge) is carried over as it is.

The lowered graph computes the same result as the original (integer types
bit-exactly); ``tests/test_tiling.py`` checks that with the interpreter.
Operators and functions not listed raise :class:`TilingError` naming the node.
"""

from __future__ import annotations

import functools

import sympy

from step_hdl.errors import StepError
from step_hdl.floats import GROUP
from step_hdl.functions import fn
from step_hdl.graph import Graph
from step_hdl.types import Tile, as_dim, dims_equal

ELEMENTWISE = {"add", "sub", "mul", "max", "div", "relu", "silu", "exp", "requantize", "convert", "affine"}
#: column reductions -> (Accum update, initial state)
COLUMN_REDUCE = {"col_max": ("max", "lowest"), "col_sum": ("add", "zeros")}
#: row reductions -> (Accum update combining the physical tiles of a block row, initial state)
ROW_REDUCE = {"row_max": ("max", "lowest"), "row_sum": ("add", "zeros")}


class TilingError(StepError):
    """The graph cannot be lowered to physical tiles (as it stands)."""


def _static(d, what, where):
    d = as_dim(d)
    if not d.is_Integer:
        raise TilingError(f"{where}: {what} {d} must be static to tile it physically")
    return int(d)


def _cut(d, P: int):
    """(physical size, blocks) of one tile dimension: P-blocks if a static multiple of P, else 1-blocks."""
    d = as_dim(d)
    if d.is_Integer and int(d) % P == 0:
        return P, int(d) // P
    return 1, (int(d) if d.is_Integer else d)


def row_tiled(d, P: int) -> bool:
    """Whether a tile dimension of size ``d`` is cut into 1-blocks (not a static multiple of ``P``): rows so
    cut become ``[1, P]`` row tiles, which the units pass on one by one."""
    return _cut(d, P)[0] != P


def in_row_blocks(rows, P: int, counted: bool) -> bool:
    """Whether the lowering cuts a tile of ``rows`` rows into blocks of ``P`` rows (packing and unpacking
    them through a transposing buffer): a static multiple of ``P``, or packed rows (``counted``: a label
    of :func:`counted_streams`); else row tiles."""
    return counted or not row_tiled(rows, P)


def _counted_outputs(node, port):
    """The outputs that carry packed-row tiles when ``node`` takes them on ``port``; None if it cannot."""
    k = node.kind
    if (k == "Broadcast" or node.routes) and "in" in node.inputs:    # one input to its outputs (a Partition's)
        return [p for p in node.out_types if p.startswith("out")] if port == "in" else None
    if node.routes:                                                 # inputs in0, in1, ... to one output
        return ["out"] if port.startswith("in") else None
    if k == "RepeatStatic":
        return ["out"]
    if k == "Map":
        f = node.p("fn")
        if f.name == "matmul" and f.param("transpose_a"):
            # contracting the packed rows of both operands (their missing rows count as zeros): a static result
            return [] if port in ("in0", "in1") and not f.param("transpose_b") else None
        if f.name == "matmul":
            return ["out"] if port == "in0" and not f.param("transpose_b") else None
        if f.name in ("col_sum", "col_max"):
            return []               # down the packed rows (the missing ones neutral): a static [1, C] row
        rows_of = {p: as_dim(node.t(p).dtype.rows) for p in node.input_ports()}
        shapes = {(rows_of[p], as_dim(node.t(p).dtype.cols)) for p in node.input_ports() if rows_of[p] != 1
                  or p == port}
        return ["out"] if f.name in ELEMENTWISE and len(shapes) == 1 else None
    if k == "Accum":
        ok = (node.p("update").name in ("add", "max") and node.p("init").name in ("zeros", "lowest")
              and not node.p("keep") and dims_equal(node._state.rows, node.t("in").dtype.rows) is True)
        return ["out"] if ok else None
    if k == "FlatMap":
        return [] if node.p("fn").name == "retile_streamify" else None
    if k == "LinearOffChipLoad" and port == "ref":
        return []
    return None


def counted_streams(graph: Graph, P: int) -> frozenset:
    """Source-graph labels of the streams whose tiles the lowering keeps in ``P``-row blocks, each tile
    carrying its valid rows (the last block of a tile partial), instead of cutting them into row tiles.

    They are the tiles that an Accum ``retile_row`` packs from rows into a tile whose row count is not a
    static multiple of ``P`` (a dynamic token count, a static tile of 3, 6, 10 rows), and what routes them,
    repeats them or computes on them row by row (matmul as first operand, element-wise functions of
    operands of one shape, add/max accumulation) until a FlatMap ``retile_streamify`` unpacks them. If any
    consumer on the way takes no such tiles (a column reduction mixing rows, a broadcast, a store), or
    mixes them with row tiles, no stream is: the graph keeps its row tiles (1/P of the matmul rate,
    correct). The model asks the same question (:func:`physical_tiles`)."""
    users: dict[str, list] = {}
    for ref, c, p in graph.edges():
        users.setdefault(ref.label, []).append((graph.nodes[c], p))
    todo = [f"{n.name}.out" for n in graph.nodes.values()
            if n.kind == "Accum" and n.p("update").name == "retile_row" and n.p("rank") == 1 and not n.p("keep")
            and row_tiled(n._state.rows, P) and dims_equal(n._state.rows, 1) is not True]
    counted: set[str] = set()
    takers = []
    while todo:
        label = todo.pop()
        if label in counted:
            continue
        counted.add(label)
        for node, port in users.get(label, []):
            outs = _counted_outputs(node, port)
            if outs is None:
                return frozenset()
            takers.append(node)
            todo += [f"{node.name}.{o}" for o in outs]
    for node in takers:      # every tile operand of an element-wise function, a contraction or a join: packed
        if node.kind == "Map" and node.p("fn").name == "matmul":        # alike (a [1, C] row broadcast aside)
            ports = ["in0", "in1"] if node.p("fn").param("transpose_a") else []
        elif node.kind == "Map":
            ports = [p for p in node.input_ports() if as_dim(node.t(p).dtype.rows) != 1]
        else:
            ports = [p for p in node.inputs if p.startswith("in") and p[2:].isdigit()] if node.routes else []
        if any(node.inputs[p].label not in counted for p in ports):
            return frozenset()
    return frozenset(counted)


#: how a tile's rows are cut (``cut`` of :func:`physical_tiles`): by their count (None: ``P``-blocks if a
#: static multiple of ``P``, else row tiles); ROWS: row tiles whatever the count in a run (a dynamic count);
#: BLOCKS: ``ceil(rows / P)`` blocks of ``P`` rows, the last one partial (packed rows: :func:`counted_streams`)
ROWS, BLOCKS = "rows", "blocks"


def row_blocks(rows: int, P: int, cut) -> int:
    """Row blocks of a tile of ``rows`` rows as the lowering cuts them (``cut``: :data:`ROWS`, :data:`BLOCKS`
    or by the count): ``P``-row blocks, or single rows."""
    if cut == BLOCKS:
        return -(-int(rows) // P)
    return int(rows) if cut == ROWS else _cut(rows, P)[1]


@functools.lru_cache(maxsize=4096)
def physical_tiles(rows: int, cols: int, P: int, cut=None) -> int:
    """Physical tiles (stream tokens) of a ``[rows, cols]`` tile after lowering to ``P``: its row blocks
    (``cut``: :data:`ROWS`, :data:`BLOCKS` or by the count) times ``ceil(cols / P)`` column pieces. The
    approximate model uses this to count transfers like the RTL."""
    return row_blocks(rows, P, cut) * -(-int(cols) // P)


@functools.lru_cache(maxsize=4096)
def stream_tokens(rows: int, cols: int, P: int, cut=None) -> int:
    """Tokens a ``[rows, cols]`` tile takes on a lowered stream: its physical tiles plus the stop that
    closes each block row (``[..., rb, cb]``: ``cb`` tiles, then a stop), one per row for row tiles.
    Every token is one transfer, so this is what a stream of such tiles costs in cycles."""
    return physical_tiles(rows, cols, P, cut) + row_blocks(rows, P, cut)


def physical_shape(rows, cols, P: int) -> tuple:
    """``(pr, pc, rb, cb)``: the physical tile ``[pr, pc]`` a ``[rows, cols]`` logical tile is cut into and
    its block ``[rb, cb]`` of them (``P``-blocks for a static multiple of ``P``, else 1-blocks: row tiles; a
    narrow row of ``1 < cols < P`` is one physical tile). The off-chip layout stores these physical tiles
    one after the other, row by row of the tensor (``mapper.plan.configure``)."""
    pr, rb = _cut(rows, P)
    pc, cb = _cut(cols, P)
    if as_dim(cols).is_Integer and 1 < int(cols) < P:
        pc, cb = int(cols), 1             # a narrow table row ([1, 2] (start, length)) is one physical tile
    return pr, pc, rb, cb


def _phys(tile: Tile, P: int, where: str):
    """:func:`physical_shape` of a logical tile, checked: columns must be a static multiple of ``P``, 1 (a
    scalar) or narrower than ``P``; rows may be anything (1-blocks: row tiles)."""
    pr, pc, rb, cb = physical_shape(tile.rows, tile.cols, P)
    if pc == 1 and cb != 1:
        raise TilingError(f"{where}: logical tile [{tile.rows}, {tile.cols}] is not a multiple of the physical "
                          f"tile {P}x{P} (partial physical tiles are rows [1, {P}] or scalars [1, 1])")
    return pr, pc, rb, cb


def _accum_dtype(tile: Tile) -> str:
    """The state type of an add or max accumulation of ``tile``'s elements: int32 for integers."""
    return "int32" if tile.dtype.is_int else tile.dtype.name


def _blocks(tile: Tile, P: int, where: str) -> tuple[int, int]:
    """Blocks of a matmul operand's logical tile: whole ``P x P`` physical tiles, or a side of 1 (a ``[K, 1]``
    column, a ``[1, K]`` row: ``[P, 1]`` or ``[1, P]`` physical pieces, as :func:`physical_shape` cuts it)."""
    r = _static(tile.rows, "tile rows", where)
    c = _static(tile.cols, "tile cols", where)
    if (r % P and r != 1) or (c % P and c != 1):
        raise TilingError(f"{where}: logical tile [{r}, {c}] is not a multiple of the physical tile {P}x{P} "
                          f"(a matmul's operands are whole physical tiles, or a side of 1)")
    return max(1, r // P), max(1, c // P)


class _Lowering:
    def __init__(self, g: Graph, P: int, name: str):
        self.src, self.P = g, P
        self.g = Graph(name)
        self.refs: dict[str, object] = {}
        self.indices: set[str] = set()     # source-graph labels of index streams
        self.counted = counted_streams(g, P)   # source-graph labels of tiles in P-row blocks with a count

    def ref(self, r):
        return self.refs[r.label]

    def run(self) -> Graph:
        for spec in self.src.tensors.values():
            self.g.tensor(spec.name, spec.rows, spec.cols, spec.dtype)
        for node in self.src.nodes.values():
            if node.kind == "Feedback":     # a cycle's back edge: its consumers come before its source
                st = node.out_types["out"]
                if isinstance(st.dtype, Tile):
                    raise TilingError(f"Feedback '{node.name}': cycles carrying tiles or indices are not "
                                      f"supported by hierarchical tiling yet (selector cycles are)")
                self.out(node, "out", self.g.feedback(st, name=node.name))
        origin = {n: n for n in self.g.nodes}      # the Feedback placeholders keep their names
        for node in self.src.topological_order():
            method = getattr(self, f"_{node.kind}", None)
            if method is None:
                raise TilingError(f"{node.kind} '{node.name}': hierarchical tiling does not support this "
                                  f"operator yet")
            method(node)
            for name in self.g.nodes:
                origin.setdefault(name, node.name)
        self.g.origin = origin
        # the source graph's streams of addresses and table records: one token per element, no block dims
        self.g.indices = frozenset(self.indices)
        return self.g

    def out(self, node, port, new):
        self.refs[f"{node.name}.{port}"] = new

    def phys(self, tile, where, counted=False):
        """``(pr, pc, rb, cb)`` of a logical tile; ``counted``: its rows in ``ceil(rows / P)`` blocks of ``P``
        rows (the last one partial) instead of row tiles."""
        pr, pc, rb, cb = _phys(tile, self.P, where)
        if pr == 1 and in_row_blocks(tile.rows, self.P, counted):
            return self.P, pc, sympy.ceiling(as_dim(tile.rows) / self.P), cb
        return pr, pc, rb, cb

    def phys_in(self, node, port, where=None):
        """:meth:`phys` of the tile on an input port, as that stream is lowered."""
        return self.phys(node.t(port).dtype, where or f"{node.kind} '{node.name}' port '{port}'",
                         node.inputs[port].label in self.counted)

    def is_counted(self, node, port="in") -> bool:
        return node.inputs[port].label in self.counted

    def blocks_of(self, node, port) -> int:
        """Block dimensions the lowering adds to an input stream: 2 for tiles, none for selectors and for
        index streams (addresses: sources, ranges, store acknowledgements, and what routes them)."""
        ref = node.inputs[port]
        return 2 if isinstance(ref.type.dtype, Tile) and ref.label not in self.indices else 0

    def index_out(self, node, port, new):
        """Record an output that stays an index stream or table records (no block dims)."""
        self.indices.add(f"{node.name}.{port}")
        self.out(node, port, new)

    def like(self, node, port):
        """How to record outputs that carry input ``port``'s elements: as index streams if it is one."""
        return self.index_out if node.inputs[port].label in self.indices else self.out

    def blocked(self, stream, name):
        """A rank-``r`` stream of single physical tiles -> the same tiles as ``[..., 1, 1]`` blocks."""
        return self.g.reshape(self.g.reshape(stream, 0, 1, name=f"{name}_row"), 0, 1, name=f"{name}_block")

    def single(self, tile, where):
        """The physical tile of a logical tile that must be exactly one physical tile."""
        pr, pc, rb, cb = self.phys(tile, where)
        if (rb, cb) != (1, 1):
            raise TilingError(f"{where}: logical tile {tile} spans {rb}x{cb} physical tiles; only a single "
                              f"physical tile ({self.P}x{self.P} or smaller) is supported here yet")
        return pr, pc

    def transposed(self, stream, name, what):
        """Every rank-2 block ``[r, c]`` of ``stream``, buffered and read back column by column (``[c, r]``,
        each block at its own size): how packing and unpacking rows reorder a block of up to ``P`` rows."""
        return self.g.streamify(self.g.bufferize(stream, 2, name=f"{name}_buf"), transpose=True,
                                name=f"{name}_{what}")

    def per_tile(self, stream, name, rank=2):
        """One token per logical tile of a lowered stream (an Accum over its two block dims), or per
        element of its inner ``rank`` dims."""
        t = stream.type.dtype
        acc = "int32" if t.dtype.is_int else "fp32"     # (the values do not matter, only the tokens)
        return self.g.accum(stream, "add", fn("zeros", rows=int(t.rows), cols=int(t.cols), dtype=acc),
                            rank=rank, name=name)

    # ---------------------------------------------------------------- off-chip
    def _grid_strides(self, node, strides, counts, base):
        where = f"{node.kind} '{node.name}'"
        spec = self.src.tensors[node.p("tensor")]
        tile = node.tile_type()
        pr, pc, rb, cb = self.phys(tile, where)
        rb = _static(rb, "tile rows", where)
        g_cols = _static(spec.cols / tile.cols, "tensor grid width", where)
        p_cols = g_cols * cb
        out, carry = [], 0
        bq, br = divmod(base, g_cols)
        for s, n in zip(strides, counts):
            q, r = divmod(s, g_cols)
            out.append(q * rb * p_cols + r * cb)
            if r:
                n = as_dim(n)
                if not n.is_Integer:
                    raise TilingError(f"{where}: a stride ({s}) inside a grid row over a dynamic dimension "
                                      f"cannot be converted to physical tiles")
                carry += (int(n) - 1) * r
        if br + carry >= g_cols:
            raise TilingError(f"{where}: the tile pattern wraps around a grid row; not an affine pattern "
                              f"over physical tiles")
        return out, bq * rb * p_cols + br * cb, rb, cb, p_cols, (pr, pc)

    def _LinearOffChipLoad(self, node):
        ref = node.inputs.get("ref")
        lead = list(ref.type.shape) if ref is not None else []
        counts = lead + list(node.p("out_shape"))
        strides, base, rb, cb, p_cols, ptile = self._grid_strides(node, node.p("stride"), counts, node.p("base"))
        new_ref = None
        if ref is not None:
            new_ref = self.ref(ref)
            if isinstance(ref.type.dtype, Tile):
                new_ref = self.per_tile(new_ref, f"{node.name}_ref")
        new = self.g.load(node.p("tensor"), tile=ptile, out_shape=list(node.p("out_shape")) + [rb, cb],
                          stride=strides + [p_cols, 1], ref=new_ref, base=base, name=node.name)
        self.out(node, "out", new)

    def _LinearOffChipStore(self, node):
        where = f"{node.kind} '{node.name}'"
        spec = self.src.tensors[node.p("tensor")]
        tile = node.tile_type()
        pr, pc, rb, cb = self.phys(tile, where)
        rb = _static(rb, "tile rows", where)
        if (rb, cb) != (1, 1) and sympy.simplify(as_dim(spec.cols) - tile.cols) != 0:
            raise TilingError(f"{where}: stores of tiles narrower than the tensor ({tile} into "
                              f"{spec.cols} columns) are not supported yet")
        self.g.store(self.ref(node.inputs["in"]), node.p("tensor"), tile=(pr, pc),
                     base=node.p("base") * rb * cb, name=node.name)

    def random_tile(self, node):
        """The physical tile of a random load or store: one per logical tile, so that the tile index an
        address names is unchanged."""
        where = f"{node.kind} '{node.name}'"
        if node.p("base"):
            raise TilingError(f"{where}: a base offset on random loads and stores is not supported by "
                              f"hierarchical tiling yet")
        return self.single(node.tile_type(), where)

    def _RandomOffChipLoad(self, node):
        tile = self.random_tile(node)
        new = self.g.random_load(self.ref(node.inputs["addr"]), node.p("tensor"), tile=tile, name=node.name)
        if tile[0] == 1 and tile[1] < self.P:
            self.index_out(node, "out", new)     # a table row ((start, length)): a record, not blocked
        else:
            self.out(node, "out", self.blocked(new, node.name))

    def _RandomOffChipStore(self, node):
        tile = self.random_tile(node)
        data = self.g.flatten(self.ref(node.inputs["data"]), 0, 2, name=f"{node.name}_unblock")
        self.index_out(node, "out", self.g.random_store(self.ref(node.inputs["addr"]), data, node.p("tensor"),
                                                        tile=tile, name=node.name))

    # ---------------------------------------------------------------- plumbing and routing
    def _Broadcast(self, node):
        outs = self.g.broadcast(self.ref(node.inputs["in"]), node.p("n"), name=node.name)
        for i, o in enumerate(outs):
            self.like(node, "in")(node, f"out{i}", o)

    def _Output(self, node):
        self.g.output(self.ref(node.inputs["in"]), name=node.name)

    def _SelectorSource(self, node):
        self.out(node, "out", self.g.add("SelectorSource", node.name, {}, **dict(node.params)).out)

    def _IndexSource(self, node):
        self.index_out(node, "out", self.g.add("IndexSource", node.name, {}, **dict(node.params)).out)

    def _Feedback(self, node):
        self.g.bind(self.refs[f"{node.name}.out"], self.ref(node.inputs["in"]))

    def _Partition(self, node):
        outs = self.g.partition(self.ref(node.inputs["in"]), self.ref(node.inputs["sel"]), node.p("n"),
                                rank=node.p("rank") + self.blocks_of(node, "in"), name=node.name)
        for i, o in enumerate(outs):
            self.like(node, "in")(node, f"out{i}", o)

    def _Reassemble(self, node):
        ins = [self.ref(node.inputs[f"in{i}"]) for i in range(node.p("n"))]
        self.out(node, "out", self.g.reassemble(ins, self.ref(node.inputs["sel"]),
                                                rank=node.p("rank") + self.blocks_of(node, "in0"),
                                                k=node.p("k"), name=node.name))

    def _EagerMerge(self, node):
        ins = [self.ref(node.inputs[f"in{i}"]) for i in range(node.p("n"))]
        out, sel = self.g.eager_merge(ins, rank=node.p("rank") + self.blocks_of(node, "in0"), name=node.name)
        if len({self.like(node, f"in{i}") for i in range(node.p("n"))}) != 1:
            raise TilingError(f"EagerMerge '{node.name}': merges index streams with tile streams")
        self.like(node, "in0")(node, "out", out)
        self.out(node, "sel", sel)

    def _Promote(self, node):
        self.out(node, "out", self.g.promote(self.ref(node.inputs["in"]), name=node.name))

    def _Flatten(self, node):
        self.out(node, "out", self.g.flatten(self.ref(node.inputs["in"]), node.p("lo") + 2, node.p("hi") + 2,
                                             name=node.name))

    def _Reshape(self, node):
        chunk, rank = node.p("chunk"), node.p("rank")
        src = self.ref(node.inputs["in"])
        blocks = self.blocks_of(node, "in")
        if node.p("pad") is None:
            self.like(node, "in")(node, "out", self.g.reshape(src, rank + blocks, chunk, name=node.name))
            return
        where = f"Reshape '{node.name}'"
        if not blocks:
            raise TilingError(f"{where}: padding an index stream is not supported by hierarchical tiling")
        # padding works on single elements (rank 0), so the tiles' blocks [rb, cb] are flattened into the
        # row dimension, padded in whole blocks (chunk·rb·cb tiles), and the blocks split off again
        _, _, rb, cb = self.phys(node.t("in").dtype, where)
        per = _static(rb, "tile rows", where) * cb
        flat = self.g.flatten(src, 0, 2, name=f"{node.name}_unblock")
        data, flags = self.g.reshape(flat, 0, chunk * per, pad=node.p("pad"), name=node.name)
        data = self.g.reshape(self.g.reshape(data, 0, cb, name=f"{node.name}_cols"), 1, rb,
                              name=f"{node.name}_rows")
        self.out(node, "out", data)
        # one flag per logical element: a padded element's tiles are all padding, so their sum is 0 or per
        flags = self.g.reshape(flags, 0, per, name=f"{node.name}_flag_blocks")
        self.index_out(node, "pad", self.per_tile(flags, f"{node.name}_flags", rank=1))

    def _RepeatStatic(self, node):
        where = f"RepeatStatic '{node.name}'"
        if not isinstance(node.t("in").dtype, Tile):
            raise TilingError(f"{where}: only streams of tiles can be repeated by hierarchical tiling yet")
        buf = self.g.bufferize(self.ref(node.inputs["in"]), 2, name=f"{node.name}_buf")
        self.out(node, "out", self.g.streamify(buf, repeat=node.p("count"), name=node.name))

    def _Expand(self, node):
        """Each element of ``in`` repeated over the ``ref``'s inner ``rank`` dims. Tiles: each logical tile's
        block of physical tiles is buffered and replayed once per element of those dims (Bufferize, and a
        Streamify whose ``ref`` has one token per logical tile of the ``ref``: a RepeatStatic whose count the
        ``ref`` gives); index and selector streams go to an Expand unit as they are."""
        b = node.p("rank")
        src, ref = self.ref(node.inputs["in"]), self.ref(node.inputs["ref"])
        if self.blocks_of(node, "ref"):
            ref = self.per_tile(ref, f"{node.name}_each")
        if not self.blocks_of(node, "in"):
            self.like(node, "in")(node, "out", self.g.expand(src, ref, rank=b, name=node.name))
            return
        # [O..., 1 (rank times), rb, cb]: the size-1 dims merged into the outermost, so the buffers' stream
        # is [O...] and the ref [O..., n...] starts with it
        flat = self.g.flatten(src, 2, 2 + b, name=f"{node.name}_outer")
        buf = self.g.bufferize(flat, 2, name=f"{node.name}_buf")
        self.out(node, "out", self.g.streamify(buf, ref=ref, name=node.name))

    def _FlatMap(self, node):
        where = f"FlatMap '{node.name}'"
        f = node.p("fn")
        if f.name == "range":
            # (start, count) tiles -> indices: the tiles' block dims go, the indices are not blocked
            self.single(node.t("in").dtype, where)
            starts = self.ref(node.inputs["in"])
            if self.blocks_of(node, "in"):
                starts = self.g.flatten(starts, 0, 2, name=f"{node.name}_unblock")
            self.index_out(node, "out", self.g.flat_map(starts, f, rank=node.p("rank"), name=node.name))
            return
        if f.name != "retile_streamify":
            raise TilingError(f"{where}: function {f.name!r} is not supported by hierarchical tiling yet")
        pr, _, _, cb = self.phys_in(node, "in", where)
        rows = self.ref(node.inputs["in"])
        if pr != 1:
            # [..., ceil(R/P), cb] of [P, P] -> [..., ceil(R/P), cb, <=P] of [1, P] rows (a tile's valid
            # rows), each block's [cb, r] re-read in row order [r, cb], the block rows joined: [..., R, cb]
            rows = self.g.flat_map(rows, f, name=f"{node.name}_tiles")
            rows = self.g.flatten(self.transposed(rows, node.name, "rows"), 1, 2, name=f"{node.name}_join")
        # [..., R, C/P] of [1, P] -> [..., R, 1, C/P]: each row its own block
        self.out(node, "out", self.g.reshape(rows, 1, 1, name=node.name))

    # ---------------------------------------------------------------- compute
    def _Map(self, node):
        f = node.p("fn")
        where = f"Map '{node.name}'"
        ins = [self.ref(node.inputs[p]) for p in node.input_ports()]
        if not any(self.blocks_of(node, p) for p in node.input_ports()):
            # index arithmetic on index or selector streams (sel_index, affine): unchanged
            new = self.g.map(ins, f, name=node.name)
            (self.index_out if isinstance(new.type.dtype, Tile) else self.out)(node, "out", new)
            return
        if f.name == "matmul" and f.param("transpose_a"):
            self.out(node, "out", self._outer_matmul(node, ins, f))
            return
        if f.name == "matmul":
            self.out(node, "out", self._matmul(node, ins, f))
            return
        if f.name in COLUMN_REDUCE:
            self.out(node, "out", self._column_reduce(node, ins[0], f))
            return
        if f.name in ROW_REDUCE:
            self.out(node, "out", self._row_reduce(node, ins[0], f))
            return
        if f.name not in ELEMENTWISE:
            raise TilingError(f"{where}: function {f.name!r} is not supported by hierarchical tiling yet")
        tiles = [node.t(p).dtype for p in node.input_ports()]
        phys = [self.phys_in(node, p, f"{where} port '{p}'") for p in node.input_ports()]
        two = len(tiles) == 2
        scalar = two and tuple(map(as_dim, (tiles[1].rows, tiles[1].cols))) == (1, 1) != \
            tuple(map(as_dim, (tiles[0].rows, tiles[0].cols)))
        row = two and as_dim(tiles[1].rows) == 1 != as_dim(tiles[0].rows)
        if scalar and phys[0][0] == 1 and phys[0][2] == 1:
            # a single row: the scalar's block [1, 1] -> [1, C/P], repeated along the row
            rep = self.g.repeat(ins[1], phys[0][3], name=f"{node.name}_bcast")
            ins = [ins[0], self.g.flatten(rep, 0, 1, name=f"{node.name}_bcast_row")]
        elif row and (phys[0][0] == 1 or self.is_counted(node, "in0")):
            ins = self._row_broadcast(node, ins, phys)          # over row tiles, or over packed P-row blocks
        elif two and as_dim(tiles[1].cols) == 1 != as_dim(tiles[0].cols) \
                and dims_equal(tiles[0].rows, tiles[1].rows):
            # [R, C] . [R, 1] (softmax's x - row_max(x)): each [pr, 1] piece of the column repeats along
            # its block row of C/P tiles; the unit broadcasts the piece over the tile's columns
            rep = self.g.repeat(ins[1], phys[0][3], name=f"{node.name}_bcast")
            ins = [ins[0], self.g.flatten(rep, 0, 1, name=f"{node.name}_bcast_row")]
        elif two and all(p[2:] == (1, 1) for p in phys):
            pass        # single physical tiles: the unit broadcasts a side of size 1 itself
        elif scalar or row:
            ins = self._row_broadcast(node, ins, phys)          # over any other block: P x P tiles
        elif len({(t.rows, t.cols) for t in tiles}) != 1:
            raise TilingError(f"{where}: broadcasting operands {sorted(map(str, tiles))} are not supported "
                              f"by hierarchical tiling yet")
        self.out(node, "out", self.g.map(ins, f, name=node.name))

    def _matmul(self, node, ins, f):
        where = f"Map '{node.name}'"
        a_t, b_t = node.t("in0").dtype, node.t("in1").dtype
        if self.is_counted(node, "in1"):
            raise TilingError(f"{where}: a matmul whose second operand is a tile of packed rows is not "
                              f"supported by hierarchical tiling yet")
        if self.phys_in(node, "in0", where)[0] == 1 or self.is_counted(node, "in0"):
            return self._row_matmul(node, ins, f)
        mb, kb = _blocks(a_t, self.P, where)
        tb = f.param("transpose_b")
        nb = _blocks(b_t, self.P, where)[0 if tb else 1]
        a, b = ins
        pre = node.name
        a_rd = self.g.streamify(self.g.bufferize(a, 2, name=f"{pre}_buf_a"), read_shape=[mb, nb, kb],
                                read_stride=[kb, 0, 1], name=f"{pre}_read_a")
        b_stride = [0, kb, 1] if tb else [0, 1, nb]
        b_rd = self.g.streamify(self.g.bufferize(b, 2, name=f"{pre}_buf_b"), read_shape=[mb, nb, kb],
                                read_stride=b_stride, name=f"{pre}_read_b")
        return self._k_runs(a_rd, b_rd, f, kb, pre)

    def _k_runs(self, a_rd, b_rd, f, kb, pre):
        """The products of operand reads ``[..., nb, kb]`` summed over each ``kb``-run: the reads flattened to
        ``[..., nb·kb]``, their products cut into runs again (Reshape) and accumulated. The mapper runs the
        chain as one MatMul unit that counts the runs itself and each buffer with its Flatten, so no stop
        token separates the runs: the array multiplies on every cycle, not ``kb`` in ``kb + 1``."""
        a_fl = self.g.flatten(a_rd, 0, 1, name=f"{pre}_flat_a")
        b_fl = self.g.flatten(b_rd, 0, 1, name=f"{pre}_flat_b")
        if not a_fl.type.dtype.dtype.is_int:
            return self._float_k_runs(a_fl, b_fl, f, kb, pre)
        prod = self.g.map([a_fl, b_fl], f, name=f"{pre}_tiles")
        t = prod.type.dtype
        runs = self.g.reshape(prod, 0, kb, name=f"{pre}_runs")
        return self.g.accum(runs, "add", fn("zeros", rows=int(t.rows), cols=int(t.cols), dtype=t.dtype.name),
                            rank=1, name=pre)

    def _float_k_runs(self, a_fl, b_fl, f, kb, pre):
        """The float twin of :meth:`_k_runs`: each pair gives its products' group sums (``matmul`` with
        ``groups``), an Accum adds them to an fp32 running sum (``add_groups``) and the sum is rounded once to
        the logical matmul's format, so the result is the logical matmul's fixed-order sum bit for bit
        whatever ``P`` (:mod:`step_hdl.floats`); the mapper runs the first three as one MatMul unit."""
        params = {k: v for k, v in f.params if k != "dtype"}
        prod = self.g.map([a_fl, b_fl], fn("matmul", groups=True, **params), name=f"{pre}_tiles")
        out = f.spec.out_type(f, a_fl.type.dtype, b_fl.type.dtype)       # [M, N] in the result's format
        runs = self.g.reshape(prod, 0, kb, name=f"{pre}_runs")
        keep = out.dtype.name == "fp32"
        acc = self.g.accum(runs, "add_groups", fn("zeros", rows=int(out.rows), cols=int(out.cols), dtype="fp32"),
                           rank=1, name=pre if keep else f"{pre}_sum")
        return acc if keep else self.g.map(acc, fn("convert", dtype=out.dtype.name), name=pre)

    def _row_broadcast(self, node, ins, phys):
        """``[N, C] . [1, C]`` (a norm's gamma, softmax's ``s - col_max(s)``) or ``[N, C] . [1, 1]``, over any
        block of ``rb x cb`` physical tiles (``N`` row tiles, packed ``P``-row blocks, ``P x P`` tiles): the
        block is buffered whole until the small operand is there (it may be a reduction of the same rows),
        then replayed with the operand's ``cb`` tiles (or its one scalar, ``cb`` times) re-read once per
        block row; the unit broadcasts each over the tile's rows (and columns)."""
        where = f"Map '{node.name}'"
        cb, vec_cb = phys[0][3], phys[1][3]
        if phys[1][2] != 1 or vec_cb not in (1, cb) or (vec_cb == 1 and phys[1][1] not in (1, phys[0][1])):
            raise TilingError(f"{where}: a {node.t('in1').dtype} operand does not broadcast over "
                              f"{node.t('in0').dtype} on {self.P}x{self.P} physical tiles")
        pre = node.name
        rows_in, vec = ins
        vec_ref, vec_val = self.g.broadcast(vec, 2, name=f"{pre}_split_vec")
        if vec_cb == 1:
            ready = self.g.flatten(vec_ref, 0, 2, name=f"{pre}_vec_ready")      # one token per [N, C] tile
        else:
            ready = self.per_tile(vec_ref, f"{pre}_vec_ready")
        rows = self.g.streamify(self.g.bufferize(rows_in, 2, name=f"{pre}_buf_rows"), ref=ready,
                                name=f"{pre}_rows")
        rows_a, rows_b = self.g.broadcast(rows, 2, name=f"{pre}_split_rows")
        each = self.per_tile(rows_b, f"{pre}_each_row", rank=1)
        vec_rd = self.g.streamify(self.g.bufferize(vec_val, 2, name=f"{pre}_buf_vec"), ref=each,
                                  read_shape=[cb], read_stride=[1 if vec_cb == cb else 0], name=f"{pre}_read_vec")
        return [rows_a, vec_rd]

    def _column_reduce(self, node, tiles_in, f):
        """``col_max``/``col_sum`` of a logical ``[R, C]`` tile (a block ``[rb, cb]`` of ``[pr, pc]``
        physical tiles): each physical tile's column reduction (skipped for row tiles, where it is the row
        itself), then an Accum down the block's ``rb`` rows keeping its ``cb`` column positions; one block
        row ``[1, cb]`` of ``[1, pc]`` tiles."""
        where = f"Map '{node.name}'"
        t = node.t("in0").dtype
        pr, pc, rb, cb = self.phys_in(node, "in0", where)
        upd, init = COLUMN_REDUCE[f.name]
        float_sum = f.name == "col_sum" and not t.dtype.is_int
        if float_sum and (pr == 1 or (rb != 1 and pr != GROUP)):
            # (packed blocks of 4 rows: each block's sum is one group of the fixed order, added to a running sum)
            self._float_sum_refused(where, t, "rows")
        acc_dt = "fp32" if float_sum else _accum_dtype(t)
        keep = self._keeps_accum_type(node, acc_dt)
        tile_f = fn("col_sum", dtype="fp32") if float_sum else f
        if cb == 1 and (pr == 1 or self.is_counted(node, "in0")):
            # rows, or packed P-row blocks (each reduced first, its missing rows neutral): down the stream
            src = tiles_in if pr == 1 else self.g.map(tiles_in, tile_f, name=f"{node.name}_tiles")
            acc = self.g.accum(src, upd, fn(init, rows=1, cols=pc, dtype=acc_dt), rank=2,
                               name=node.name if keep else f"{node.name}_rows")
            return self._as_type(self.blocked(acc, node.name), node, keep)
        cols = self.g.map(tiles_in, tile_f, name=f"{node.name}_tiles") if pr != 1 else tiles_in
        # down the block's rb rows of pieces, keeping its cb column positions
        acc = self.g.accum(cols, upd, fn(init, rows=1, cols=pc, dtype=acc_dt), rank=1, keep=1,
                           name=f"{node.name}_rows")
        return self._as_type(self.g.reshape(acc, 0, cb, name=node.name), node, keep)

    def _row_reduce(self, node, tiles_in, f):
        """``row_max``/``row_sum`` of a logical ``[R, C]`` tile: each physical tile's row reduction
        (``[pr, 1]``), combined along the block row's ``cb`` tiles by an Accum; a block ``[rb, 1]``."""
        where = f"Map '{node.name}'"
        t = node.t("in0").dtype
        pr, _, _, cb = self.phys(t, where)
        if f.name == "row_sum" and not t.dtype.is_int and cb != 1:
            return self._float_row_sum(node, tiles_in, t, pr, where)
        pieces = self.g.map(tiles_in, f, name=node.name if cb == 1 else f"{node.name}_tiles")
        if cb == 1:
            return pieces
        upd, init = ROW_REDUCE[f.name]
        acc_dt = _accum_dtype(t)
        acc = self.g.accum(pieces, upd, fn(init, rows=pr, cols=1, dtype=acc_dt), rank=1,
                           name=f"{node.name}_cols")
        return self._as_type(self.g.reshape(acc, 0, 1, name=node.name), node,
                             self._keeps_accum_type(node, acc_dt))

    def _float_row_sum(self, node, tiles_in, t, pr, where):
        """A float ``row_sum`` along a block row of ``cb`` physical tiles: each tile's group sums
        (``row_group_sums``, ``[pr, P/4]`` fp32), added one after another to an fp32 running sum (Accum
        ``add_groups``) and rounded once to the node's format: the logical row's fixed-order sum bit for bit
        (:mod:`step_hdl.floats`), as a float matmul split over tiles is. Every tile must hold whole groups."""
        if self.P % GROUP:
            raise TilingError(f"{where}: a {t.dtype} sum over the columns of {t} spans several {self.P}x{self.P} "
                              f"physical tiles, whose {self.P} columns are not whole groups of {GROUP} terms of the "
                              f"fixed-order float sum (docs/floats.md); map it on a physical tile that is a "
                              f"multiple of {GROUP}, or give the row_sum at most {self.P} columns")
        groups = self.g.map(tiles_in, fn("row_group_sums"), name=f"{node.name}_groups")
        acc = self.g.accum(groups, "add_groups", fn("zeros", rows=pr, cols=1, dtype="fp32"), rank=1,
                           name=f"{node.name}_cols")
        keep = self._keeps_accum_type(node, "fp32")
        return self._as_type(self.g.reshape(acc, 0, 1, name=node.name), node, keep)

    def _float_sum_refused(self, where, t, what):
        """A float sum over several physical pieces one piece at a time (a sum down row tiles, along a
        block row or column) would not be the fixed-order sum of :mod:`step_hdl.floats` (groups of four
        terms, each added to a running fp32 sum): refused by name rather than computed otherwise."""
        raise TilingError(f"{where}: a {t.dtype} sum over the {what} of {t} spans several physical tiles; "
                          f"float sums are lowered only where each physical tile adds whole groups of four "
                          f"terms to the running sum (matmuls over P x P tiles) yet")

    def _keeps_accum_type(self, node, acc_dt) -> bool:
        """Whether ``node``'s result can stay in the accumulator's type: it is that type, or every consumer
        is a binary arithmetic Map (its result a function of the values alone) computing in that type
        anyway (softmax's ``s - col_max(s)``), so the values and the consumer's result are the same."""
        if node.out_types["out"].dtype.dtype.name == acc_dt:
            return True
        users = [self.src.nodes[c] for r, c, _ in self.src.edges() if r.node is node]
        return bool(users) and all(n.kind == "Map" and n.p("fn").name in ("add", "sub", "mul", "max", "div")
                                   and n.out_types["out"].dtype.dtype.name == acc_dt for n in users)

    def _as_type(self, stream, node, keep: bool):
        """A reduction accumulated in int32 back in its logical type unless ``keep`` (a max of int8/int16
        values: requantize by 0 is exact)."""
        if keep:
            return stream
        want = node.out_types["out"].dtype.dtype
        to = fn("requantize", shift=0, dtype=want.name) if want.is_int else fn("convert", dtype=want.name)
        return self.g.map(stream, to, name=f"{node.name}_as_{want.name}")

    def _outer_matmul(self, node, ins, f):
        """``aᵀ·b`` of ``[N, M]`` and ``[N, K]`` row tiles (contracting the dynamic ``N``): one outer
        product ``[1, M]ᵀ x [1, K]`` per row pair, accumulated."""
        where = f"Map '{node.name}'"
        if f.param("transpose_b"):
            raise TilingError(f"{where}: matmul with both transposes is not supported by hierarchical tiling")
        packed = self.is_counted(node, "in0") and self.is_counted(node, "in1")
        for p in ("in0", "in1"):
            pr, pc, _, cb = self.phys_in(node, p, f"{where} port '{p}'")
            if (pr != 1 and not packed) or cb != 1:
                raise TilingError(f"{where}: a transpose_a matmul of {node.t(p).dtype} (port '{p}') is "
                                  f"supported on row tiles or packed rows of one physical tile ({self.P} "
                                  f"columns) only yet")
        is_float = not node.t("in0").dtype.dtype.is_int
        if is_float and not packed:
            self._float_sum_refused(where, node.t("in0").dtype, "rows")
        # the first operand (loaded rows: V) is buffered whole: the second (e) is still being computed from
        # the same rows' partners (softmax over all of K), so unbuffered the shared row addresses deadlock
        early = self.g.streamify(self.g.bufferize(ins[0], 2, name=f"{node.name}_buf_a"), name=f"{node.name}_a")
        if not is_float:
            prod = self.g.map([early, ins[1]], f, name=f"{node.name}_outer")
            t = prod.type.dtype
            acc = self.g.accum(prod, "add", fn("zeros", rows=int(t.rows), cols=int(t.cols), dtype=t.dtype.name),
                               rank=2, name=node.name)
            return self.blocked(acc, node.name)
        # floats: each pair of P-row blocks gives the group sums of its P rows' products (the missing rows of
        # the last block count as zeros), added to an fp32 running sum and rounded once
        prod = self.g.map([early, ins[1]], fn("matmul", transpose_a=True, groups=True), name=f"{node.name}_outer")
        out = node.out_types["out"].dtype
        keep = out.dtype.name == "fp32"
        acc = self.g.accum(prod, "add_groups", fn("zeros", rows=int(out.rows), cols=int(out.cols), dtype="fp32"),
                           rank=2, name=node.name if keep else f"{node.name}_sum")
        acc = self.blocked(acc, node.name if keep else f"{node.name}_sum")
        return acc if keep else self.g.map(acc, fn("convert", dtype=out.dtype.name), name=node.name)

    def _row_matmul(self, node, ins, f):
        """``[N, K] x [K, M]`` with row tiles (or with ``P``-row blocks of packed rows, their count on each
        tile): each row's (block row's) ``K/P`` tiles are buffered and read once per output block; the
        ``[K, M]`` operand is buffered once and re-read for every row (block row)."""
        where = f"Map '{node.name}'"
        if f.param("transpose_b"):
            raise TilingError(f"{where}: a transposed matmul of row tiles is not supported yet")
        kb, nb = _blocks(node.t("in1").dtype, self.P, where)
        a, b = ins
        pre = node.name
        a_buf, a_rows = self.g.broadcast(a, 2, name=f"{pre}_split_a")
        rows = self.per_tile(a_rows, f"{pre}_rows", rank=1)      # one token per row
        a_rd = self.g.streamify(self.g.bufferize(a_buf, 1, name=f"{pre}_buf_a"), read_shape=[nb, kb],
                                read_stride=[0, 1], name=f"{pre}_read_a")
        b_rd = self.g.streamify(self.g.bufferize(b, 2, name=f"{pre}_buf_b"), ref=rows, read_shape=[nb, kb],
                                read_stride=[1, nb], name=f"{pre}_read_b")
        return self._k_runs(a_rd, b_rd, f, kb, pre)

    def _Accum(self, node):
        upd, init = node.p("update"), node.p("init")
        where = f"Accum '{node.name}'"
        if upd.name == "retile_row" and node.p("rank") == 1 and not node.p("keep"):
            # [..., n, rb, cb] of row tiles -> [..., n·rb, cb]: the rows already are the packed tile's blocks
            if self.phys(node.t("in").dtype, where)[0] != 1:
                raise TilingError(f"{where}: retile_row of {node.t('in').dtype} elements: only rows (tiles "
                                  f"of row tiles) can be packed by hierarchical tiling yet")
            counted = f"{node.name}.out" in self.counted
            pr = self.phys(node._state, where, counted)[0]
            rows = self.g.flatten(self.ref(node.inputs["in"]), 1, 2,
                                  name=node.name if pr == 1 else f"{node.name}_rows")
            if pr != 1:
                # [..., R, cb] of rows -> [..., ceil(R/P), cb] of P x P tiles: each column block's P rows
                # packed (a partial last block of R mod P rows carries its count)
                blocks = self.g.reshape(rows, 1, self.P, partial=counted, name=f"{node.name}_blocks")
                rows = self.g.accum(self.transposed(blocks, node.name, "cols"), upd,
                                    fn("zeros", rows=0, cols=self.P, dtype=node._state.dtype.name), rank=1,
                                    name=node.name)
            self.out(node, "out", rows)
            return
        if node.p("keep") or upd.name not in ("add", "max") or init.name not in ("zeros", "lowest"):
            raise TilingError(f"{where}: only add/max accumulations from zeros/lowest and retile_row are "
                              f"supported by hierarchical tiling yet")
        pr, pc, _, _ = self.phys(node._state, where, self.is_counted(node))
        if (pr, pc) != self.phys_in(node, "in", where)[:2]:
            raise TilingError(f"{where}: an element {node.t('in').dtype} broadcast into the state "
                              f"{node._state} is not supported by hierarchical tiling yet")
        new_init = fn(init.name, rows=pr, cols=pc, dtype=init.param("dtype"))
        self.out(node, "out", self.g.accum(self.ref(node.inputs["in"]), upd, new_init, rank=node.p("rank"),
                                           keep=2, name=node.name))

    def _Scan(self, node):
        upd, init = node.p("update"), node.p("init")
        where = f"Scan '{node.name}'"
        if upd.name not in ("add", "max") or init.name not in ("zeros", "lowest"):
            raise TilingError(f"{where}: only add/max scans from zeros/lowest are supported by hierarchical "
                              f"tiling yet")
        pr, pc, rb, cb = self.phys(node._state, where, self.is_counted(node))
        if (pr, pc, rb, cb) != self.phys_in(node, "in", where):
            raise TilingError(f"{where}: an element {node.t('in').dtype} broadcast into the state "
                              f"{node._state} is not supported by hierarchical tiling yet")
        if (rb, cb) != (1, 1):
            # each of the rb x cb physical tiles would need its own running state (the Scan unit keeps one)
            raise TilingError(f"{where}: a scan of {node.t('in').dtype} tiles ({rb}x{cb} physical {self.P}x"
                              f"{self.P} tiles each) is not supported yet; scans of one physical tile are")
        # [..., n, 1, 1]: the block's two dimensions of 1 end in stops below the scan's rank, which pass through
        new_init = fn(init.name, rows=pr, cols=pc, dtype=init.param("dtype"))
        self.out(node, "out", self.g.scan(self.ref(node.inputs["in"]), upd, new_init, rank=node.p("rank") + 2,
                                          name=node.name))


def tile_physical(graph: Graph, P: int, name: str | None = None) -> Graph:
    """Lower ``graph`` to ``P x P`` physical tiles (see the module docstring)."""
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise TilingError(f"physical tile size must be an integer >= 1, got {P!r}")
    return _Lowering(graph, P, name or f"{graph.name}_p{P}").run()
