"""The lower bound on cycles reported beside every result (``sim.bounds``): the largest of the matmul
units' FLOPs, the DRAM bandwidth and the busiest memory port's requests; never above a measured run."""

import numpy as np
import pytest

from step_hdl.flow import model, prepare, run_rtl
from step_hdl.sim.model.bounds import cycle_bound
from step_hdl.workloads import swiglu


def test_the_largest_rate_binds():
    b = cycle_bound(matmul_flops=3 * 2048 * 128, matmul_units=3, flops_per_unit=128, offchip_bytes=108544,
                    peak_bytes_per_cycle=256.0, port_requests={"load_x": 256, "load_w1": 1024})
    assert (b.compute, b.dram, b.port, b.port_name) == (2048, 424, 1024, "load_w1")
    assert b.cycles == 2048 and b.binding == "compute" and b.fraction(4096) == 0.5
    assert b.to_json(2948) == {"cycles": 2048, "binding": "compute", "compute": 2048, "dram": 424, "port": 1024,
                               "busiest_port": "load_w1", "fraction": 0.6947}
    none = cycle_bound(0, 0, 128, 1000, 256.0, {})
    assert (none.compute, none.dram, none.port, none.binding) == (0, 4, 0, "dram")


def test_paper_point_is_dram_bound():
    """The paper's smallest-tile SwiGLU point at 16x16 moves 4.2 MB: DRAM-bound, the model within 2 % of it."""
    r = model(swiglu(64, 256, 512, 16, 16, "int16"), 16)
    assert r.bound.binding == "dram" and r.bound.dram == 4227072 // 256
    assert 0.98 <= r.bound.fraction(r.cycles) <= 1


@pytest.mark.parametrize("point", [(4, 4), (8, 16), (16, 64)])
def test_bound_never_exceeds_the_rtl(reduced_sweep, point):
    from helpers import SWEEP
    fab, ws, preps = reduced_sweep
    i = SWEEP.index(point)
    m = model(ws[i], fab)
    res = run_rtl(preps[i], "verilator")
    assert 0 < m.bound.cycles <= min(res.cycles, m.cycles), (m.bound, res.cycles, m.cycles)


@pytest.mark.slow      # about 40 s (an RTL run)
def test_bound_on_routed_workloads(routing):
    """MoE (per-expert loads: the busiest port) and GQA decode: the bound is below the model's cycles."""
    from step_hdl.workloads.gqa import gqa_decode
    from step_hdl.workloads.moe import moe
    ws = [moe(np.array([[0], [1], [1], [0], [1], [1], [0], [1]]), 2, dtype="int16", hidden=8, inter=8,
              tile_inter=8, tiling="static", tile=3),
          gqa_decode([16, 3, 15, 2], group=4, head_dim=4, regions=2, strategy="dynamic", dtype="int16")]
    for w in ws:
        r = model(w, 4)
        assert 0 < r.bound.cycles <= r.cycles and r.bound.port_name is not None
    res = run_rtl(prepare(ws[0], 4), "amaranth")
    assert model(ws[0], 4).bound.cycles <= res.cycles
