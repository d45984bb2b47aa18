"""A three-pin register harness around a component, for FPGA flows without an out-of-context mode.

nextpnr's Gowin flow (Himbächel) places every top-level port on a package pin, and a tile datapath has
far more port bits than the package has pins. :class:`PinHarness` keeps the component whole with three
pins: every input bit of the component comes from one long shift register fed by ``si``; every output bit
goes into a register that loads all outputs in parallel when ``ld`` is high and otherwise shifts them out
on ``so``. Nothing of the component is optimized away (every output reaches a pin through the chain), and
the paths the harness adds are one register to one register with at most a 2-to-1 multiplexer between.

What the place-and-route then times, unlike an out-of-context run: the component's paths from its input
ports (now registers of the chain) and to its output ports (the capture register), which in a fabric end
at a neighbour's register or FIFO as well.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class PinHarness(wiring.Component):
    """``component`` behind a serial-in chain and a parallel-load serial-out register (module docstring).

    Ports: ``si`` (in), ``ld`` (in), ``so`` (out); the clock domain ``sync`` as the component's.
    Latency: an input bit reaches the component ``k`` cycles after it is on ``si`` (``k``: its place in the
    chain); the outputs are captured in the cycle ``ld`` is high. No combinational path from a pin to a pin.
    """

    def __init__(self, component: wiring.Component):
        self.component = component
        super().__init__({"si": In(1), "ld": In(1), "so": Out(1)})

    def _ports(self):
        ins, outs = [], []
        for path, member, value in self.component.signature.flatten(self.component):
            (ins if member.flow == wiring.In else outs).append(Value.cast(value))
        return ins, outs

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.component
        ins, outs = self._ports()
        n_in = sum(len(v) for v in ins)
        n_out = sum(len(v) for v in outs)
        chain = Signal(max(1, n_in))
        m.d.sync += chain.eq(Cat(self.si, chain[:-1]))
        pos = 0
        for v in ins:
            w = len(v)
            m.d.comb += v.eq(chain[pos:pos + w])
            pos += w
        cap = Signal(max(1, n_out))
        with m.If(self.ld):
            m.d.sync += cap.eq(Cat(*outs) if outs else 0)
        with m.Else():
            m.d.sync += cap.eq(cap[1:])
        m.d.comb += self.so.eq(cap[0])
        return m
