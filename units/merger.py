"""StopMerger: the hardware twin of the interpreter's Emitter.

Units that expand an element into a sub-stream (RepeatStatic, Reshape,
Reassemble, FlatMap, Streamify, loads with a ref) end each sub-stream with a
*block end* ``S_q``. The spec sends only the highest stop where dimensions end
together, so that block end must merge with an outer stop ``S_k`` (``k > q``)
that follows immediately. The unit's core emits *events*; the merger holds at
most one pending block end and merges or flushes it, exactly like
:class:`step_hdl.process.Emitter`:

* ``data`` / ``done``: flush the pending stop first (one extra output cycle);
* ``stop k`` (an outer stop): with a pending ``q < k`` send only ``S_k``;
  otherwise flush and send ``S_k``;
* ``end q`` (a block end): with a pending ``p >= q`` (an empty block) flush it
  first; then hold ``q`` pending — or send it at once if the event is marked
  ``eager`` (the driving input has rank 0, so no outer stop can follow);
* ``data`` with ``tail = q`` (a data element that ends its block, ``q > 0``):
  ``data`` then ``end q``, in one cycle — the block end goes pending as the
  data leaves, so a unit that knows its last element costs no cycle for the
  block end (a separate ``end`` event takes one cycle of its own).

Latency: 0 for data when nothing is pending (data, valid combinational from
the input; the payload is not registered); II 1 per output token. ``i.ready``
is combinational in ``o.ready``. No combinational path from ``o.ready`` to
``o.valid``.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .layout import TokenFormat


def event_layout(fmt: TokenFormat) -> data.StructLayout:
    """A token plus the event flags ``end`` (block end, level in ``stop``) and ``eager``, and ``tail`` (a data
    element's trailing block end, 0: none)."""
    return data.StructLayout({"payload": fmt.payload.token_layout(), "stop": unsigned(fmt.stop_bits),
                              "done": unsigned(1), "end": unsigned(1), "eager": unsigned(1),
                              "tail": unsigned(fmt.stop_bits)})


class StopMerger(wiring.Component):
    """Turns events (tokens and block ends) into a token stream with merged stops."""

    def __init__(self, fmt: TokenFormat):
        self.token_format = fmt
        super().__init__({"i": In(stream.Signature(event_layout(fmt))), "o": Out(stream.Signature(fmt.layout))})

    def elaborate(self, platform):
        m = Module()
        ev, o = self.i.payload, self.o
        pending = Signal(self.token_format.stop_bits)   # 0 = nothing pending
        m.d.comb += [o.payload.payload.eq(ev.payload), o.payload.stop.eq(ev.stop), o.payload.done.eq(ev.done)]

        is_stop = ~ev.done & ~ev.end & (ev.stop != 0)
        is_end = ev.end
        is_data = ~ev.done & ~ev.end & (ev.stop == 0)
        merge = (pending != 0) & (pending < ev.stop) & (is_stop | is_end)

        with m.If(pending != 0):
            with m.If(self.i.valid & merge):
                # the pending block end and this (higher) stop close together: one token
                with m.If(is_stop | ev.eager):
                    m.d.comb += [o.valid.eq(1), o.payload.payload.eq(0), o.payload.stop.eq(ev.stop),
                                 o.payload.done.eq(0), self.i.ready.eq(o.ready)]
                    with m.If(o.ready):
                        m.d.sync += pending.eq(0)
                with m.Else():   # an enclosing block end: keep it pending, at the higher level
                    m.d.comb += self.i.ready.eq(1)
                    m.d.sync += pending.eq(ev.stop)
            with m.Elif(self.i.valid):
                # anything else: send the pending stop first, then look at this event again
                m.d.comb += [o.valid.eq(1), o.payload.payload.eq(0), o.payload.stop.eq(pending),
                             o.payload.done.eq(0)]
                with m.If(o.ready):
                    m.d.sync += pending.eq(0)
        with m.Else():
            with m.If(is_end & ~ev.eager):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    m.d.sync += pending.eq(ev.stop)
            with m.Else():
                m.d.comb += [o.valid.eq(self.i.valid), self.i.ready.eq(o.ready)]
                with m.If(self.i.valid & o.ready & is_data & (ev.tail != 0)):
                    m.d.sync += pending.eq(ev.tail)
                with m.If(is_end):
                    m.d.comb += o.payload.payload.eq(0)
        return m
