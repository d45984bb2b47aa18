"""The flow: from a workload (a STeP graph with its inputs) to a mapped program, Verilog, an RTL run and a
model run.

This is the top layer: it joins mapping (``step_hdl.mapper``), emission and
simulation (``step_hdl.sim``) for the command line, the benchmarks and user
scripts; nothing below it imports it.

    from step_hdl.flow import prepare, run_rtl, model
    prep = prepare(workload, 4)               # lower, size a fabric, plan, lay out memory, reference run
    res = run_rtl(prep, "verilator", "paper") # cycles, outputs checked against the interpreter, counters
    m = model(workload, prep.design.fabric)   # the approximate model on the same fabric and DRAM preset
"""

from __future__ import annotations

from step_hdl.mapper.fabric import Fabric
from step_hdl.mapper.prepare import Prepared, prepare, shared_fabric
from step_hdl.sim.dram_timing import DRAM_PRESETS, DramParams
from step_hdl.sim.emit import build
from step_hdl.sim.fabric import RtlResult, run as run_rtl
from step_hdl.sim.model import ModelParams, ModelResult, simulate

__all__ = ["DRAM_PRESETS", "DramParams", "Fabric", "ModelParams", "ModelResult", "Prepared", "RtlResult",
           "build", "model", "model_params", "prepare", "run_rtl", "shared_fabric", "simulate"]


def model_params(fabric: Fabric | int = 4, dram: DramParams | str = "paper", dtype: str | None = None,
                 **fabric_fields) -> ModelParams:
    """The model's parameters for ``fabric`` (a :class:`Fabric`, or a physical tile size for a default
    fabric of element type int16) with ``dtype`` and ``fabric_fields`` (such as ``max_fifo_depth``) replacing
    the fabric's own, and DRAM preset ``dram``."""
    if not isinstance(fabric, Fabric):
        fabric = Fabric(tile=fabric)
    changes = {**({"dtype": dtype} if dtype is not None else {}), **fabric_fields}
    if changes:
        fabric = Fabric.from_json({**fabric.to_json(), **changes})
    return ModelParams.from_fabric(fabric, dram)


def model(workload, fabric: Fabric | int = 4, dram: DramParams | str = "paper", timing_only: bool = True,
          dtype: str | None = None) -> ModelResult:
    """Run the approximate model on ``workload``'s graph (its logical tiles) with the timing of ``fabric``
    and ``dram`` (see :func:`model_params`)."""
    return simulate(workload.graph, model_params(fabric, dram, dtype), workload.tensors, workload.streams,
                    timing_only=timing_only)
