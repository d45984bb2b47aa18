"""The flow, step by step: from a STeP graph and its inputs to a lowered graph, a fabric, Verilog, an RTL
run and a model run. ``docs/flow.md`` is its guide.

This is the public Python API and the top layer: it joins mapping
(``step_hdl.mapper``), emission and simulation (``step_hdl.sim``) for the
command line, the benchmarks and user scripts; nothing below it imports it.

    from step_hdl.flow import workload, prepare, run_rtl, model, build
    w = workload(graph, {"x": x, "w": w})      # the inputs; the reference is the interpreter's result
    prep = prepare(w, 4)                       # lower to 4x4 tiles, size a fabric, plan, lay out memory
    res = run_rtl(prep, "verilator", "paper")  # cycles, output tensors read back, checked, unit counters
    m = model(w, prep.design.fabric)           # the approximate model on the same fabric and DRAM preset
    build(prep, "out/")                        # Verilog, configuration image, standalone testbench
"""

from __future__ import annotations

from step_hdl.mapper.fabric import Fabric, FabricError
from step_hdl.mapper.lower import Lowered, lower as _lower
from step_hdl.mapper.prepare import Prepared, prepare, shared_fabric
from step_hdl.metrics import Metrics, metrics
from step_hdl.sim.dram_timing import DRAM_PRESETS, DramParams
from step_hdl.sim.emit import build
from step_hdl.sim.fabric import Deadlock, RtlResult, run as run_rtl
from step_hdl.sim.model import ModelParams, ModelResult, simulate
from step_hdl.workloads.base import Workload
from step_hdl.workloads.files import InputError, from_graph as workload, load as load_workload, save as save_workload

__all__ = ["DRAM_PRESETS", "Deadlock", "DramParams", "Fabric", "FabricError", "InputError", "Lowered", "Metrics",
           "ModelParams", "ModelResult", "Prepared", "RtlResult", "Workload", "build", "load_workload", "lower",
           "metrics", "model", "model_params", "prepare", "run_rtl", "save_workload", "shared_fabric", "simulate",
           "workload"]


def lower(workload: Workload, fabric: Fabric | int = 4, check_passes: bool = False) -> Lowered:
    """Lower ``workload``'s graph onto ``fabric`` (a :class:`Fabric`, or a physical tile size for a fabric
    sized to fit): the graph after every pass, the fabric and the binding of nodes to units. With
    ``check_passes`` the interpreter re-runs after every pass and must give the same outputs.
    :func:`prepare` does this and then plans the configuration and the memory image."""
    return _lower(workload.graph, fabric, workload.tensors if check_passes else None, workload.streams,
                  dtype=workload.dtype.name, bindings=workload.subs)


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


def model(workload: Workload, fabric: Fabric | int = 4, dram: DramParams | str = "paper", timing_only: bool = True,
          dtype: str | None = None, timeline: int = 0) -> ModelResult:
    """Run the approximate model on ``workload``'s graph (its logical tiles) with the timing of ``fabric``
    and ``dram`` (see :func:`model_params`); ``timeline``: a bin width in cycles for the result's per-node
    busy timeline (0: none)."""
    return simulate(workload.graph, model_params(fabric, dram, dtype), workload.tensors, workload.streams,
                    timing_only=timing_only, timeline=timeline)
