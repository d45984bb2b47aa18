"""Verilog of Amaranth components: stable module names, the build folder, whole-file writes.

Every Verilog the project writes (a unit's for its tests, the fabric's modules, the simulation harness) is
converted here, with ``emit_src=False`` and a plain module name so that the text is the same on every run and
can be cached under :func:`build_root` by its content.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from amaranth.back import verilog


def build_root() -> Path:
    """The build folder (made if missing): ``$STEP_HDL_BUILD``, default ``~/.cache/step-hdl``."""
    root = Path(os.environ.get("STEP_HDL_BUILD", Path.home() / ".cache" / "step-hdl"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def verilog_name(name: str) -> str:
    """``name`` as a plain Verilog identifier: every character other than letters, digits and ``_`` becomes
    ``_``, and a leading digit gets a ``m_`` prefix (``map[matmul]_t4`` -> ``map_matmul__t4``). An escaped
    identifier would be legal Verilog, but simulators' handles (cocotb's root handle) do not find it."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else f"m_{out}"


def to_verilog(component, name: str, platform=None) -> str:
    """Verilog of an Amaranth component with a stable module name (made a plain identifier), elaborated
    for ``platform`` (None: the units' own logic; ``fpga.ecp5_dsp.Ecp5Dsp``: its primitives' instances)."""
    return verilog.convert(component, name=verilog_name(name), platform=platform, emit_src=False)


def submodule(text: str) -> str:
    """Converted Verilog of a module a top level instantiates: not marked as a top itself."""
    return re.sub(r"^\(\*\s*top\s*=\s*1\s*\*\)\s*\n", "", text, flags=re.M)


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` under another name first: a process reading the cache never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
