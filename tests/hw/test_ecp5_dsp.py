"""The ECP5 flow's registered DSP products (``fpga.ecp5_dsp``): a unit elaborated for them computes what it
computes without them, in the same cycles (simulated with the block's behavioural model)."""

import numpy as np
import pytest
from amaranth.back import rtlil

from step_hdl import Tile
from step_hdl.functions import fn
from step_hdl.fpga.ecp5_dsp import MODEL_VERILOG, Ecp5Dsp
from step_hdl.sim.rtl import RtlError, run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.compute import Map, MapParams
from step_hdl.units.matmul import MatMul, MatMulParams

from hw.harness import check_unit
from hw.test_compute_units import BINARY, paired, stream
from hw.test_matmul_unit import chain_reference, operands

#: the ECP5 primitives' simulation models run on Icarus
pytestmark = pytest.mark.needs("iverilog")


def matmul_unit(dt, pipeline=True):
    return MatMul(MatMulParams(rows=4, cols=4, dtype=dt, max_rank=3, matmul_transpose_a=False, pipeline=pipeline))


# Icarus on the block models: 30-100 s a case; the default suite simulates one SiLU Map on the blocks
SLOW = pytest.mark.slow


@pytest.mark.parametrize("dt", [pytest.param(d, marks=SLOW) for d in ("int8", "int16")])
def test_matmul_unit_on_registered_dsps(dt):
    """Every product of the pipelined MatMul in a block (64 of them), with random stalls on both sides:
    the tokens of the chain it stands for, and the cycles of the unit's own registers."""
    t = Tile(dt, 4, 4)
    inputs = operands(np.random.default_rng(7), t, t, [[2, 0], [1, 3]], 2, 2)
    want = chain_reference(inputs, "matmul", 2)
    plain = check_unit(matmul_unit(dt), "MatMul", inputs, dict(fn="matmul", n=2, k=2), expected=want)
    dsp = Ecp5Dsp()
    on_dsps = check_unit(matmul_unit(dt), "MatMul", inputs, dict(fn="matmul", n=2, k=2), backend="icarus",
                         expected=want, platform=dsp, models=MODEL_VERILOG, name=f"matmul_dsp_{dt}")
    assert dsp.used == 3 * 64          # (one elaboration per seed)
    assert on_dsps == plain


@pytest.mark.parametrize("f", [pytest.param(f, marks=SLOW) for f in ("matmul", fn("matmul", transpose_a=True), "add",
                                                                    "mul")], ids=str)
def test_map_on_registered_dsps(f):
    """A Map of every binary function (the fn register selects; the blocks load only with the selected
    function's registers): the matmul's 64 products and the elementwise multiply's 16 in the blocks, the
    others beside them, as without the blocks."""
    dsp = Ecp5Dsp()
    unit = Map(MapParams(rows=4, cols=4, dtype="int8", fns=BINARY, max_rank=2, pipeline=True))
    t = Tile("int8", 4, 4)
    inputs = paired(np.random.default_rng(3), t, t, "rank2")
    want = check_unit(unit, "Map", inputs, dict(fn=f, n=2), seeds=(0,))
    unit = Map(MapParams(rows=4, cols=4, dtype="int8", fns=BINARY, max_rank=2, pipeline=True))
    assert check_unit(unit, "Map", inputs, dict(fn=f, n=2), backend="icarus", platform=dsp,
                      models=MODEL_VERILOG, name="map_dsp", seeds=(0,)) == want
    assert dsp.used == 64 + 16


@pytest.mark.parametrize("frac", [pytest.param(0, marks=SLOW), 6, pytest.param(14, marks=SLOW)])
def test_silu_on_registered_dsps(frac):
    """The pipelined SiLU's x and h in the blocks' input registers, their products in the output registers
    (one block per element): the tokens and cycles of the unit's own registers, full-range inputs that
    clamp h at both ends."""
    def unit():
        return Map(MapParams(rows=4, cols=4, dtype="int16", fns=("silu",), max_rank=2, pipeline=True))
    st, toks = stream(np.random.default_rng(frac), Tile("int16", 4, 4), "rank2")
    regs = dict(fn=fn("silu", frac=frac))
    want = check_unit(unit(), "Map", {"in0": (st, toks)}, regs, seeds=(0, 1))
    dsp = Ecp5Dsp()
    assert check_unit(unit(), "Map", {"in0": (st, toks)}, regs, backend="icarus", platform=dsp,
                      models=MODEL_VERILOG, name=f"silu_dsp_{frac}", seeds=(0, 1)) == want
    assert dsp.used == 2 * 16          # (one elaboration per seed)


def test_budget_and_width():
    """A unit gets blocks for all its products or none: the budget spent, or operands wider than 18 bits."""
    def instances(unit, dsp):
        return rtlil.convert(unit, platform=dsp).count("MULT18X18D")
    assert instances(matmul_unit("int8"), Ecp5Dsp(63)) == 0
    dsp = Ecp5Dsp(64)
    assert instances(matmul_unit("int8"), dsp) == 64 and dsp.used == 64
    assert instances(matmul_unit("int32"), Ecp5Dsp()) == 0
    assert instances(matmul_unit("int8", pipeline=False), Ecp5Dsp()) == 0    # no stages to take


@pytest.mark.parametrize("budget", [-1, 2.5, "8"])
def test_bad_budget(budget):
    with pytest.raises(ValueError, match=r"Ecp5Dsp: budget must be a count >= 0 or None, got "):
        Ecp5Dsp(budget)


def test_platform_needs_a_verilog_backend():
    unit = matmul_unit("int8")
    sc = Scenario({}, unit.output_done_bits(), [], seed=0)
    with pytest.raises(RtlError, match="runs on a Verilog back-end"):
        run_scenario(unit, sc, "amaranth", platform=Ecp5Dsp())
