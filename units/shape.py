"""Shape units: Flatten, Promote, RepeatStatic, Reshape, Expand, Zip.

They move tokens of one tile format (:class:`~step_hdl.units.params.StreamParams`)
and only rewrite stop levels or repeat elements; payloads pass through.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux

from .base import StepUnit
from .config import Reg
from .layout import TokenFormat, tile_format
from .params import StreamParams


def tile_token_format(p: StreamParams) -> TokenFormat:
    return TokenFormat(tile_format(p.dtype, p.rows, p.cols), p.max_rank)


class Flatten(StepUnit):
    """Merge dimensions ``lo..hi`` into one (STeP Flatten).

    Registers: ``lo``, ``hi`` (ranks, ``0 <= lo < hi <= max_rank``).
    Stops ``S_k`` with ``lo < k <= hi`` vanish (become ``S_lo`` if ``lo >= 1``);
    higher ones are renumbered down by ``hi - lo``.

    Latency 0, II 1. Combinational: payload and valid (input to output), ready
    (output to input). A dropped stop is consumed without an output transfer.
    """

    kind = "Flatten"

    def formats(self):
        f = tile_token_format(self.params)
        return {"i": (False, f), "o": (True, f)}

    def registers(self):
        bits = tile_token_format(self.params).stop_bits
        return [Reg("lo", bits, 0, doc="lowest merged rank"), Reg("hi", bits, 1, doc="highest merged rank")]

    def configure(self, op_params, in_types):
        return self.config_image(lo=op_params["lo"], hi=op_params["hi"])

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        lo, hi = self.regs["lo"], self.regs["hi"]
        k = self.i.payload.stop
        inside = ~self.i.payload.done & (k > lo) & (k <= hi)
        drop = inside & (lo == 0)
        m.d.comb += [
            self.o.payload.payload.eq(self.i.payload.payload),
            self.o.payload.done.eq(self.i.payload.done),
            self.o.payload.stop.eq(Mux(k > hi, k - (hi - lo), Mux(inside, lo, k))),
            self.o.valid.eq(self.i.valid & ~drop),
            self.i.ready.eq(self.o.ready | drop),
        ]
        return m
