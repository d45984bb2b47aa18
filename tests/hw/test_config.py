"""Configuration registers (``units/config.py``): a decoded register changes in the same cycle as its register(s)."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from step_hdl.types import dtype
from step_hdl.units.config import ConfigRegs, Reg, config_signature
from step_hdl.units.functions import shift_mask


class _Flagged(wiring.Component):
    cfg: In(config_signature())
    value: Out(3)
    zero: Out(1)
    mask: Out(32)
    total: Out(9)

    def elaborate(self, platform):
        m = Module()
        regs = ConfigRegs("test", [Reg("other", 8, 5), Reg("rank", 3, 0)])
        regs.elaborate(m, self.cfg)

        def is_zero(v):
            return v == 0
        def mask(v):        # a multi-bit one: requantize's mask of a shift (here of the rank) to int8
            return shift_mask(32, v, dtype("int8"))
        m.d.comb += [self.value.eq(regs["rank"]), self.zero.eq(regs.decoded(m, self.cfg, "rank", is_zero, init=1)),
                     self.mask.eq(regs.decoded(m, self.cfg, "rank", mask, init=mask(0), width=32)),
                     # of two registers: a write to either forms the sum with the other's value
                     self.total.eq(regs.decoded(m, self.cfg, ("other", "rank"), lambda a, b: a + b, init=5,
                                                width=9))]
        return m


def test_decoded_flag_follows_its_register_in_the_same_cycle():
    dut = _Flagged()
    seen = []

    async def bench(ctx):
        assert (ctx.get(dut.value), ctx.get(dut.zero)) == (0, 1)        # the reset value's flag
        assert ctx.get(dut.mask) == 0xFFFF_FF80                          # and mask: bits 7 and up
        assert ctx.get(dut.total) == 5                                   # other 5 + rank 0
        other = 5
        for addr, data in [(1, 2), (0, 0), (1, 0), (1, 5), (0, 7), (0, 255)]:   # address 0 (other) leaves rank
            ctx.set(dut.cfg.valid, 1)
            ctx.set(dut.cfg.payload, {"addr": addr, "data": data})
            await ctx.tick()
            other = data if addr == 0 else other
            seen.append((ctx.get(dut.value), ctx.get(dut.zero)))
            assert ctx.get(dut.mask) == (0xFFFF_FFFF << (7 + ctx.get(dut.value))) & 0xFFFF_FFFF
            assert ctx.get(dut.total) == other + ctx.get(dut.value)
        ctx.set(dut.cfg.valid, 0)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(2, 0), (2, 0), (0, 1), (5, 0), (5, 0), (5, 0)]


def test_decoded_register_names_are_netlist_safe():
    """A decoded register is named after its function; a lambda's ``<lambda>`` becomes ``_lambda_`` (the Gowin
    router failed to route a net named with it)."""
    from amaranth.back import rtlil
    text = rtlil.convert(_Flagged())
    assert "cfg_other_rank__lambda_" in text and "<lambda>" not in text
