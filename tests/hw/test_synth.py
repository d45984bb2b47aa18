"""Every unit converts to RTLIL, passes Yosys ``check -assert`` and synthesizes (generic flow)."""

import pytest

from step_hdl.fpga.unit_table import units
from step_hdl.fpga.yosys import YosysError, check_and_size


@pytest.mark.parametrize("name, params, unit", list(units(2, "int8")), ids=lambda x: x if isinstance(x, str) else "")
def test_unit_passes_check_and_synthesizes(name, params, unit):
    size = check_and_size(unit, name.lower())
    assert size["cells"] > 0


def test_combinational_loop_is_caught():
    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import Out

    class Loop(wiring.Component):
        o: Out(1)

        def elaborate(self, platform):
            m = Module()
            a, b = Signal(), Signal()
            m.d.comb += [a.eq(~b), b.eq(a), self.o.eq(a)]
            return m

    with pytest.raises(YosysError, match="loop: combinational loop: Combinational cycle detected"):
        check_and_size(Loop(), "loop")
