"""Every unit's declared ``latency`` (``StepUnit.latency``, which the approximate model counts through
``mapper.latency.chain_latency``) is what the RTL does: the cycles from a unit's first input token to its first
output token, with no stall on either side, on the back-end chosen with ``--sim``."""

import dataclasses

import pytest

from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.catalog import CATALOG
from step_hdl.units.base import not_elaborated

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
    assert first_out - (timing["first_in"] + 1) == unit.latency, name



@pytest.mark.parametrize("name", ["Map[matmul]", "MatMul"])
def test_pipelined_unit_keeps_ii_1(name, sim_backend):
    """A pipelined unit (``units.pipeline``: the matmul's operand, product and sum stages) still takes a
    pair every cycle: with no stall on either side its data tokens leave on consecutive cycles, the first
    ``latency`` cycles after the first pair."""
    entry = CATALOG[name]
    plain = entry.make(4, 4, "int16")
    not_elaborated(plain)
    unit = type(plain)(dataclasses.replace(plain.params, pipeline=True))
    assert plain.latency == 1 and unit.params.stages >= 2 and unit.latency == 1 + unit.params.stages
    kind, inputs, op_params, *rest = entry.stimulus(unit, 6)
    component, config = entry.component(unit, op_params, inputs, rest[0] if rest else {})
    timing: dict = {}
    run_scenario(component, Scenario(unit.pack_inputs(inputs), unit.output_done_bits(), config, p_gap=0,
                                     p_drop=0), sim_backend, f"ii_{name}", timing=timing)
    outs = timing["out_cycles"][entry.main_output]
    n_in = len(unit.pack_inputs(inputs)["i0"])
    assert len(outs) >= 3
    # every input token (pair or stop) takes one cycle: the last output leaves `latency` cycles after the
    # last token is taken
    assert outs[-1] - (timing["first_in"] + 1) <= n_in - 1 + unit.latency, (outs, n_in)
    if name == "Map[matmul]":       # one output per pair: back to back
        assert outs[0] - (timing["first_in"] + 1) == unit.latency
        assert all(b - a == 1 for a, b in zip(outs, outs[1:])), outs
