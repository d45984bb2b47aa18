"""What a mapped program's hardware is: the :class:`Design` (structural) and the :class:`Program` (what one
program writes into it), with the configuration address format.

A design depends only on structural parameters, so a tile-size sweep whose
lowered graphs have the same structure shares one design (one Verilog build);
:meth:`Design.key` hashes it. :func:`built_units` builds a design's units once
(the plan, the top level and the configuration report share them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from amaranth.hdl import unsigned
from amaranth.lib import data

from step_hdl.types import dtype as make_dtype

from .adapters import unit_class
from .fabric import Fabric, FabricError
from step_hdl.units.base import not_elaborated

#: top-level configuration port: 8 register address bits below the unit index
#: address bits of a top-level configuration write: 16 bits of unit index (a fabric of thousands of units)
#: above the 8 register bits
TOP_CFG_ADDR_BITS = 24
TOP_CFG_LAYOUT = data.StructLayout({"addr": unsigned(TOP_CFG_ADDR_BITS), "data": unsigned(32)})
COUNTER_BITS = 32
#: status outputs of a unit class that the counter read-back reports as ``<unit>.<output>`` (sticky flags)
STATUS = {"OnChipBuffer": ("overflow",)}
#: what the read-back reports of a tile pool, in order, and what each is (:meth:`Design.counters`): ``peak``
#: (most pages in use), ``starved`` (a request found no free page), ``waits`` (cycles a request was not granted)
POOL_COUNTERS = {"peak": "value", "starved": "value", "waits": "count"}


@dataclass(frozen=True)
class UnitSpec:
    """One unit instance: its class in :mod:`step_hdl.units`, structural parameters, and the nodes it runs."""

    name: str
    cls: str
    params: object
    nodes: tuple

    def to_json(self) -> dict:
        p = self.params.to_json() if hasattr(self.params, "to_json") else dict(self.params)
        return {"name": self.name, "cls": self.cls, "params": p, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class EdgeSpec:
    """A FIFO of ``depth`` tokens from ``src``'s hardware port ``src_port`` to ``dst``'s ``dst_port``."""

    label: str
    src: str
    src_port: str
    dst: str
    dst_port: str
    depth: int
    width: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SinkSpec:
    """An Output node: ``src``'s port ``src_port`` is always ready; its done token counts towards ``done``."""

    name: str
    src: str
    src_port: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PoolSpec:
    """A tile pool (:class:`~step_hdl.units.pool.TilePool`): its parameters and the on-chip buffer units that
    share it, client ``k`` first."""

    name: str
    params: object
    clients: tuple

    def to_json(self) -> dict:
        return {"name": self.name, "params": self.params.to_json(), "clients": list(self.clients)}


