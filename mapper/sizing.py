"""Sizing a fabric to a lowered graph: the units, SRAM, Accum positions and pool pages it needs.

:func:`fabric_for` gives the smallest :class:`~step_hdl.mapper.fabric.Fabric` that fits a graph;
:class:`FitFabric` asks for one (a physical tile and the fields to keep), which is what a run on "a fabric
sized to fit" means everywhere (the API, the command line, sweeps); the buffer helpers say what one on-chip
buffer holds (the adapters size the buffer units with them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from step_hdl.types import DTYPES, dyn
from step_hdl.units.params import FrozenDict

from .fabric import DEFAULT_TILE, Fabric, FabricError, static_size
from .fusion import counted_kinds
from .pools import tile_pools


def needed_units(graph) -> dict[str, int]:
    """Units of each kind a (lowered) graph needs: one per node, but one per fused chain
    (:mod:`step_hdl.mapper.fusion`: a buffer's Flatten and a matmul's runs are in its unit)."""
    return counted_kinds(graph)


def _per_buffer(dim, bindings):
    """A buffer dimension with a ragged total ``X_total`` (the lengths of a ragged dimension over its
    outer elements, e.g. the KV rows of every item of a region) bounded by one element's ``X_max``: a
    buffer holds one element's chunk. The bindings give ``X_max`` (the longest chunk of the input)."""
    import sympy
    names = {str(k) for k in (bindings or {})}
    d = sympy.sympify(dim)
    return d.subs({s: dyn(s.name[:-len("_total")] + "_max") for s in d.free_symbols
                   if s.name.endswith("_total") and s.name[:-len("_total")] + "_max" in names})


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def buffer_entries(node, graph, bindings=None) -> int:
    """Entries (tiles, and inner stops for non-affine reads) Bufferize ``node`` holds."""
    shape = [_per_buffer(d, bindings) for d in node.out_types["out"].dtype.shape]
    n = static_size(sympy_prod(shape), bindings, f"Bufferize '{node.name}' buffer size")
    users = [graph.nodes[c] for r, c, _ in graph.edges() if r.node is node]
    if not any(u.params.get("read_shape") for u in users):
        n += static_size(sympy_prod(shape[:-1]), bindings, f"Bufferize '{node.name}' buffer rows")
    return n


def buffer_tile_bytes(node) -> int:
    """Bytes of one entry of Bufferize ``node``: a tile of the stream it buffers (its own element type, which
    need not be the fabric's: an int32 result buffered on an int16 fabric takes twice the bytes)."""
    t = node.t("in").dtype
    return int(t.rows) * int(t.cols) * t.dtype.bytes


def sram_bytes_needed(graph, bindings=None, pooled=()) -> int:
    """SRAM per on-chip buffer for the largest Bufferize not in ``pooled`` (names of buffers that a tile pool
    holds): two banks of a power-of-two number of entries, each entry a tile of the buffered stream's type (0
    if there is none)."""
    need = 0
    for node in graph.nodes.values():
        if node.kind == "Bufferize" and node.name not in pooled:
            need = max(need, 2 * _pow2(buffer_entries(node, graph, bindings)) * buffer_tile_bytes(node))
    return need


def keep_positions(graph, bindings=None) -> int:
    """Position states the largest ``Accum(keep=...)`` needs (0 if none)."""
    need = 0
    for node in graph.nodes.values():
        keep = node.params.get("keep") if node.kind == "Accum" else 0
        if keep:
            shape = node.t("in").shape
            need = max(need, static_size(sympy_prod(shape[len(shape) - keep:]), bindings,
                                     f"Accum '{node.name}' positions"))
    return need


def sympy_prod(dims):
    import sympy
    return sympy.Mul(*dims) if dims else sympy.Integer(1)


def fabric_for(graph, tile: int, dtype: str = "int16", bindings=None, **overrides) -> Fabric:
    """The smallest fabric that fits ``graph`` (already lowered to ``tile x tile``).

    ``max_rank`` is the highest rank of any stream (at least the default, 4). On-chip buffers are sized (power-of-two entries, double-buffered) for the
    largest Bufferize outside the tile pools, each tile pool (``pools``, the
    default) for its bound (:mod:`step_hdl.mapper.pools`), and Accum position
    memories for the largest ``keep``.
    """
    fns = sorted({n.p("fn").name for n in graph.nodes.values() if n.kind == "Map"})
    tile_bytes = tile * tile * DTYPES[dtype].bytes
    pools = tile_pools(graph) if overrides.get("pools", True) else []
    pooled = {b for p in pools for b in p.buffers}
    kw = dict(tile=tile, dtype=dtype, units=needed_units(graph), map_functions=tuple(fns) or ("add",),
              sram_bytes=max(2 * tile_bytes, sram_bytes_needed(graph, bindings, pooled)),
              accum_positions=_pow2(max(1, keep_positions(graph, bindings))),
              pool_pages=max([p.bound for p in pools] or [0]),
              max_rank=max([Fabric().max_rank] + [t.rank for n in graph.nodes.values() for t in n.out_types.values()]))
    kw.update(overrides)
    return Fabric(**kw)


@dataclass(frozen=True)
class FitFabric:
    """A fabric sized to each program it runs: the smallest that fits (:func:`fabric_for`) on ``tile x tile``
    physical tiles of ``dtype`` (``None``: the program's element type), with ``fields`` (any
    :class:`~step_hdl.mapper.fabric.Fabric` fields: ``pipeline``, ``mem_inflight``, or a sized one such as
    ``sram_bytes``) given rather than sized."""

    tile: int = DEFAULT_TILE
    dtype: str | None = None
    fields: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.tile, bool) or not isinstance(self.tile, int) or self.tile < 1:
            raise FabricError(f"fabric: tile must be an integer >= 1, got {self.tile!r}")
        known = {f.name for f in dataclasses.fields(Fabric)} - {"tile", "dtype"}
        unknown = sorted(set(self.fields) - known)
        if unknown:
            raise FabricError(f"fabric: unknown field(s) {unknown}; fields are {sorted(known | {'tile', 'dtype'})}")
        object.__setattr__(self, "fields", FrozenDict(sorted(self.fields.items())))

    def with_fields(self, **fields) -> "FitFabric":
        """This request with ``fields`` given too (``pipeline=True``)."""
        return FitFabric(self.tile, self.dtype, {**self.fields, **fields})

    def size(self, lowered, dtype: str, bindings=None) -> Fabric:
        """The fabric for ``lowered`` (a graph already lowered to ``tile``), ``dtype`` when this request has
        none."""
        return fabric_for(lowered, self.tile, self.dtype or dtype, bindings, **self.fields)
