"""The FPGA flow's front: :func:`synthesize` a unit or a mapped fabric for a target, by its back end.

The back ends are :mod:`~step_hdl.fpga.ecp5` (Lattice ECP5-85F: Yosys ``synth_ecp5``, nextpnr out of context)
and :mod:`~step_hdl.fpga.gowin` (Gowin GW2A-18, in a pin harness); what they share (targets, the report, nextpnr
runs, stage records) is :mod:`~step_hdl.fpga.tools`. ``docs/fpga.md`` is the guide.
"""

from __future__ import annotations

import os

from step_hdl.errors import StepError

from .ecp5 import LUT_MAPPERS, synthesize_ecp5
from .gowin import synthesize_gowin
from .tools import TARGETS, NextpnrError, SynthReport, tool_versions

__all__ = ["NextpnrError", "SynthReport", "TARGETS", "synthesize", "tool_versions"]


def synthesize(component, name: str, target: str = "ecp5-85f", workdir: str | os.PathLike | None = None,
               freq_mhz: float = 100.0, place: bool = True, seed: int = 1, dsp_budget: int | None = -1,
               router: str | None = None, placer: str | None = None, timing_weight: int | None = None,
               progress=None,
               yosys_timeout_s: float | None = None, lut_mapper: str = "abc9") -> SynthReport:
    """Synthesize (and by default place and route) ``component`` for ``target``.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        A unit or a :class:`~step_hdl.mapper.top.FabricTop` (``counters=False``).
    name : str
        Top module name (also names the work directory).
    target : str
        A key of :data:`TARGETS` (``"ecp5-85f"``).
    workdir : path, optional
        Where the RTLIL, netlist, logs and reports go (kept); default a new
        temporary directory. A stage whose inputs (RTLIL and script, netlist
        and nextpnr arguments) are unchanged since the last run in the same
        directory is not run again: its saved results are read back.
    freq_mhz : float
        Clock constraint for nextpnr.
    place : bool
        Run nextpnr; without it the report has Yosys's resource counts only.
    seed : int
        nextpnr's placer seed (fixed, so runs repeat).
    dsp_budget : int or None
        DSP blocks multipliers may use; ``-1`` (default) the device's count,
        ``None`` unlimited (resource characterization without place-and-route).
    router : str, optional
        nextpnr's router; default ``router1``, ``router2`` for designs of more
        than :data:`BIG_DESIGN_LUTS` LUTs (synthesized): router1 does not get
        through the congestion of a nearly full device in hours, router2 routed
        the 83 %-full SwiGLU fabric in 19 minutes.
    placer : str, optional
        nextpnr's placer (``heap``, ``sa``, ``static``); default nextpnr's own
        (HeAP). On the SwiGLU acceptance fabric ``static`` placed an older
        netlist with less wirelength and a higher Fmax, but today's at 44.7
        MHz against HeAP's 47.8 (``docs/fpga.md``).
    timing_weight : int, optional
        The HeAP placer's timing weight (``--placer-heap-timingweight``, a positive integer); default
        nextpnr's (10) up to :data:`BIG_DESIGN_LUTS` LUTs and :data:`BIG_DESIGN_TIMING_WEIGHT` above
        (``docs/fpga.md``). Ignored with another placer.
    progress : callable, optional
        Called with one-line progress messages.
    yosys_timeout_s : float, optional
        Stop Yosys after this many seconds (a :class:`YosysError` saying so); default no limit.
    lut_mapper : {"abc9", "abc"}
        ``abc9`` (``synth_ecp5``'s own, timing-driven, the default) or ``abc`` (classic ABC, ``abc -dress
        -lut 4:7``, in place of ``synth_ecp5``'s ``map_luts`` step): on a wide combinational float datapath
        ABC9 runs for hours where ABC takes minutes, at some cost in depth.

    Returns
    -------
    SynthReport

    Raises
    ------
    YosysError, NextpnrError
        A tool failed; the message quotes its log and names the log file.
    """
    if target not in TARGETS:
        raise StepError(f"unknown FPGA target {target!r}; known: {', '.join(TARGETS)}")
    if lut_mapper not in LUT_MAPPERS:
        raise StepError(f"unknown LUT mapper {lut_mapper!r}; known: {', '.join(LUT_MAPPERS)}")
    if timing_weight is not None and (isinstance(timing_weight, bool) or not isinstance(timing_weight, int)
                                      or timing_weight < 1):
        raise StepError(f"timing_weight must be an integer >= 1, got {timing_weight!r}")
    if target == "gw2a-18":
        return synthesize_gowin(component, name, workdir, freq_mhz, place, seed, progress, yosys_timeout_s)
    return synthesize_ecp5(component, name, target, workdir, freq_mhz, place, seed, dsp_budget, router, placer,
                           timing_weight, progress, yosys_timeout_s, lut_mapper)
