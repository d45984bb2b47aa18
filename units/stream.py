"""Stream plumbing: FIFO queue, register slices, broadcast.

All follow Amaranth's stream transfer rules: a transfer happens on a clock edge
where ``valid`` and ``ready`` are both high; a source never waits for ``ready``
before raising ``valid``; once ``valid`` is high, it and the payload hold until
the transfer; ``ready`` may depend on ``valid``.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Shape, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .base import reject


def _check_depth(component, depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        reject(component, f"{type(component).__name__}: depth must be an integer >= 1, got {depth!r}")


class Queue(wiring.Component):
    """A FIFO of ``depth`` tokens (:class:`amaranth.lib.fifo.SyncFIFO`).

    Latency 1 (write, then the storage's asynchronous read). II 1 from depth 2;
    depth 1 alternates (II 2: the one slot takes a token only after it was
    read). ``i.ready`` and ``o.valid`` come from the level register: no
    combinational path from input to output or from ``o.ready`` to ``i.ready``.
    (An earlier version used ``SyncFIFOBuffered``, whose depth 2 is one slot
    plus an output register and so ran every fabric edge at II 2.)
    """

    def __init__(self, shape, depth: int):
        _check_depth(self, depth)
        self.shape, self.depth = shape, depth
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = fifo.SyncFIFO(width=Shape.cast(self.shape).width, depth=self.depth)
        m.d.comb += [
            q.w_data.eq(self.i.payload), q.w_en.eq(self.i.valid), self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(q.r_data), self.o.valid.eq(q.r_rdy), q.r_en.eq(self.o.ready),
        ]
        return m


class ForwardSlice(wiring.Component):
    """Register slice that cuts the valid/payload path (a pipeline register).

    Latency 1, II 1. ``i.ready`` is combinational in ``o.ready`` (ready path not cut).
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m


class BackwardSlice(wiring.Component):
    """Skid buffer that cuts the ready path.

    Latency 0, II 1. ``i.ready`` is a register; ``o.valid``/``o.payload`` are
    combinational in ``i.valid``/``i.payload`` while the skid register is empty.
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        skid = Signal(self.shape)
        m.d.comb += self.i.ready.eq(~full)
        with m.If(full):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(skid)]
            with m.If(self.o.ready):
                m.d.sync += full.eq(0)
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
            with m.If(self.i.valid & ~self.o.ready):
                m.d.sync += [full.eq(1), skid.eq(self.i.payload)]
        return m


class FullSlice(wiring.Component):
    """Cuts every path (valid, payload and ready): a forward slice behind a skid buffer.

    Latency 1, II 1, no combinational path between the two sides.
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.back = back = BackwardSlice(self.shape)
        m.submodules.fwd = fwd = ForwardSlice(self.shape)
        wiring.connect(m, wiring.flipped(self.i), back.i)
        wiring.connect(m, back.o, fwd.i)
        wiring.connect(m, fwd.o, wiring.flipped(self.o))
        return m


class Broadcast(wiring.Component):
    """Fan-out to ``n`` outputs, each with its own ready.

    Each output takes the token when it is ready; the input is released once
    every output has taken it. Latency 0, II 1 when all outputs are ready.
    ``o_k.valid`` depends on ``i.valid`` and a register; ``i.ready`` is
    combinational in the ``o_k.ready`` (never the other way round).
    """

    def __init__(self, shape, n: int):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            reject(self, f"Broadcast: n must be an integer >= 1, got {n!r}")
        self.shape, self.n = shape, n
        members = {"i": In(stream.Signature(shape))}
        members.update({f"o{k}": Out(stream.Signature(shape)) for k in range(n)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        outs = [getattr(self, f"o{k}") for k in range(self.n)]
        taken = Signal(self.n)
        done_k = [taken[k] | outs[k].ready for k in range(self.n)]
        all_done = Signal()
        m.d.comb += all_done.eq(Const(1) if not done_k else _and(done_k))
        m.d.comb += self.i.ready.eq(all_done)
        for k, o in enumerate(outs):
            m.d.comb += [o.payload.eq(self.i.payload), o.valid.eq(self.i.valid & ~taken[k])]
        with m.If(self.i.valid):
            with m.If(all_done):
                m.d.sync += taken.eq(0)
            with m.Else():
                for k, o in enumerate(outs):
                    with m.If(o.valid & o.ready):
                        m.d.sync += taken[k].eq(1)
        return m


def _and(terms):
    out = terms[0]
    for t in terms[1:]:
        out = out & t
    return out
