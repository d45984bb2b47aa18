"""Fabric description: what hardware a spatial dataflow fabric has.

A :class:`Fabric` is a frozen, validated dataclass, serializable to JSON:
the physical tile, element and accumulator types, how many units of each
operator kind it has (with the Map units' function sets), FIFO depth, SRAM per
on-chip memory unit, and the number of memory ports.
:func:`step_hdl.mapper.sizing.fabric_for` sizes a fabric to exactly fit a lowered
graph; :func:`step_hdl.mapper.binding.bind` checks that a graph fits a given
fabric and says what is missing if not.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from step_hdl.errors import StepError, read_text
from step_hdl.types import DTYPES, concrete, substitute
from step_hdl.mapper import DEFAULT_TILE
from step_hdl.units.params import Params, param


class FabricError(StepError):
    """A fabric description is invalid, or a graph does not fit it."""


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
    chunk_fifo_depth : int
        The deepest FIFO the mapper builds, beyond ``max_fifo_depth``, for a
        fan-out branch that must hold a whole chunk while another branch takes
        it whole (``x - sum(x)``: :func:`step_hdl.mapper.fifo.whole_chunk_edges`);
        0: none (such a branch gets ``max_fifo_depth``).
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
    chunk_fifo_depth: int = param(1024, minimum=0, merge="max")
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


def static_size(expr, bindings, what) -> int:
    """``expr``'s value under ``bindings`` (:func:`step_hdl.types.concrete`), or a :class:`FabricError`
    naming ``what``."""
    v = concrete(expr, bindings)
    if v is None:
        raise FabricError(f"{what} is {substitute(expr, bindings)}, not a static size; pass bindings for the "
                          f"dynamic sizes")
    return v
