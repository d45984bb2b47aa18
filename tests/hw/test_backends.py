"""Back-end equivalence: the same scenarios on the Amaranth simulator, Verilator and Icarus give identical
tokens and identical cycle counts: unit scenarios under random stalls on both sides, and one small fabric.

Found by these tests and fixed: the Amaranth simulator counted one cycle less (and drew its receivers'
stalls during configuration); under Icarus every unit with a combinational block stayed X (cocotb builds
with -g2012, where a declaration's initial value raises no event, so `always @*` blocks never ran at time
0: we build with -g2005), and cocotb left never-sent input payloads X."""

import pytest

from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.base import lang_port
from step_hdl.units.catalog import CATALOG
from tools import BACKENDS as TOOL_BACKENDS, installed_backends, require_backend

BACKENDS = tuple(TOOL_BACKENDS)
#: catalog units whose scenarios every back-end runs (a shape unit, routing, memory, compute, accumulation, the
#: matmul that accumulates)
UNITS = ("Reshape", "Partition", "LinearOffChipLoad", "OnChipBuffer", "Map[matmul]", "Accum[add]", "MatMul")


def _backend(name):
    return require_backend(name)


def _run_unit(name, backend, seed):
    entry = CATALOG[name]
    unit = entry.make(4, 4, "int16")
    kind, inputs, op_params, *rest = entry.stimulus(unit, 24)
    extra = rest[0] if rest else {}
    component, config = entry.component(unit, op_params, inputs, extra)
    sc = Scenario(unit.pack_inputs(inputs), unit.output_done_bits(), config, seed=seed, p_gap=0.3, p_drop=0.3)
    timing: dict = {}
    out, cycles = run_scenario(component, sc, backend, f"xb_{name}", timing=timing)
    expected = entry.run_reference(kind, inputs, op_params, extra)
    assert all(unit.fmt(p).unpack_all(out[p]) == expected[lang_port(p)] for p in out), (name, backend)
    return out, cycles, timing


#: the units whose Verilator build (15 s each) only the slow suite makes: the other four cover each family
VERILATOR_SLOW = ("Reshape", "Accum[add]", "MatMul")


@pytest.mark.parametrize("backend, name", [
    pytest.param(b, n, marks=pytest.mark.slow if (b, n in VERILATOR_SLOW) == ("verilator", True) else ())
    for n in UNITS for b in ("verilator", "icarus")])
def test_unit_scenarios_agree_with_the_amaranth_simulator(name, backend):
    ref = _run_unit(name, "amaranth", seed=5)
    out, cycles, timing = _run_unit(name, _backend(backend), seed=5)
    assert out == ref[0], f"{name}: tokens on {backend} differ from the Amaranth simulator's"
    assert (cycles, timing) == (ref[1], ref[2]), f"{name}: {backend} counts {cycles} cycles, Amaranth {ref[1]}"


@pytest.mark.parametrize("seed", (5, 7))
def test_stop_merger_cycles_agree(seed):
    """The scenario that counted one cycle less on the Amaranth simulator (129/141 against 130/142): every
    back-end now counts to the last output transfer. (The event mix of then: no data carrying a block end.)"""
    from .test_plumbing import DONE_BIT, FMT, StopMerger, pack_event, random_events
    events = random_events(seed, kinds=("data", "data", "stop", "end", "end"))
    got = {}
    for b in installed_backends():      # (the unit scenarios above report a skip)
        out, cycles = run_scenario(StopMerger(FMT), Scenario({"i": [pack_event(*e) for e in events]},
                                                             {"o": DONE_BIT}, seed=seed), b, "merger")
        got[b] = (out["o"], cycles)
    assert len({(tuple(o), c) for o, c in got.values()}) == 1, {b: c for b, (_, c) in got.items()}
    assert got["amaranth"][1] == {5: 130, 7: 142}[seed]


def test_small_fabric_agrees_on_every_backend(reduced_sweep):
    """A whole fabric (the reduced SwiGLU point of the suite): same cycles, counters and outputs. (Icarus used
    to run it for millions of cycles without ``done``: its -g2012 mode never ran the combinational blocks.)"""
    from helpers import SWEEP
    from step_hdl.flow import run_rtl
    fab, ws, preps = reduced_sweep
    prep = preps[SWEEP.index((8, 16))]
    ref = run_rtl(prep, "amaranth")
    assert ref.outputs_match
    for backend in installed_backends()[1:]:     # (the unit scenarios above report a skip)
        res = run_rtl(prep, backend)
        assert res.outputs_match, (backend, res.mismatches)
        assert res.cycles == ref.cycles and res.counters == ref.counters, backend
