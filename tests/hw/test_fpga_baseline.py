"""Units through the whole ECP5 flow, against ``fpga/baselines.json`` (``python -m pytest -m synth``).

Two small units, the pipelined builds of issue 22 (Map matmul 151.2 MHz, SiLU 132.0, on-chip buffer 137.8,
MatMul unit 127.4, linear load 127.0, requantize 142.6 at 4x4 int8 with the recorded tools), and the Reshape (127.0) and
EagerMerge (153.0) units, whose flags were registered for it: a unit that grows or slows beyond the
per-metric tolerance of the baseline recorded for the installed tool versions fails (so these are the
Fmax floors, 15 % under each). Other tool versions have no
baseline: the test skips and says how to record one.
"""

import json

import pytest

from step_hdl.fpga.characterize import BASELINE_UNITS, HERE, baseline_key
from step_hdl.fpga.synth import synthesize, tool_versions
from step_hdl.fpga.unit_table import unit

pytestmark = pytest.mark.synth


@pytest.mark.parametrize("name, tile, dtype", BASELINE_UNITS, ids=lambda x: str(x))
def test_unit_matches_its_baseline(name, tile, dtype, tmp_path):
    data = json.loads((HERE / "baselines.json").read_text())
    key = baseline_key(tool_versions())
    if key not in data["versions"]:
        pytest.skip(f"no baseline for {key}; record one with python -m step_hdl.fpga.characterize --baseline")
    base = data["versions"][key][f"{name} {tile}x{tile} {dtype}"]
    rep = synthesize(unit(name, tile, dtype), "u", workdir=tmp_path)
    got = rep.to_json()
    bad = []
    for metric, tol in data["tolerances"].items():
        b, g = base[metric], got[metric]
        # bigger or slower than the tolerance allows (DSPs and BRAMs, tolerance 0, must not change)
        worse = g < b * (1 - tol) if metric == "fmax_mhz" else g > b * (1 + tol)
        if worse or (tol == 0 and g != b):
            bad.append(f"{metric} {g} (baseline {b}, tolerance {100 * tol:.0f} %)")
    assert not bad, f"{name} {tile}x{tile} {dtype}: " + "; ".join(bad) + f"; logs {rep.logs}"
