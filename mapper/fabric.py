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

from step_hdl.errors import StepError
from step_hdl.types import DTYPES

#: operator kinds that need no hardware unit of their own
NO_UNIT = {"Output", "Feedback"}


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

    def __post_init__(self):
        object.__setattr__(self, "units", dict(sorted(self.units.items())))
        object.__setattr__(self, "map_functions", tuple(self.map_functions))
        for name in ("tile", "fifo_depth", "sram_bytes", "memory_ports", "max_rank"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise FabricError(f"fabric: {name} must be an integer >= 1, got {v!r}")
        for name in ("dtype", "acc_dtype"):
            if getattr(self, name) not in DTYPES:
                raise FabricError(f"fabric: {name} {getattr(self, name)!r} is not one of {sorted(DTYPES)}")
        for kind, n in self.units.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise FabricError(f"fabric: unit count for {kind!r} must be an integer >= 0, got {n!r}")
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
                "sram_bytes": self.sram_bytes, "memory_ports": self.memory_ports, "max_rank": self.max_rank}

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
        with open(path) as f:
            return cls.from_json(f.read())


def needed_units(graph) -> dict[str, int]:
    """Units of each kind a (lowered) graph needs: one per node."""
    need: dict[str, int] = {}
    for node in graph.nodes.values():
        if node.kind not in NO_UNIT:
            need[node.kind] = need.get(node.kind, 0) + 1
    return need


def fabric_for(graph, tile: int, dtype: str = "int16", **overrides) -> Fabric:
    """The smallest fabric that fits ``graph`` (already lowered to ``tile x tile``)."""
    fns = sorted({n.p("fn").name for n in graph.nodes.values() if n.kind == "Map"})
    kw = dict(tile=tile, dtype=dtype, units=needed_units(graph), map_functions=tuple(fns) or ("add",))
    kw.update(overrides)
    return Fabric(**kw)
