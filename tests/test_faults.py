"""Fault injection: random DRAM latency jitter and back-pressure change the cycles, never the outputs.

Each workload runs in RTL once on the exact memory and again under random faults
(:class:`~step_hdl.sim.faults.DramFaults`: blocks held back in their channel,
requests refused, responses held back); every output must stay bit-exact and
the run must take at least as long. The random traffic of the DRAM model's own
test (``tests/hw/test_dram.py``) runs under faults too.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from step_hdl.flow import prepare, run_rtl
from step_hdl.sim.dram import DramModel
from step_hdl.sim.model.dram import DRAM_PRESETS
from step_hdl.sim.faults import DramFaults
from step_hdl.types import dtype as make_dtype
from step_hdl.units.memport import MemPortShape
from step_hdl.units.params import ParamError
from step_hdl.workloads.base import Workload

FAULTS = {
    "jitter": DramFaults(jitter=0.8, seed=11),
    "refuse": DramFaults(refuse=0.6, seed=12),
    "hold": DramFaults(hold=0.6, seed=13),
    "all": DramFaults(jitter=0.5, refuse=0.5, hold=0.5, seed=14),
}


def _swiglu():
    from step_hdl.workloads import swiglu
    return swiglu(16, 8, 64, 8, 16, "int16")


def _moe():
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    return moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")


def _gqa():
    from step_hdl.workloads.gqa import gqa_decode
    return gqa_decode([16, 3, 15, 2], group=4, head_dim=4, regions=2, strategy="dynamic", dtype="int16")


def _relu_layer():
    from helpers import relu_layer
    from step_hdl.interp import run as interp_run
    g, t = relu_layer()
    return Workload(g, t, {}, {"y": interp_run(g, t).memory["y"]}, make_dtype("int16"))


WORKLOADS = {"swiglu": _swiglu, "moe-dynamic": _moe, "gqa-dynamic": _gqa, "relu-layer": _relu_layer}


@pytest.fixture(scope="module")
def exact():
    """``exact(name)``: the workload prepared, with its cycles on the exact memory (each run once)."""
    cache = {}

    def get(name):
        if name not in cache:
            prep = prepare(WORKLOADS[name](), 4)
            res = run_rtl(prep, "amaranth")
            assert res.status == "done" and res.outputs_match, (name, res.mismatches)
            cache[name] = (prep, res.cycles)
        return cache[name]
    return get


# the default suite (about 25 s): SwiGLU under all three faults at once, the smallest under each alone; the
# rest of the matrix (the dynamic MoE's: 100 s, GQA's: 45 s) is slow
QUICK = [(w, "all") for w in ("swiglu", "relu-layer")] + \
    [("relu-layer", f) for f in ("hold", "jitter", "refuse")]
CASES = [pytest.param(w, f, marks=() if (w, f) in QUICK else pytest.mark.slow, id=f"{w}-{f}")
         for w in sorted(WORKLOADS) for f in sorted(FAULTS)]


@pytest.mark.parametrize("workload, fault", CASES)
def test_outputs_bit_exact_under_faults(exact, workload, fault):
    prep, cycles = exact(workload)
    res = run_rtl(prep, "amaranth", faults=FAULTS[fault])
    assert res.status == "done"
    assert res.outputs_match, res.mismatches
    for t, want in prep.expected.items():
        assert np.array_equal(res.outputs[t], want), t
    assert res.cycles > cycles, f"{workload} under {fault}: {res.cycles} cycles, {cycles} without faults"


def test_no_fault_is_the_exact_memory(exact):
    prep, cycles = exact("relu-layer")
    assert run_rtl(prep, "amaranth", faults=DramFaults()).cycles == cycles


@pytest.mark.parametrize("kwargs, message", [
    ({"jitter": 1.0}, "jitter must be a probability in [0, 1), got 1.0"),
    ({"refuse": -0.1}, "refuse must be a probability in [0, 1), got -0.1"),
    ({"hold": "half"}, "hold must be a probability in [0, 1), got 'half'"),
    ({"seed": -1}, "seed must be an integer in 0 .. 2**31 - 1, got -1"),
    ({"seed": 1.5}, "seed must be an integer in 0 .. 2**31 - 1, got 1.5"),
])
def test_bad_faults(kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(f"DramFaults: {message}") + "$"):
        DramFaults(**kwargs)


def test_dram_model_rejects_a_fault_setting_of_another_type():
    with pytest.raises(ParamError, match=r"DramModel: faults must be a DramFaults or None, got 0.5"):
        DramModel(MemPortShape(), 1, DRAM_PRESETS["paper"], 4, faults=0.5)
