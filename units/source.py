"""Sources: streams whose values are program input, written with the configuration.

:class:`SelectorSource` plays the language's ``SelectorSource``: a routing
decision per element (e.g. an MoE router's expert choices), which in a
program comes from outside the graph. The values are part of the program's
configuration image (one register write per element), so a new routing needs
no new build and moves no off-chip bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Signal
from amaranth.lib import memory

from .base import StepUnit
from .config import DATA_BITS, Reg
from .layout import SelectorFormat, TokenFormat
from .params import ParamError, UnitParams, positive


@dataclass(frozen=True)
class SourceParams(UnitParams):
    """A :class:`SelectorSource`: selectors of ``n`` choices, at most ``capacity`` elements per program."""

    n: int = 2
    capacity: int = 64
    max_rank: int = 3

    def validate(self):
        positive(self.owner, "n", self.n)
        if self.n > DATA_BITS:
            raise ParamError(f"{self.owner}: n = {self.n} choices do not fit a {DATA_BITS}-bit configuration "
                             f"write")
        positive(self.owner, "capacity", self.capacity)
        positive(self.owner, "max_rank", self.max_rank, minimum=0)


class SelectorSource(StepUnit):
    """Emit a configured sequence of selector tokens (STeP SelectorSource), then done.

    Registers: ``count`` (elements), ``value`` (each write appends one
    selector mask, bit ``i`` = choice ``i``, to the unit's memory of
    ``capacity`` entries), ``start`` (a write starts the stream; the top level
    pulses it at start). The output is the rank-0 stream ``[count]``: ``count``
    data tokens, then the done token.

    Latency 1 (registered output), II 1. Combinational: none (``o.valid`` and
    the payload are registers; ``o.ready`` only enables their update).
    """

    kind = "SelectorSource"

    def __init__(self, params: SourceParams):
        if not isinstance(params, SourceParams):
            self._MustUse__silence = True
            raise ParamError(f"SelectorSource: parameters must be SourceParams, got {params!r}")
        super().__init__(params)

    def formats(self):
        return {"o": (True, TokenFormat(SelectorFormat(self.params.n), self.params.max_rank))}

    def registers(self):
        cap_bits = self.params.capacity.bit_length()
        return [Reg("count", cap_bits, 0, doc="elements of the stream"),
                Reg("value", self.params.n, 0, doc="append one selector mask"),
                Reg("start", 1, 0, doc="a write starts the stream")]

    def configure(self, op_params: dict, in_types: dict, values=None) -> list[int]:
        """``values``: the selector masks (ints) of this program."""
        values = list(values or [])
        if len(values) > self.params.capacity:
            raise ParamError(f"SelectorSource: {len(values)} elements exceed the unit's capacity "
                             f"{self.params.capacity}")
        if op_params.get("n") != self.params.n:
            raise ParamError(f"SelectorSource: the node has n={op_params.get('n')!r} choices but the unit was "
                             f"built for n={self.params.n}")
        words = [w for v in values for w in self.config_image(value=int(v))]
        return words + self.config_image(count=len(values))

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.mem = mem = memory.Memory(shape=p.n, depth=p.capacity, init=[])
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        idx = self.regs.index
        cfg = self.cfg
        # registers by hand: 'value' appends instead of holding a value
        m.d.comb += cfg.ready.eq(1)
        count, wptr = Signal(range(p.capacity + 1)), Signal(range(p.capacity + 1))
        running, sent = Signal(), Signal(range(p.capacity + 1))
        with m.If(cfg.valid):
            with m.Switch(cfg.payload.addr):
                with m.Case(idx["count"]):
                    m.d.sync += count.eq(cfg.payload.data)
                with m.Case(idx["start"]):
                    m.d.sync += [running.eq(1), sent.eq(0)]
        m.d.comb += [wr.addr.eq(wptr), wr.data.eq(cfg.payload.data),
                     wr.en.eq(cfg.valid & (cfg.payload.addr == idx["value"]) & (wptr < p.capacity))]
        with m.If(wr.en):
            m.d.sync += wptr.eq(wptr + 1)

        o = self.o
        m.d.comb += rd.addr.eq(sent)
        with m.If(o.ready | ~o.valid):
            m.d.sync += o.valid.eq(0)
            with m.If(running):
                m.d.sync += [o.valid.eq(1), o.payload.stop.eq(0)]
                with m.If(sent == count):
                    m.d.sync += [o.payload.done.eq(1), o.payload.payload.eq(0), running.eq(0)]
                with m.Else():
                    m.d.sync += [o.payload.done.eq(0), o.payload.payload.eq(rd.data), sent.eq(sent + 1)]
        return m
