"""The lower bound on a run's cycles that every result is reported beside.

Three rates bound any schedule of a program on a fabric: the matmul units'
FLOPs (each unit multiplies one pair of ``P x P`` physical tiles per cycle,
``2·P³`` FLOPs), the DRAM's bandwidth (``DramParams.peak_bytes_per_cycle``) and
each memory port's request rate (one request, a physical tile, per cycle).
:func:`cycle_bound` takes the counts (from the model, which counts FLOPs and
requests exactly as the lowering cuts tiles) and gives the largest of the
three, which one binds, and :meth:`CycleBound.fraction` of it a run reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CycleBound:
    """Cycles each rate alone needs; ``cycles`` is the largest and ``binding`` names it."""

    compute: int
    dram: int
    port: int
    port_name: str | None

    @property
    def cycles(self) -> int:
        return max(self.compute, self.dram, self.port)

    @property
    def binding(self) -> str:
        return max((self.compute, "compute"), (self.dram, "dram"), (self.port, "port"))[1]

    def fraction(self, cycles: int) -> float:
        """How close a run of ``cycles`` came to the bound (1.0: at the bound)."""
        return self.cycles / cycles if cycles else 0.0

    def to_json(self, cycles: int | None = None) -> dict:
        out = {"cycles": self.cycles, "binding": self.binding, "compute": self.compute, "dram": self.dram,
               "port": self.port, "busiest_port": self.port_name}
        if cycles is not None:
            out["fraction"] = round(self.fraction(cycles), 4)
        return out


def cycle_bound(matmul_flops: int, matmul_units: int, flops_per_unit: int, offchip_bytes: int,
                peak_bytes_per_cycle: float, port_requests: dict) -> CycleBound:
    """The bound from the counts: matmul FLOPs over ``matmul_units x flops_per_unit`` per cycle, off-chip
    bytes over the DRAM's peak, and the busiest memory port's requests (one per cycle)."""
    compute = math.ceil(matmul_flops / (matmul_units * flops_per_unit)) if matmul_units else 0
    dram = math.ceil(offchip_bytes / peak_bytes_per_cycle) if peak_bytes_per_cycle else 0
    name, port = max(port_requests.items(), key=lambda kv: kv[1], default=(None, 0))
    return CycleBound(compute, dram, int(port), name)
