"""Fabric description: what hardware a spatial dataflow fabric has.

A :class:`Fabric` is a frozen, validated dataclass, serializable to JSON:
the physical tile, element and accumulator types, how many units of each
operator kind it has (with the Map units' function sets), FIFO depth, SRAM per
on-chip memory unit, and the number of memory ports. :func:`fabric_for`
sizes a fabric to exactly fit a lowered graph; :func:`step_hdl.mapper.binding.bind`
checks that a graph fits a given fabric and says what is missing if not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from step_hdl.errors import StepError, read_text
from step_hdl.types import DTYPES, concrete, dyn, substitute

from .fusion import counted_kinds


class FabricError(StepError):
    """A fabric description is invalid, or a graph does not fit it."""


@dataclass(frozen=True)
class Fabric:
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

    tile: int = 16
    dtype: str = "int16"
    acc_dtype: str = "int32"
    units: dict = field(default_factory=dict)
    map_functions: tuple = ("matmul", "add", "mul", "silu", "requantize")
    fifo_depth: int = 2
    sram_bytes: int = 64 * 1024
    memory_ports: int = 4
    max_rank: int = 4
    mem_inflight: int = 64
    matmul_rows: int = 0
    accum_positions: int = 64
    max_fifo_depth: int = 64
    burst_bytes: int = 64
    pools: bool = True
    pool_pages: int = 0
    watchdog: int = 4096
    pipeline: bool = False

    def __post_init__(self):
        object.__setattr__(self, "units", dict(sorted(self.units.items())))
        object.__setattr__(self, "map_functions", tuple(self.map_functions))
        for name in ("tile", "fifo_depth", "sram_bytes", "memory_ports", "max_rank", "mem_inflight",
                     "accum_positions", "max_fifo_depth", "watchdog"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise FabricError(f"fabric: {name} must be an integer >= 1, got {v!r}")
        for name in ("dtype", "acc_dtype"):
            if getattr(self, name) not in DTYPES:
                raise FabricError(f"fabric: {name} {getattr(self, name)!r} is not one of {sorted(DTYPES)}")
        for kind, n in self.units.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise FabricError(f"fabric: unit count for {kind!r} must be an integer >= 0, got {n!r}")
        if not isinstance(self.pipeline, bool):
            raise FabricError(f"fabric: pipeline must be true or false, got {self.pipeline!r}")
        if not isinstance(self.pools, bool):
            raise FabricError(f"fabric: pools must be true or false, got {self.pools!r}")
        if isinstance(self.pool_pages, bool) or not isinstance(self.pool_pages, int) or self.pool_pages < 0:
            raise FabricError(f"fabric: pool_pages must be an integer >= 0 (0: each pool's bound), got "
                              f"{self.pool_pages!r}")
        if isinstance(self.burst_bytes, bool) or not isinstance(self.burst_bytes, int) or self.burst_bytes < 0 \
                or self.burst_bytes & (self.burst_bytes - 1):
            raise FabricError(f"fabric: burst_bytes must be 0 or a power of two, got {self.burst_bytes!r}")
        if isinstance(self.matmul_rows, bool) or not isinstance(self.matmul_rows, int) or self.matmul_rows < 0 \
                or (self.matmul_rows and self.tile % self.matmul_rows):
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

    def to_json(self) -> dict:
        return {"tile": self.tile, "dtype": self.dtype, "acc_dtype": self.acc_dtype, "units": dict(self.units),
                "map_functions": list(self.map_functions), "fifo_depth": self.fifo_depth,
                "sram_bytes": self.sram_bytes, "memory_ports": self.memory_ports, "max_rank": self.max_rank,
                "mem_inflight": self.mem_inflight, "matmul_rows": self.matmul_rows,
                "accum_positions": self.accum_positions, "max_fifo_depth": self.max_fifo_depth,
                "burst_bytes": self.burst_bytes, "pools": self.pools, "pool_pages": self.pool_pages,
                # (only when not the default: the Verilog cache keys of existing designs stay as they were)
                **({"watchdog": self.watchdog} if self.watchdog != 4096 else {}),
                **({"pipeline": True} if self.pipeline else {})}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, obj) -> "Fabric":
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise FabricError(f"fabric JSON is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise FabricError("fabric JSON must be an object")
        known = set(cls.__dataclass_fields__)
        unknown = set(obj) - known
        if unknown:
            raise FabricError(f"fabric: unknown field(s) {sorted(unknown)}; fields are {sorted(known)}")
        return cls(**obj)

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
              max_rank=max([Fabric.max_rank] + [t.rank for n in graph.nodes.values() for t in n.out_types.values()]))
    kw.update(overrides)
    return Fabric(**kw)


def merge(fabrics) -> Fabric:
    """One fabric that fits every graph the given fabrics fit (a sweep's shared build)."""
    fabrics = list(fabrics)
    first = fabrics[0]
    for f in fabrics[1:]:
        if (f.tile, f.dtype, f.acc_dtype) != (first.tile, first.dtype, first.acc_dtype):
            raise FabricError("cannot merge fabrics with different tiles or element types")
    units: dict = {}
    for f in fabrics:
        for k, n in f.units.items():
            units[k] = max(units.get(k, 0), n)
    fns = tuple(sorted({x for f in fabrics for x in f.map_functions}))
    big = {k: max(getattr(f, k) for f in fabrics) for k in ("fifo_depth", "sram_bytes", "memory_ports", "max_rank",
                                                           "mem_inflight", "accum_positions", "max_fifo_depth",
                                                           "burst_bytes", "pool_pages", "watchdog")}
    return Fabric(tile=first.tile, dtype=first.dtype, acc_dtype=first.acc_dtype, units=units, map_functions=fns,
                  matmul_rows=first.matmul_rows, pools=all(f.pools for f in fabrics), **big)
