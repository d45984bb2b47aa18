"""Float workloads through the flow: bf16 operands with fp32 accumulation lowered (a float matmul as group sums
added to an fp32 running sum, rounded once), mapped and run in RTL bit for bit against the interpreter, and
the interpreter within its rounding budget of float64 numpy."""

import numpy as np
import pytest

from step_hdl.flow import lower, prepare, run_rtl
from step_hdl.mapper.tiling import TilingError
from step_hdl.workloads import moe, swiglu


def _bits(a):
    return np.asarray(a).view(np.uint32)


def _check(w, res):
    """RTL outputs bit for bit the interpreter's, and the interpreter within budget of numpy."""
    assert res.outputs_match, res.mismatches
    ref = w.run()
    for name in w.expected:
        assert np.array_equal(_bits(res.outputs[name]), _bits(ref.memory[name])), name
    assert w.mismatches(ref) == {}


def test_bf16_swiglu_bit_exact_on_amaranth():
    w = swiglu(4, 8, 8, 4, 4, "bf16")
    prep = prepare(w, 4)
    kinds = {u.name: u.cls for u in prep.design.units}
    # each matmul: a MatMul unit keeping the fp32 running sum, and a Map rounding it once to bf16 (down_proj's
    # sum stays fp32 through the accumulation over the intermediate tiles, rounded at the end)
    assert kinds["gate_proj_sum"] == kinds["down_proj"] == "MatMul" and kinds["gate_proj"] == "Map"
    assert "down_proj_sum" not in kinds and kinds["out_round"] == "Map"
    _check(w, run_rtl(prep, "amaranth"))


def test_bf16_moe_dynamic_small_on_amaranth():
    """Two experts, eight tokens, rows packed into blocks of 4 (one partial): the expert tiles' matmuls, the
    gate weighting and the fp32 sum of each token's experts, bit for bit."""
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    w = moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="bf16", tiling="dynamic")
    _check(w, run_rtl(prepare(w, 4), "amaranth"))


@pytest.mark.parametrize("P, dt", [(4, "bf16"), (16, "bf16"), (16, "fp32")])
def test_float_matmul_lowers_to_the_same_fixed_order_sum(P, dt):
    """Every lowering pass re-run by the interpreter gives the same bits: at P = 16 each pair of physical tiles
    adds four group sums to the running sum, at P = 4 one."""
    w = swiglu(32, 64, 128, 16, 32, dt)
    lo = lower(w, P, check_passes=True)
    groups = lo.graph.nodes["gate_proj_tiles"].out_types["out"].dtype
    assert (int(groups.cols), groups.dtype.name) == (P * P // 4, "fp32")


def test_a_float_sum_down_row_tiles_is_refused_by_name():
    """A column sum of row tiles would add one term at a time, not the fixed order: refused, not computed."""
    from step_hdl import Graph
    from step_hdl.functions import fn
    from step_hdl.mapper.tiling import tile_physical
    g = Graph("colsum")
    g.tensor("x", 6, 4, "bf16")
    g.tensor("y", 1, 4, "bf16")
    rows = g.load("x", tile=(1, 4), out_shape=[1, 6], stride=[0, 1], name="rows")
    t = g.accum(rows, "retile_row", fn("zeros", rows=0, cols=4, dtype="bf16"), 1, name="pack")    # 6 row tiles
    g.store(g.map(t, "col_sum", name="s"), "y", tile=(1, 4), name="store_y")
    with pytest.raises(TilingError, match="Map 's': a bf16 sum over the rows of bf16\\[6,4\\] spans several "
                                          "physical tiles"):
        tile_physical(g, 4)
