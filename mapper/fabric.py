"""Fabric description: what hardware a spatial dataflow fabric has.

A :class:`Fabric` is a frozen, validated dataclass, serializable to JSON:
the physical tile, element and accumulator types, how many units of each
operator kind it has (with the Map units' function sets), FIFO depth, SRAM per
on-chip memory unit, and the number of memory ports. :func:`fabric_for`
sizes a fabric to exactly fit a lowered graph; :func:`step_hdl.mapper.binding.bind`
checks that a graph fits a given fabric and says what is missing if not.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from step_hdl.errors import StepError, read_text
from step_hdl.types import DTYPES, concrete, dyn, substitute
from step_hdl.units.params import Params, param

from .fusion import counted_kinds


class FabricError(StepError):
    """A fabric description is invalid, or a graph does not fit it."""


#: the physical tile side when none is given, everywhere (API, command line, model, sweeps): small tiles
#: build and simulate fast; the paper's 16x16 studies say 16 explicitly
DEFAULT_TILE = 4


@dataclass(frozen=True)
class Fabric(Params):
    """Structural description of a fabric.

    Attributes
    ----------
    tile : int
        Physical tile side (tiles are ``tile x tile``).
    dtype, acc_dtype : str
        Operand and accumulator element types.
    units : dict
        Operator kind -> number of units (``{"Map": 6, "Accum": 3, ...}``).
    map_functions : tuple of str
        Functions every Map unit supports (its function-select register picks one).
    fifo_depth : int
        Default depth of the FIFO on every edge.
    sram_bytes : int
        SRAM per on-chip memory unit (Bufferize/Streamify pair).
    memory_ports : int
        Memory ports of the fabric (off-chip units are arbitrated onto them).
    max_rank : int
        Largest stream rank the units handle.
    mem_inflight : int
        Memory requests each off-chip unit keeps in flight. A credit comes back
        a round trip after its request (the DRAM's ``latency + 2``, plus 2 in
        the unit), so one unit streams ``min(1, mem_inflight / round trip)``
        physical tiles per cycle: 64 gives 0.94 at the paper presets' latency of
        64 (a round trip of 68 cycles), and in the RTL runs measured no load
        faster with 128; 32 capped every load at 0.47 tiles per cycle.
    matmul_rows : int
        Output rows a matmul unit computes per cycle; 0 means all (II 1 per tile).
    accum_positions : int
        Position states of an Accum with ``keep`` (tiles of on-chip state).
    max_fifo_depth : int
        Cap on an edge FIFO; a reconvergent fan-out whose safe depth is larger
        gets this depth and relies on balanced paths (a deadlock is reported
        by the simulation's watchdog otherwise).
    burst_bytes : int
        The memory's block (the DRAM presets' ``request_bytes``, 64): linear
        loads and stores move the consecutive tiles of one aligned block in one
        burst request (``units.offchip``); 0: a request per tile.
    pools : bool
        Buffers of dynamically sized tiles that one routing decision fills share
        a tile pool (:mod:`step_hdl.mapper.pools`); False: each has an SRAM of its own.
    pool_pages : int
        Pages of each tile pool; 0: each pool has the pages its bound says
        (:func:`fabric_for` writes the largest bound here).
    watchdog : int
        Cycles with no token or memory transfer anywhere after which a running
        fabric raises ``hung`` (the simulation then reports a deadlock naming
        the channels that hold tokens).
    pipeline : bool
        Pipeline registers inside the compute units' deep functions
        (:mod:`step_hdl.units.pipeline`): the integer matmul's operands,
        products (and in the MatMul unit its tile sums), SiLU's and exp's
        steps. Each stage adds a cycle of latency at the same II (the model
        counts it); ``docs/fpga-units.md`` has the clock it buys. False: every
        function is combinational in front of its unit's output register.
    """

    error = FabricError
    field_word = "field"

    tile: int = param(DEFAULT_TILE, minimum=1)
    dtype: str = "int16"
    acc_dtype: str = "int32"
    units: dict = param(factory=dict, merge="max_per_key")
    map_functions: tuple = param(("matmul", "add", "mul", "silu", "requantize"), merge="union")
    fifo_depth: int = param(2, minimum=1, merge="max")
    sram_bytes: int = param(64 * 1024, minimum=1, merge="max")
    memory_ports: int = param(4, minimum=1, merge="max")
    max_rank: int = param(4, minimum=1, merge="max")
    mem_inflight: int = param(64, minimum=1, merge="max")
    matmul_rows: int = param(0, minimum=0)
    accum_positions: int = param(64, minimum=1, merge="max")
    max_fifo_depth: int = param(64, minimum=1, merge="max")
    burst_bytes: int = param(64, minimum=0, merge="max")
    pools: bool = param(True, flag=True, merge="all")
    pool_pages: int = param(0, merge="max")
    watchdog: int = param(4096, minimum=1, merge="max")
    pipeline: bool = param(False, flag=True)

    @property
    def owner(self) -> str:
        return "fabric"

    @classmethod
    def _unknown_fields(cls, unknown: list, names: list) -> str:
        return f"fabric: unknown field(s) {unknown}; fields are {names}"

    def validate(self):
        for name in ("dtype", "acc_dtype"):
            if getattr(self, name) not in DTYPES:
                raise FabricError(f"fabric: {name} {getattr(self, name)!r} is not one of {sorted(DTYPES)}")
        for kind, n in self.units.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise FabricError(f"fabric: unit count for {kind!r} must be an integer >= 0, got {n!r}")
        if isinstance(self.pool_pages, bool) or not isinstance(self.pool_pages, int) or self.pool_pages < 0:
            raise FabricError(f"fabric: pool_pages must be an integer >= 0 (0: each pool's bound), got "
                              f"{self.pool_pages!r}")
        if self.burst_bytes & (self.burst_bytes - 1):
            raise FabricError(f"fabric: burst_bytes must be 0 or a power of two, got {self.burst_bytes!r}")
        if self.matmul_rows and self.tile % self.matmul_rows:
            raise FabricError(f"fabric: matmul_rows must be 0 (all) or divide the tile {self.tile}, "
                              f"got {self.matmul_rows!r}")
        from step_hdl.functions import FUNCTIONS
        for f in self.map_functions:
            if f not in FUNCTIONS:
                raise FabricError(f"fabric: unknown Map function {f!r}; known: {', '.join(sorted(FUNCTIONS))}")
        tile_bytes = self.tile * self.tile * DTYPES[self.dtype].bytes
        if self.sram_bytes < 2 * tile_bytes:
            raise FabricError(f"fabric: sram_bytes {self.sram_bytes} cannot double-buffer one "
                              f"{self.tile}x{self.tile} {self.dtype} tile ({tile_bytes} bytes)")

    @classmethod
    def from_json(cls, obj) -> "Fabric":
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise FabricError(f"fabric JSON is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise FabricError("fabric JSON must be an object")
        return super().from_json(obj)

    def replace(self, **changes) -> "Fabric":
        """This fabric with ``changes`` to its fields (checked like any fabric)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(cls, path) -> "Fabric":
        text = read_text(path, "fabric file", FabricError)
        try:
            return cls.from_json(text)
        except FabricError as exc:
            raise FabricError(f"fabric file {path}: {exc}") from None


def needed_units(graph) -> dict[str, int]:
    """Units of each kind a (lowered) graph needs: one per node, but one per fused chain
    (:mod:`step_hdl.mapper.fusion`: a buffer's Flatten and a matmul's runs are in its unit)."""
    return counted_kinds(graph)


def static_size(expr, bindings, what) -> int:
    """``expr``'s value under ``bindings`` (:func:`step_hdl.types.concrete`), or a :class:`FabricError`
    naming ``what``."""
    v = concrete(expr, bindings)
    if v is None:
        raise FabricError(f"{what} is {substitute(expr, bindings)}, not a static size; pass bindings for the "
                          f"dynamic sizes")
    return v


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
    from .pools import tile_pools
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


def merge(fabrics) -> Fabric:
    """One fabric that fits every graph the given fabrics fit (a sweep's shared build): each field by its
    merge rule (:meth:`~step_hdl.units.params.Params.merge`: the largest size, every function, the same tile,
    element types and ``pipeline``)."""
    return Fabric.merge(fabrics)
