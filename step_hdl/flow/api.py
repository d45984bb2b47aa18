"""The flow's Python API: from a STeP graph and its inputs to a lowered graph, a fabric, Verilog, an RTL run and
a model run. ``docs/flow.md`` is its guide; the command line, the report, the sweeps, the comparison and the
benchmarks call these functions and nothing below them.

What a run is on (``fabric``) is one of: a physical tile size (a fabric sized to fit the program on that
tile, :data:`DEFAULT_TILE` when none is given), a :class:`FitFabric` (sized to fit, with some fields given,
``FitFabric(4, fields={"pipeline": True})``) or a :class:`Fabric` the program must fit. The DRAM is a preset
name of :data:`DRAM_PRESETS` or a :class:`DramParams`. Both are resolved here once (:func:`target`,
:func:`dram_params`); everything below takes one form.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from types import SimpleNamespace

from step_hdl.mapper import prepare as mapping
from step_hdl.mapper.design import buffer_bytes
from step_hdl.mapper.fabric import DEFAULT_TILE, Fabric, FabricError
from step_hdl.mapper.lower import Lowered
from step_hdl.mapper.prepare import Prepared
from step_hdl.mapper.sizing import FitFabric
from step_hdl.metrics import Metrics, metrics
from step_hdl.sim import emit
from step_hdl.sim import fabric as rtl
from step_hdl.sim.fabric import Deadlock, RtlResult
from step_hdl.sim.model.core import ModelResult, simulate
from step_hdl.sim.model.dram import DRAM_PRESETS, DramParams, dram_params
from step_hdl.workloads.base import Workload
from step_hdl.workloads.files import InputError, from_graph as workload, load as load_workload, save as save_workload

__all__ = ["DEFAULT_SAMPLES", "DEFAULT_TILE", "DRAM_PRESETS", "Deadlock", "DramParams", "Fabric", "FabricError",
           "FitFabric", "InputError", "Lowered", "Metrics", "ModelResult", "Prepared", "RtlResult", "SimRun",
           "Workload", "build", "check_build_dir", "dram_params", "load_workload", "lower", "metrics",
           "model", "prepare", "run_rtl", "sample_every", "save_workload", "shared_fabric", "sim",
           "synthesize", "synthesize_unit", "target", "workload"]


#: intervals the harness samples its counters into by default (a report's timeline resolution)
DEFAULT_SAMPLES = 200


def sample_every(expected_cycles: int, samples: int = DEFAULT_SAMPLES) -> int:
    """The sampling interval for a run expected to take about ``expected_cycles``: ``samples`` intervals
    cover a quarter more than that (a run longer than the cover keeps its last interval whole: the final
    counters close it)."""
    return max(1, math.ceil(1.25 * max(1, expected_cycles) / samples))


def target(fabric: Fabric | FitFabric | int | None = None, **fields) -> Fabric | FitFabric:
    """What a run is on, from what a user gives: a :class:`Fabric` as it is, a :class:`FitFabric`, or a
    physical tile size (``None``: :data:`DEFAULT_TILE`) for a fabric sized to fit; ``fields``
    (:class:`Fabric` fields, ``pipeline=True``) replace the fabric's own, or are given to the sizing."""
    if fabric is None:
        fabric = DEFAULT_TILE
    if isinstance(fabric, Fabric):
        return fabric.replace(**fields) if fields else fabric
    if isinstance(fabric, FitFabric):
        return fabric.with_fields(**fields) if fields else fabric
    if isinstance(fabric, int) and not isinstance(fabric, bool):
        return FitFabric(fabric, fields=fields)
    raise FabricError(f"fabric: expected a Fabric, a FitFabric or a physical tile size, got {fabric!r}")


def lower(workload: Workload, fabric: Fabric | FitFabric | int | None = None, check_passes: bool = False) -> Lowered:
    """Lower ``workload``'s graph onto ``fabric`` (:func:`target`): the graph after every pass, the fabric and
    the binding of nodes to units. With ``check_passes`` the interpreter re-runs after every pass and must
    give the same outputs. :func:`prepare` does this and then plans the configuration and the memory image."""
    return mapping.lowered_for(workload, target(fabric), check_passes)


