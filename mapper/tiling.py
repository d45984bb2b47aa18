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
  pattern ``[m/P, n/P, k/P]``), multiplies physical tiles and accumulates
  over ``k/P`` (Accum);
* element-wise functions apply tile by tile;
* an Accum over logical tiles keeps one physical-tile state per position
  (Accum with ``keep=2``).

The lowered graph computes the same result as the original (integer types
bit-exactly); ``tests/test_tiling.py`` checks that with the interpreter.
Operators and functions not listed raise :class:`TilingError` naming the node.
"""

from __future__ import annotations

import sympy

from step_hdl.errors import StepError
from step_hdl.functions import fn
from step_hdl.graph import Graph
from step_hdl.types import Tile, as_dim

ELEMENTWISE = {"add", "sub", "mul", "max", "div", "silu", "exp", "requantize"}


class TilingError(StepError):
    """The graph cannot be lowered to physical tiles (as it stands)."""


def _static(d, what, where):
    d = as_dim(d)
    if not d.is_Integer:
        raise TilingError(f"{where}: {what} {d} must be static to tile it physically")
    return int(d)


def _blocks(tile: Tile, P: int, where: str) -> tuple[int, int]:
    r = _static(tile.rows, "tile rows", where)
    c = _static(tile.cols, "tile cols", where)
    if r % P or c % P:
        raise TilingError(f"{where}: logical tile [{r}, {c}] is not a multiple of the physical tile {P}x{P} "
                          f"(partial physical tiles are not supported yet)")
    return r // P, c // P


class _Lowering:
    def __init__(self, g: Graph, P: int, name: str):
        self.src, self.P = g, P
        self.g = Graph(name)
        self.refs: dict[str, object] = {}

    def ref(self, r):
        return self.refs[r.label]

    def run(self) -> Graph:
        for spec in self.src.tensors.values():
            self.g.tensor(spec.name, spec.rows, spec.cols, spec.dtype)
        for node in self.src.topological_order():
            method = getattr(self, f"_{node.kind}", None)
            if method is None:
                raise TilingError(f"{node.kind} '{node.name}': hierarchical tiling does not support this "
                                  f"operator yet")
            method(node)
        return self.g

    def out(self, node, port, new):
        self.refs[f"{node.name}.{port}"] = new

    # ---------------------------------------------------------------- off-chip
    def _grid_strides(self, node, strides, counts, base):
        where = f"{node.kind} '{node.name}'"
        spec = self.src.tensors[node.p("tensor")]
        tile = node.tile_type()
        rb, cb = _blocks(tile, self.P, where)
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
        return out, bq * rb * p_cols + br * cb, rb, cb, p_cols

    def _LinearOffChipLoad(self, node):
        ref = node.inputs.get("ref")
        lead = list(ref.type.shape) if ref is not None else []
        counts = lead + list(node.p("out_shape"))
        strides, base, rb, cb, p_cols = self._grid_strides(node, node.p("stride"), counts, node.p("base"))
        new = self.g.load(node.p("tensor"), tile=(self.P, self.P), out_shape=list(node.p("out_shape")) + [rb, cb],
                          stride=strides + [p_cols, 1], ref=self.ref(ref) if ref is not None else None,
                          base=base, name=node.name)
        self.out(node, "out", new)

    def _LinearOffChipStore(self, node):
        where = f"{node.kind} '{node.name}'"
        spec = self.src.tensors[node.p("tensor")]
        tile = node.tile_type()
        rb, cb = _blocks(tile, self.P, where)
        if (rb, cb) != (1, 1) and sympy.simplify(as_dim(spec.cols) - tile.cols) != 0:
            raise TilingError(f"{where}: stores of tiles narrower than the tensor ({tile} into "
                              f"{spec.cols} columns) are not supported yet")
        self.g.store(self.ref(node.inputs["in"]), node.p("tensor"), tile=(self.P, self.P),
                     base=node.p("base") * rb * cb, name=node.name)

    # ---------------------------------------------------------------- plumbing
    def _Broadcast(self, node):
        outs = self.g.broadcast(self.ref(node.inputs["in"]), node.p("n"), name=node.name)
        for i, o in enumerate(outs):
            self.out(node, f"out{i}", o)

    def _Output(self, node):
        self.g.output(self.ref(node.inputs["in"]), name=node.name)

    # ---------------------------------------------------------------- compute
    def _Map(self, node):
        f = node.p("fn")
        where = f"Map '{node.name}'"
        ins = [self.ref(node.inputs[p]) for p in node.input_ports()]
        if f.name == "matmul":
            self.out(node, "out", self._matmul(node, ins, f))
            return
        if f.name not in ELEMENTWISE:
            raise TilingError(f"{where}: function {f.name!r} is not supported by hierarchical tiling yet")
        shapes = {(node.t(p).dtype.rows, node.t(p).dtype.cols) for p in node.input_ports()}
        if len(shapes) != 1:
            raise TilingError(f"{where}: broadcasting operands {sorted(map(str, shapes))} are not supported "
                              f"by hierarchical tiling yet")
        _blocks(node.t("in0").dtype, self.P, where)
        self.out(node, "out", self.g.map(ins, f, name=node.name))

    def _matmul(self, node, ins, f):
        where = f"Map '{node.name}'"
        a_t, b_t = node.t("in0").dtype, node.t("in1").dtype
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
        prod = self.g.map([a_rd, b_rd], f, name=f"{pre}_tiles")
        acc_t = prod.type.dtype.dtype.name
        return self.g.accum(prod, "add", fn("zeros", rows=self.P, cols=self.P, dtype=acc_t), rank=1, name=pre)

    def _Accum(self, node):
        upd, init = node.p("update"), node.p("init")
        where = f"Accum '{node.name}'"
        if node.p("keep") or upd.name not in ("add", "max") or init.name not in ("zeros", "lowest"):
            raise TilingError(f"{where}: only add/max accumulations from zeros/lowest are supported by "
                              f"hierarchical tiling yet")
        _blocks(node._state, self.P, where)
        new_init = fn(init.name, rows=self.P, cols=self.P, dtype=init.param("dtype"))
        self.out(node, "out", self.g.accum(self.ref(node.inputs["in"]), upd, new_init, rank=node.p("rank"),
                                           keep=2, name=node.name))


def tile_physical(graph: Graph, P: int, name: str | None = None) -> Graph:
    """Lower ``graph`` to ``P x P`` physical tiles (see the module docstring)."""
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise TilingError(f"physical tile size must be an integer >= 1, got {P!r}")
    return _Lowering(graph, P, name or f"{graph.name}_p{P}").run()
