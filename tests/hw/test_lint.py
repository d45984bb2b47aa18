"""Every unit's Verilog through Verilator's ``-Wall`` lint: no latch, no signal driven twice, no combinational
loop Verilator must break up, and no ``always @*`` that reads nothing (ALWNEVER: a constant process, which an
event-driven simulator never runs, so its bits stay X at time 0)."""

import re
import subprocess

import pytest

from step_hdl.sim.rtl import setup_verilator
from step_hdl.units.catalog import CATALOG
from step_hdl.units.verilog import to_verilog

#: never acceptable in a unit
FORBIDDEN = ("LATCH", "MULTIDRIVEN", "UNOPTFLAT")

#: units whose Verilog still has a constant ``always @*``, and why: a field of a stop-merger event that this
#: build's configuration never sets (Yosys folds its driver to a constant; ``proc -nomux`` keeps the
#: assignment as a process). A unit that lints clean fails here, so the list only shrinks.
ALWNEVER_LEFT = {
    "Reassemble": "the merger event's tail (a Reassemble never ends a block on its last element)",
    "OnChipBuffer": "the reader's tail, folded to 0 where the build's reads never close on their last entry",
    "FlatMap[retile_streamify]": "the merger event's tail",
}


def _lint(name, tmp_path) -> dict:
    setup_verilator()
    path = tmp_path / "unit.v"
    path.write_text(to_verilog(CATALOG[name].make(4, 4, "int16"), "top"))
    out = subprocess.run(["verilator", "--lint-only", "-Wall", "-Wno-fatal", "--top-module", "top", str(path)],
                         capture_output=True, text=True)
    counts: dict = {}
    for kind in re.findall(r"%Warning-([A-Z]+)", out.stderr):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.parametrize("name", list(CATALOG))
def test_unit_verilog_lints_clean(name, tmp_path):
    found = _lint(name, tmp_path)
    assert {k: found[k] for k in FORBIDDEN if k in found} == {}, name
    if name in ALWNEVER_LEFT:
        assert found.get("ALWNEVER"), f"{name} lints clean now: take it off ALWNEVER_LEFT"
    else:
        assert "ALWNEVER" not in found, f"{name}: {found['ALWNEVER']} constant always @* block(s)"