def prepare(workload: Workload, fabric: Fabric | FitFabric | Lowered | int | None = None, check_passes: bool = False,
            name: str | None = None) -> Prepared:
    """Lower ``workload`` onto ``fabric`` (:func:`target`; or a :class:`Lowered` of its graph, lowered before),
    plan its units and configuration, lay out its memory image and run the interpreter for the outputs the
    RTL must give."""
    lowered = fabric if isinstance(fabric, Lowered) else target(fabric)
    return mapping.prepare(workload, lowered, name, check_passes)


def shared_fabric(workloads, fabric: FitFabric | int | None = None, **fields) -> Fabric:
    """One fabric that fits every one of ``workloads`` (each sized on ``fabric``'s tile with ``fields``, then
    merged): a sweep of one structure runs on one build."""
    fit = target(fabric, **fields)
    if not isinstance(fit, FitFabric):
        raise FabricError("shared_fabric: give a physical tile or a FitFabric; a Fabric is already one fabric")
    return mapping.shared_fabric(workloads, fit)


def run_rtl(prep: Prepared, backend: str = "verilator", dram: DramParams | str = "paper", **options) -> RtlResult:
    """Simulate ``prep`` in RTL on ``backend`` (``amaranth``, ``verilator``, ``icarus``) with DRAM ``dram``:
    cycles, the outputs read back and checked against the interpreter, the units' counters.
    ``options``: :func:`step_hdl.sim.fabric.run`'s (``progress``, ``waves``, ``faults``, ``samples``, ...)."""
    return rtl.run(prep, backend, dram_params(dram), **options)


def model(workload: Workload, fabric: Fabric | FitFabric | int | None = None, dram: DramParams | str = "paper",
          timing_only: bool = True, timeline: int = 0, lowered: Lowered | None = None) -> ModelResult:
    """The approximate model of ``workload`` on ``fabric`` (:func:`target`) with DRAM ``dram``: it times the
    program the mapper makes (its lowering, FIFO depths and memory layout), so a program the mapper refuses is
    refused here with the same error. ``lowered``: a lowering made before (``prep.lowered``), timed as it is.
    ``timing_only``: tiles without values (full-size programs run fast); ``timeline``: a bin width in cycles
    for the result's per-node busy timeline (0: none)."""
    lo = lowered if lowered is not None else lower(workload, fabric)
    return simulate(lo, dram_params(dram), workload.tensors, workload.streams, timing_only=timing_only,
                    timeline=timeline)


def check_build_dir(out_dir, force: bool = False):
    """An :class:`~step_hdl.errors.OutputError` unless :func:`build` may write into ``out_dir`` (new, empty, or
    one a build wrote; another folder only with ``force``): call it before the work."""
    return emit.check_output_dir(out_dir, force)


def build(prep: Prepared, out_dir, dram: DramParams | str = "paper", force: bool = False) -> dict:
    """Write ``prep``'s Verilog (synthesizable top level and simulation harness), configuration image, mapping
    report, lowered graph and a standalone cocotb testbench into ``out_dir`` (new, empty, or one a build
    wrote; another folder only with ``force``); the report lists the files."""
    return emit.build(prep, out_dir, dram_params(dram), force=force)


def synthesize(prep: Prepared, target: str = "ecp5-85f", **options):
    """Synthesize, place and route ``prep``'s fabric (its synthesizable top level: no testbench counters, no
    DRAM model) for FPGA ``target``; ``options``: :func:`step_hdl.fpga.synth.synthesize`'s (``workdir``,
    ``freq_mhz``, ``place``, ``seed``, ``router``, ...). Returns the :class:`~step_hdl.fpga.tools.SynthReport`."""
    from step_hdl.fpga.synth import synthesize as synth
    from step_hdl.mapper.top import FabricTop
    d = prep.design
    return synth(FabricTop(d, counters=False), f"{d.name}_top", target, **options)


