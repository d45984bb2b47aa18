"""The approximate performance model: timing rules, DRAM bound, deadlock detection, dynamic workloads."""

import math

import numpy as np
import pytest

from step_hdl import StepDeadlockError
from step_hdl.mapper.fifo import fifo_depths
from step_hdl.sim.model import DRAM_PRESETS, DramParams, ModelParams, simulate
from step_hdl.workloads import gqa_decode, moe, swiglu

P16 = ModelParams(tile=16)


@pytest.mark.parametrize("tb, ti", [(16, 16), (32, 64), (64, 256)])
def test_swiglu_timing_only_agrees_with_data_mode(tb, ti):
    w = swiglu(64, 256, 512, tb, ti, "int16")
    fast = simulate(w.graph, P16, w.tensors)
    full = simulate(w.graph, P16, w.tensors, timing_only=False)
    assert fast.cycles == full.cycles and fast.offchip_bytes == full.offchip_bytes
    assert np.array_equal(full.memory["y"], w.expected["y"])
    assert fast.offchip_bytes == w.run().offchip_bytes


def test_cycles_respect_bandwidth_and_compute_bounds():
    peak = DRAM_PRESETS["paper"].peak_bytes_per_cycle
    for tb, ti in [(16, 16), (64, 256)]:
        w = swiglu(64, 256, 512, tb, ti, "int16")
        r = simulate(w.graph, P16, w.tensors)
        assert r.cycles >= r.offchip_bytes / peak
        # each matmul unit does 16^3 MACs per cycle: W1, W3 and W2 products
        assert r.cycles >= 64 * 256 * 512 / 16 ** 3
    memory_bound = simulate(swiglu(64, 256, 512, 16, 16, "int16").graph, P16)
    assert memory_bound.bandwidth_utilization > 0.9


def test_dram_parameters_matter():
    w = swiglu(64, 256, 512, 16, 16, "int16")
    slow = simulate(w.graph, ModelParams(tile=16, dram=DramParams(4, 64, 64, 2, 512)), w.tensors)
    fast = simulate(w.graph, P16, w.tensors)
    assert slow.cycles > 1.8 * fast.cycles   # half the channels, memory-bound: about twice as long


def test_reconvergent_fanout_gets_deep_fifos_and_shallow_ones_deadlock(routing):
    r = routing("mixtral_b64")
    w = moe(r, 8, hidden=32, inter=64, tile_inter=32, dtype="int16", tiling="dynamic")
    depths = fifo_depths(w.graph, 2)
    assert depths["bcast_routing.out1"] >= 2 * 64 + 1
    res = simulate(w.graph, P16, w.tensors, w.streams, timing_only=False)
    assert np.array_equal(res.memory["y"], w.expected["y"])
    shallow = {k: 2 for k in depths}
    with pytest.raises(StepDeadlockError, match=r"Broadcast 'bcast_routing' waits for room on output "
                                                r"bcast_routing.out1"):
        simulate(w.graph, P16, w.tensors, w.streams, depths=shallow)


def test_time_multiplexing_and_dynamic_parallelization_run(routing, kv_files):
    r = routing("qwen_b64")
    w = moe(r, 128, hidden=16, inter=32, tile_inter=16, dtype="int16", experts_per_region=8)
    res = simulate(w.graph, P16, w.tensors, w.streams, timing_only=False)
    assert np.array_equal(res.memory["y"], w.expected["y"])
    from step_hdl.workloads.traces import kv_lengths
    lens = np.maximum(1, kv_lengths(kv_files(16)[-1]) // 32)
    for s in ("interleaved", "contiguous", "dynamic"):
        g = gqa_decode(lens, regions=4, strategy=s)
        out = simulate(g.graph, ModelParams(tile=4, dtype="fp32"), g.tensors, timing_only=False)
        assert g.mismatches(type("R", (), {"memory": out.memory})()) == {}
        fast = simulate(g.graph, ModelParams(tile=4, dtype="fp32"), g.tensors)  # kv_table read for real
        assert fast.cycles == out.cycles


def test_result_reports_per_node_activity():
    w = swiglu(64, 256, 512, 16, 16, "int16")
    r = simulate(w.graph, P16, w.tensors)
    d = r.to_dict()
    assert set(d) >= {"cycles", "offchip_bytes", "bandwidth_utilization", "compute_utilization", "nodes"}
    node = d["nodes"]["gate_proj"]
    assert node["busy"] > 0 and node["finish"] <= r.cycles
    assert math.isclose(r.bandwidth_utilization, r.offchip_bytes / (r.cycles * 256), rel_tol=1e-9)
