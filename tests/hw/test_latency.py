"""Every unit's declared ``latency`` (``StepUnit.latency``, which the approximate model counts through
``mapper.fusion.chain_latency``) is what the RTL does: the cycles from a unit's first input token to its first
output token, with no stall on either side, on the back-end chosen with ``--sim``."""

import pytest

from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.catalog import CATALOG

#: units whose first output follows from their first input (a buffer or an accumulation answers a whole
#: chunk, a load the memory: their first output is timed by the chunk's close or the response)
STREAMING = [n for n, e in CATALOG.items() if e.stimulus is not None and e.family in ("shape", "routing")] + \
            ["Map[matmul]", "Map[add]", "Scan[add]", "FlatMap[retile_streamify]"]


@pytest.mark.parametrize("name", STREAMING)
def test_declared_latency_is_measured(name, sim_backend):
    entry = CATALOG[name]
    unit = entry.make(4, 4, "int16")
    kind, inputs, op_params, *rest = entry.stimulus(unit, 6)
    component, config = entry.component(unit, op_params, inputs, rest[0] if rest else {})
    timing: dict = {}
    run_scenario(component, Scenario(unit.pack_inputs(inputs), unit.output_done_bits(), config, p_gap=0,
                                     p_drop=0), sim_backend, f"lat_{name}", timing=timing)
    # an output in the cycle its input is offered (a combinational path) is latency 0
    first_out = timing["out_cycles"][entry.main_output][0]
    assert first_out - (timing["first_in"] + 1) == type(unit).latency, name