def synthesize_unit(name: str, tile: int = DEFAULT_TILE, dtype: str = "int8", pipeline: bool = False,
                    target: str = "ecp5-85f", **options):
    """Synthesize, place and route one unit of the unit table (``step_hdl.fpga.unit_table.unit_names``) on
    ``tile x tile`` tiles of ``dtype`` (``pipeline``: its build on a pipelined fabric) for FPGA ``target``."""
    from step_hdl.fpga.synth import synthesize as synth
    from step_hdl.fpga.unit_table import unit
    top = "".join(c if c.isalnum() else "_" for c in name).strip("_").lower()
    return synth(unit(name, tile, dtype, pipeline), top, target, **options)


@dataclass
class SimRun:
    """One RTL run of a program, with the model beside it: what ``step-hdl sim`` prints (:meth:`record`)."""

    workload: Workload
    prepared: Prepared
    rtl: RtlResult
    dram: DramParams
    model: ModelResult | None = None
    model_s: float = 0.0

    @property
    def model_error(self) -> float | None:
        """``model / rtl - 1`` (positive: the model is slower), or None without the model."""
        if self.model is None:
            return None
        return (self.model.cycles - self.rtl.cycles) / max(1, self.rtl.cycles)

    @cached_property
    def expected_mismatches(self) -> dict[str, str]:
        """How the RTL's outputs differ from the workload's expected ones (a graph file's ``expected.<tensor>``,
        a built-in workload's numpy reference), as :meth:`Workload.mismatches` says for ``run``; empty if they
        match. The RTL is also checked against the interpreter (``rtl.mismatches``): the two differ when the
        expected outputs do not come from this graph."""
        return self.workload.mismatches(SimpleNamespace(memory=self.rtl.outputs))

    @property
    def outputs_match(self) -> bool:
        """The RTL finished, matches the interpreter bit for bit and the workload's expected outputs."""
        return self.rtl.outputs_match and not self.expected_mismatches

    def record(self) -> dict:
        """The run as plain data: the RTL's result (cycles, outputs checked, traffic, bandwidth, utilization,
        problems) with the tile, the interpreter's off-chip bytes, the buffers' bytes, each tile pool's plan
        beside its measured peak and, with the model, its cycles, error, the cycle bound and its wall time."""
        prep, design = self.prepared, self.prepared.design
        out = {"tile": design.fabric.tile, **self.rtl.to_json(design, self.dram),
               "outputs_match": self.outputs_match, "matches_interpreter": self.rtl.outputs_match,
               "expected_mismatches": self.expected_mismatches,
               "reference_offchip_bytes": prep.reference_bytes, "buffer_bytes": buffer_bytes(design)}
        for plan in prep.program.pools:     # the mapper's bound and this program's need beside the measured peak
            out["pools"][plan["name"]] = {**plan, **out["pools"][plan["name"]]}
        if self.rtl.waves:
            out["waves"] = self.rtl.waves
        if self.model is not None:
            out["model_cycles"] = self.model.cycles
            out["model_error"] = round(self.model_error, 4)
            # the bound's counts (matmul FLOPs, bytes, requests per port) are the program's, whoever ran it
            out["bound"] = self.model.bound.to_json(self.rtl.cycles)
            out["model_wall_s"] = round(self.model_s, 3)
        return out


def sim(workload: Workload, fabric: Fabric | FitFabric | Lowered | int | None = None, backend: str = "verilator",
        dram: DramParams | str = "paper", with_model: bool = True, samples: int = 0, waves: bool = False,
        progress: bool = False, prepared: Prepared | None = None) -> SimRun:
    """Map ``workload`` onto ``fabric`` (:func:`prepare`; or take ``prepared``), simulate it in RTL and, with
    ``with_model``, time the same lowering with the model. ``samples``: the harness samples its counters into
    that many intervals, sized from the model's cycles (the report's timeline; ``with_model`` is then needed)."""
    dp = dram_params(dram)
    prep = prepared if prepared is not None else prepare(workload, fabric)
    m, model_s, sampling = None, 0.0, {}
    if with_model or samples:
        t0 = time.perf_counter()
        m = model(workload, dram=dp, lowered=prep.lowered)
        model_s = time.perf_counter() - t0
    if samples:
        sampling = {"samples": samples, "sample_every": sample_every(m.cycles, samples)}
    res = rtl.run(prep, backend, dp, progress=progress, waves=waves, **sampling)
    return SimRun(workload, prep, res, dp, m if with_model else None, model_s)