@dataclass(frozen=True)
class Design:
    """Everything structural about a mapped program's hardware (hashable, JSON)."""

    name: str
    fabric: Fabric
    units: tuple
    edges: tuple
    watchdog: int = 4096
    sinks: tuple = ()
    pools: tuple = ()

    def to_json(self) -> dict:
        out = {"name": self.name, "fabric": self.fabric.to_json(), "units": [u.to_json() for u in self.units],
               "edges": [e.to_json() for e in self.edges], "watchdog": self.watchdog}
        if self.sinks:      # (only when present: the cache keys of sink-less designs stay as they were)
            out["sinks"] = [s.to_json() for s in self.sinks]
        if self.pools:
            out["pools"] = [p.to_json() for p in self.pools]
        return out

    def key(self) -> str:
        """Hash of the structural parameters (the Verilog cache key)."""
        text = json.dumps({**self.to_json(), "name": ""}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def mem_units(self) -> list[str]:
        return [u.name for u in self.units if unit_class(u.cls).memory_port]

    def sample_names(self) -> list[str]:
        """The counters the harness's sampler records over a run (``FabricTop(samples=N)``): the cycles, the
        off-chip bytes and each unit's active and stalled cycles."""
        return ["cycles", "bytes_read", "bytes_written"] + [f"{u.name}.{c}" for u in self.units
                                                            for c in ("active", "stalled")]

    def counters(self) -> list[tuple[str, str]]:
        """Every counter of the read-back in order, with what it is (``mapper.instruments``): ``count`` (an
        event each cycle), ``add`` (bytes), ``stamp`` (the cycle after a unit last moved) or ``value`` (shown
        as it is: the watchdog's idle count, status flags, pool levels)."""
        out = [("cycles", "count"), ("bytes_read", "add"), ("bytes_written", "add"), ("idle", "value")]
        for u in self.units:
            out += [(f"{u.name}.active", "count"), (f"{u.name}.stalled", "count"), (f"{u.name}.finish", "stamp")]
            out += [(f"{u.name}.{s}", "value") for s in STATUS.get(u.cls, ())]
        for e in self.edges:
            out += [(f"{e.label}.produced", "count"), (f"{e.label}.consumed", "count")]
        for p in self.pools:
            out += [(f"{p.name}.{c}", kind) for c, kind in POOL_COUNTERS.items()]
        return out

    def counter_names(self) -> list[str]:
        return [name for name, _ in self.counters()]


@dataclass
class Program:
    """What one program writes into a :class:`Design`: configuration and memory layout.

    ``config``: packed top-level configuration writes (``addr | data << 24``);
    ``tensors``: name -> (byte address, rows, cols, dtype) in the off-chip image,
    tile by tile (:mod:`step_hdl.units.memport`) with the tensor's physical tile
    ``tiles[name]`` (``P x P``, or ``[1, P]`` rows / ``[1, 1]`` scalars for
    row-tiled tensors, several of which share one memory word); every tensor
    starts on a memory word (:attr:`word_bytes`, the widest port's tile);
    ``pools``: per tile pool, :meth:`~step_hdl.mapper.pools.PoolPlan.report`.
    """

    design: Design
    config: list
    tensors: dict
    bindings: dict
    notes: list = field(default_factory=list)
    tiles: dict = field(default_factory=dict)
    word_bytes: int = 0
    pools: list = field(default_factory=list)     # per tile pool: its bound, pages and this program's need
    #: the edges built below their safe depth (a reconvergent fan-out capped at ``max_fifo_depth``): label ->
    #: (depth built, the safe depth or None where unbounded); a deadlock names them
    capped: dict = field(default_factory=dict)


def buffer_bytes(design: Design) -> dict:
    """Bytes of tile storage in the on-chip buffers (stop side bits not counted): ``private``, the
    SRAMs of the buffers that have their own (two banks each), ``pools``, the tile pools' pages, and ``total``."""
    units = {u.name: u for u in design.units}
    private = sum(u.params.sram_bytes for u in design.units
                  if hasattr(u.params, "sram_bytes") and not getattr(u.params, "pooled", False))
    pools = 0
    for p in design.pools:
        b = units[p.clients[0]].params
        pools += p.params.pages * p.params.page_entries * b.rows * b.cols * b.dt.bits // 8
    return {"private": private, "pools": pools, "total": private + pools}


def tile_bytes(fabric: Fabric) -> int:
    return fabric.tile * fabric.tile * make_dtype(fabric.dtype).bytes


def pack_config(unit_index: int, word: int) -> int:
    """A unit's packed configuration write (``addr | data << 8``) as a top-level write
    (``addr | data << TOP_CFG_ADDR_BITS``)."""
    if not 0 <= unit_index < 1 << (TOP_CFG_ADDR_BITS - 8):
        raise FabricError(f"unit index {unit_index} does not fit the {TOP_CFG_ADDR_BITS - 8}-bit unit field of "
                          f"the configuration address")
    reg, value = word & 0xFF, word >> 8
    return (unit_index << 8 | reg) | (value << TOP_CFG_ADDR_BITS)


def make_unit(spec: UnitSpec):
    """A new Amaranth unit of a :class:`UnitSpec`."""
    return unit_class(spec.cls)(spec.params)


_BUILT: dict = {}


def built_units(design: Design, units: dict | None = None) -> dict:
    """``{unit name: unit}`` of ``design``, built once per design (``units``: ones already built for it, by
    :func:`~step_hdl.mapper.plan.plan`). The units are never elaborated here: the top level's conversions
    elaborate the same objects."""
    key = design.key()
    if units is not None:
        _BUILT[key] = units
    if key not in _BUILT:
        if len(_BUILT) > 16:            # a sweep of many designs: keep the newest few
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = {u.name: make_unit(u) for u in design.units}
        for u in _BUILT[key].values():
            not_elaborated(u)
    return _BUILT[key]
