"""A simulation-only DRAM model with channels, latency, bandwidth and an in-flight limit.

:class:`DramModel` serves several memory ports (:mod:`step_hdl.units.memport`)
from one word array, with the timing of :class:`step_hdl.sim.dram_timing.DramParams`
(the approximate model's :class:`~step_hdl.sim.dram_timing.Dram` uses the same
parameters with the same meaning). It is meant for long fabric-level runs: the
workload's tensors are loaded through a backdoor, the run needs no per-cycle
work from the testbench, and results are read back through a second backdoor.
It is never synthesized (it has no reason to be small), but it is plain
synchronous logic, so it also runs in Verilator.
"""

from __future__ import annotations

import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.units.memport import MemPortShape, MemPortSignature, request_layout
from step_hdl.units.params import ParamError, positive

from .dram_timing import DramParams

__all__ = ["MAX_INTERVAL", "MAX_LATENCY", "DramModel"]

#: largest ``latency`` accepted (the in-flight count uses a delay line of ``latency`` entries)
MAX_LATENCY = 4096
#: largest ``interval`` accepted
MAX_INTERVAL = 4096
#: widest memory the array is cut into (bits)
_CHUNK = 1024


def _div(value, k: int):
    """``value // k`` for a constant ``k`` (a slice when ``k`` is a power of two)."""
    if k & (k - 1) == 0:
        return value[k.bit_length() - 1:]
    return value // k


def _mod(value, k: int):
    """``value % k`` for a constant ``k`` (a slice when ``k`` is a power of two)."""
    if k & (k - 1) == 0:
        return value[:k.bit_length() - 1] if k > 1 else Const(0, 1)
    return value % k


class DramModel(wiring.Component):
    """Simulation-only DRAM serving ``ports`` memory ports (not for synthesis).

    Parameters
    ----------
    shape : MemPortShape
        Widths of every port; one word of ``shape.data_bits`` is one physical tile.
    ports : int
        Number of memory ports.
    params : DramParams
        Timing: ``channels``, ``request_bytes``, ``latency`` (1 .. 4096),
        ``interval`` (1 .. 4096) and ``inflight``, all positive integers; see
        *Notes*.
    depth : int
        Words of storage. Word ``i`` holds bytes ``i * word_bytes`` ..
        ``(i + 1) * word_bytes - 1``; a request addresses word
        ``addr // word_bytes``. Requests at or beyond ``depth * word_bytes``
        read 0 and do not write.
    init : sequence of int
        Initial words, unsigned ``data_bits``-bit integers, padded with zeros
        to ``depth``.
    resp_depth : int
        Responses each port's response queue holds: accepted requests whose
        response has not been transferred yet.
    port_bytes : sequence of int, optional
        Data bytes of each port's requests (default: ``word_bytes`` for every
        port). A narrower port (bytes dividing ``word_bytes``) reads and
        writes the sub-word at ``addr % word_bytes`` of word
        ``addr // word_bytes`` (read data shifted down, a write touches only
        those bytes): one tile of a row-tiled tensor is such a sub-word, so
        tensors of different physical tiles share one array densely. Its data
        bits above ``8 * port_bytes`` read as 0 and are ignored on writes.

    Attributes
    ----------
    port0, port1, ... : ``In(MemPortSignature(shape))``
        The memory ports (also :meth:`port`).
    load_en, load_addr, load_data : ``In(1)``, ``In(range(depth))``, ``In(data_bits)``
        Backdoor write: in a cycle with ``load_en`` high, word ``load_addr``
        becomes ``load_data`` at the clock edge (one word per cycle; an
        address at or beyond ``depth`` is ignored). No port request is
        accepted in such a cycle.
    peek_addr, peek_data : ``In(range(depth))``, ``Out(data_bits)``
        Backdoor read: ``peek_data`` is word ``peek_addr`` (combinational; 0
        at or beyond ``depth``).

    Raises
    ------
    ParamError
        A parameter is out of range; the message names it.

    Notes
    -----
    **Semantics** are those of the memory port: every request gets exactly one
    response, in request order per port; a read returns the word, a write
    returns ``rdata = 0``; ``tag`` comes back unchanged. A request reads or
    writes the array in the cycle it is accepted, so a write is visible to
    every request accepted later, on any port. ``bytes`` matters only for
    timing: the whole word is always read or written.

    **Timing.** "Cycle t" is a clock period; a transfer in cycle t means
    ``valid`` and ``ready`` are both high in cycle t (it happens at the clock
    edge ending cycle t).

    1. *Blocks.* The byte address space is cut into blocks of
       R = ``request_bytes`` bytes. A request ``(addr, bytes)`` covers blocks
       ``addr // R`` .. ``(addr + max(bytes, 1) - 1) // R`` (``bytes`` above
       ``word_bytes`` counts as ``word_bytes``). Block b is served by channel
       ``b % channels``.
    2. *Acceptance.* At most one request is accepted per cycle. The request
       of port p is accepted in cycle t if (i) no request is in issue, or the
       request in issue issues its last block in cycle t; (ii) fewer than
       ``resp_depth`` of port p's requests accepted before cycle t have
       responses not transferred before cycle t; (iii) ``load_en`` is low; and
       (iv) the round-robin arbiter picks p: of the ports with ``req.valid``
       high that meet (ii), the first one after the port accepted last in the
       cyclic order port0, port1, ... (port0 first after reset). The accepted
       request is *in issue* from cycle t + 1.
    3. *Issue.* In every cycle u the request in issue issues its remaining
       blocks in address order, several per cycle, up to the first block that
       cannot issue. A block can issue in cycle u if its channel issued no
       block in cycles u - ``interval`` + 1 .. u (so each channel accepts at
       most one block every ``interval`` cycles) and fewer than ``inflight``
       blocks are outstanding, counting those issued earlier in cycle u. A
       block issued in cycle s is outstanding in cycles s .. s + ``latency``
       - 1 and complete from cycle s + ``latency``. The request finishes
       issuing in the cycle its last block issues.
    4. *Response.* The response of a request whose last block issued in
       cycle s is valid from cycle max(s + ``latency``, v + 1), where v is the
       cycle the same port's previous response was transferred, and stays
       valid until it is transferred.

    So the fixed pipeline overhead is one cycle (acceptance to issue): **a
    lone request transferred in cycle t (no request in issue, its channels
    idle, nothing outstanding) has its response valid in cycle
    t + latency + 1** (:attr:`lone_latency` cycles later) if it covers at most
    ``channels`` and at most ``inflight`` blocks, which then all issue in cycle
    t + 1. Sustained rates are bounded by ``channels * request_bytes /
    interval`` bytes per cycle (channels), ``inflight / latency`` blocks per
    cycle (in-flight limit) and one request per cycle (acceptance).

    These parameters mean what they mean for the approximate
    :class:`~step_hdl.sim.dram_timing.Dram`: same block-to-channel interleaving,
    one block per channel every ``interval`` cycles, completion ``latency``
    cycles after issue, at most ``inflight`` blocks outstanding. Differences:
    here the in-flight limit is exact per cycle (the approximate model
    smooths it to ``inflight`` blocks per ``latency`` cycles); blocks issue in
    order, one request at a time, so a busy channel holds back the rest of
    its request and every request behind it, on any port; at most one
    request is accepted per cycle; responses leave in order per port.
    """

    def __init__(self, shape: MemPortShape, ports: int, params: DramParams, depth: int, init=(),
                 resp_depth: int = 64, port_bytes=None):
        owner = "DramModel"
        try:
            if not isinstance(shape, MemPortShape):
                raise ParamError(f"{owner}: shape must be a MemPortShape, got {shape!r}")
            if not isinstance(params, DramParams):
                raise ParamError(f"{owner}: params must be a DramParams, got {params!r}")
            positive(owner, "ports", ports)
            positive(owner, "depth", depth)
            positive(owner, "resp_depth", resp_depth)
            positive(owner, "channels", params.channels)
            positive(owner, "request_bytes", params.request_bytes)
            positive(owner, "latency", params.latency)
            positive(owner, "interval", params.interval)
            positive(owner, "inflight", params.inflight)
            if params.latency > MAX_LATENCY:
                raise ParamError(f"{owner}: latency must be <= {MAX_LATENCY}, got {params.latency}")
            if params.interval > MAX_INTERVAL:
                raise ParamError(f"{owner}: interval must be <= {MAX_INTERVAL}, got {params.interval}")
            port_bytes = list(port_bytes) if port_bytes is not None else [shape.word_bytes] * ports
            if len(port_bytes) != ports:
                raise ParamError(f"{owner}: port_bytes lists {len(port_bytes)} ports, expected {ports}")
            for p, b in enumerate(port_bytes):
                if isinstance(b, bool) or not isinstance(b, int) or b < 1 or shape.word_bytes % b:
                    raise ParamError(f"{owner}: port_bytes[{p}] must be a positive divisor of the "
                                     f"{shape.word_bytes}-byte word, got {b!r}")
            init = list(init)
            if len(init) > depth:
                raise ParamError(f"{owner}: {len(init)} initial words (init) exceed depth {depth}")
            for i, w in enumerate(init):
                try:
                    init[i] = operator.index(w)     # int or numpy integer
                except TypeError:
                    init[i] = -1
                if isinstance(w, bool) or not 0 <= init[i] < 1 << shape.data_bits:
                    raise ParamError(f"{owner}: init word {i} is not a {shape.data_bits}-bit unsigned "
                                     f"integer: {w!r}")
        except ParamError:
            self._MustUse__silence = True   # no 'created but never used' warning for a rejected component
            raise
        self.shape, self.ports, self.params = shape, ports, params
        self.depth, self.init, self.resp_depth = depth, init, resp_depth
        self.port_bytes = tuple(port_bytes)
        members = {f"port{p}": In(MemPortSignature(shape)) for p in range(ports)}
        members.update({"load_en": In(1), "load_addr": In(range(depth)), "load_data": In(shape.data_bits),
                        "peek_addr": In(range(depth)), "peek_data": Out(shape.data_bits)})
        super().__init__(members)

    # ------------------------------------------------------------------ derived sizes

    @property
    def max_blocks(self) -> int:
        """Most blocks one request can cover (a whole word at the worst alignment)."""
        rb, wb = self.params.request_bytes, self.shape.word_bytes
        return (rb - 1 + wb - 1) // rb + 1

    @property
    def lone_latency(self) -> int:
        """Cycles from a lone request's transfer to its response becoming valid."""
        return self.params.latency + 1

    def port(self, p: int):
        """Memory port ``p`` (the member ``port{p}``)."""
        return getattr(self, f"port{p}")

    # ------------------------------------------------------------------ hardware

    def elaborate(self, platform):
        m = Module()
        s, p_ = self.shape, self.params
        P, C, RB, WB = self.ports, p_.channels, p_.request_bytes, s.word_bytes
        NB = self.max_blocks
        K = min(NB, C)                       # most blocks one request issues in one cycle
        R = self.resp_depth
        ports = [self.port(p) for p in range(P)]

        # ---- one array: rows 0 .. depth-1 are the words, then R response slots per port (read data
        # captured at acceptance). A request either writes a word or fills a slot, so one write port
        # serves everything: the Python simulator expands a write port's enable bit by bit, the one
        # per-bit cost of a wide memory. The array is cut into memories of at most _CHUNK bits (a
        # wider one overflows the Python compiler's recursion limit in the simulator).
        rows = self.depth + P * R
        image = self.init + [0] * (rows - len(self.init))
        chunks = []
        for j, lo in enumerate(range(0, s.data_bits, _CHUNK)):
            width = min(_CHUNK, s.data_bits - lo)
            mask = (1 << width) - 1
            chunks.append((lo, width))
            m.submodules[f"array{j}"] = memory.Memory(shape=unsigned(width), depth=rows,
                                                      init=[w >> lo & mask for w in image])
        arrays = [m.submodules[f"array{j}"] for j in range(len(chunks))]

        def read_port(addr, name):
            """A combinational read of row ``addr`` of the array."""
            out = Signal(s.data_bits, name=name)
            for a, (lo, width) in zip(arrays, chunks):
                rp = a.read_port(domain="comb")
                m.d.comb += [rp.addr.eq(addr), out[lo:lo + width].eq(rp.data)]
            return out

        wr_en, wr_addr, wr_data = Signal(), Signal(range(rows)), Signal(s.data_bits)
        for a, (lo, width) in zip(arrays, chunks):
            wp = a.write_port()
            m.d.comb += [wp.en.eq(wr_en), wp.addr.eq(wr_addr), wp.data.eq(wr_data[lo:lo + width])]
        rd_addr = Signal(range(rows))
        rd_data = read_port(rd_addr, "rd_data")
        peek_data = read_port(self.peek_addr, "peek_row")
        m.d.comb += self.peek_data.eq(Mux(self.peek_addr < self.depth, peek_data, 0))

        now = Signal(32)
        m.d.sync += now.eq(now + 1)

        # ---- per-port response queues: (tag, write) at acceptance, due cycle when issue finishes,
        # read data in the port's ring of slots
        meta_l = data.StructLayout({"tag": unsigned(s.tag_bits), "write": unsigned(1)})
        mq, tq, w_slot = [], [], []
        for p, port in enumerate(ports):
            m.submodules[f"mq{p}"] = mf = fifo.SyncFIFO(width=meta_l.size, depth=R)
            m.submodules[f"tq{p}"] = tf = fifo.SyncFIFO(width=32, depth=R)
            mq.append(mf)
            tq.append(tf)
            wp = Signal(range(R), name=f"w_slot{p}")
            rp = Signal(range(R), name=f"r_slot{p}")
            w_slot.append(wp)
            with m.If(mf.w_en):
                m.d.sync += wp.eq(Mux(wp == R - 1, 0, wp + 1))
            slot_data = read_port(self.depth + p * R + rp, f"slot_data{p}")
            meta = Signal(meta_l, name=f"meta{p}")
            ripe = Signal(name=f"ripe{p}")     # now >= due (modulo 2**32)
            take = Signal(name=f"take{p}")
            m.d.comb += [meta.eq(mf.r_data),
                         ripe.eq(~(now - tf.r_data)[31]),
                         port.resp.valid.eq(tf.r_rdy & ripe),   # tf never holds more entries than mf
                         port.resp.payload.rdata.eq(Mux(meta.write, 0, slot_data)),
                         port.resp.payload.tag.eq(meta.tag),
                         take.eq(port.resp.valid & port.resp.ready),
                         mf.r_en.eq(take), tf.r_en.eq(take)]
            with m.If(take):
                m.d.sync += rp.eq(Mux(rp == R - 1, 0, rp + 1))

        # ---- the request in issue
        h_valid = Signal()
        h_port = Signal(range(P))
        h_ch = Signal(range(C))              # channel of the next block
        h_rem = Signal(range(NB + 1))        # blocks left to issue

        # channel occupancy: cycles until the channel may issue again
        free = Signal(C)
        busy = []
        if p_.interval > 1:
            for c in range(C):
                b = Signal(range(p_.interval), name=f"busy{c}")
                busy.append(b)
                m.d.comb += free[c].eq(b == 0)
        else:
            m.d.comb += free.eq((1 << C) - 1)

        # in-flight count: a delay line of per-cycle issue counts, `latency` long
        k = Signal(range(K + 1))             # blocks issued this cycle
        m.submodules.line = line = memory.Memory(shape=unsigned(len(k)), depth=p_.latency, init=[])
        line_rd = line.read_port(domain="comb")
        line_wr = line.write_port()
        ptr = Signal(range(p_.latency))
        warm = Signal()                      # the line holds `latency` cycles of counts since reset
        window = Signal(range(p_.inflight + K + 1))  # blocks issued in cycles now-latency .. now-1
        old = Signal(range(K + 1))           # blocks issued in cycle now-latency (complete now)
        outstanding = Signal(range(p_.inflight + K + 1))
        m.d.comb += [line_rd.addr.eq(ptr), line_wr.addr.eq(ptr), line_wr.data.eq(k), line_wr.en.eq(1),
                     old.eq(Mux(warm, line_rd.data, 0)), outstanding.eq(window - old)]
        m.d.sync += [ptr.eq(Mux(ptr == p_.latency - 1, 0, ptr + 1)), window.eq(window - old + k)]
        with m.If(ptr == p_.latency - 1):
            m.d.sync += warm.eq(1)

        # issue chain: block i of this cycle issues if all before it did, its channel is free
        # and the in-flight limit allows it
        rot = Signal(C)                      # rot[i]: channel of the request's i-th next block is free
        m.d.comb += rot.eq(Cat(free, free).bit_select(h_ch, C))
        room = Signal(range(p_.inflight + 1))
        m.d.comb += room.eq(Mux(outstanding >= p_.inflight, 0, p_.inflight - outstanding))
        oks = []
        prev = h_valid
        for i in range(K):
            ok = Signal(name=f"issue{i}")
            m.d.comb += ok.eq(prev & (h_rem > i) & rot[i] & (room > i))
            oks.append(ok)
            prev = ok
        m.d.comb += k.eq(sum(oks))
        finishing = Signal()
        m.d.comb += finishing.eq(h_valid & (k == h_rem))

        for c, b in enumerate(busy):
            dist = Signal(range(C), name=f"dist{c}")   # (c - h_ch) mod C
            m.d.comb += dist.eq(Mux(h_ch <= c, c - h_ch, c + C - h_ch))
            with m.If(dist < k):
                m.d.sync += b.eq(p_.interval - 1)
            with m.Elif(b != 0):
                m.d.sync += b.eq(b - 1)

        nxt = Signal(range(2 * C))
        m.d.comb += nxt.eq(h_ch + k)
        m.d.sync += [h_rem.eq(h_rem - k), h_ch.eq(Mux(nxt >= C, nxt - C, nxt))]
        with m.If(finishing):
            m.d.sync += h_valid.eq(0)
        with m.Switch(h_port):
            for p in range(P):
                with m.Case(p):
                    m.d.comb += [tq[p].w_en.eq(finishing), tq[p].w_data.eq(now + p_.latency)]

        # ---- round-robin arbiter and acceptance
        can_accept = Signal()
        m.d.comb += can_accept.eq(~self.load_en & (~h_valid | finishing))
        eligible = [Signal(name=f"eligible{p}") for p in range(P)]
        for p, port in enumerate(ports):
            m.d.comb += eligible[p].eq(port.req.valid & mq[p].w_rdy)
        last = Signal(range(P), init=P - 1)  # the port accepted last (port0 goes first)
        grant = Signal(range(P))
        any_ = Signal()
        with m.Switch(last):
            for lp in range(P):
                with m.Case(lp):
                    for j in range(P):
                        q = (lp + 1 + j) % P
                        with (m.If if j == 0 else m.Elif)(eligible[q]):
                            m.d.comb += [grant.eq(q), any_.eq(1)]
        accept = Signal()
        m.d.comb += accept.eq(can_accept & any_)

        req = Signal(request_layout(s))
        slot = Signal(range(rows))           # the granted port's next response slot
        with m.Switch(grant):
            for p, port in enumerate(ports):
                with m.Case(p):
                    m.d.comb += [req.eq(port.req.payload), port.req.ready.eq(accept),
                                 mq[p].w_en.eq(accept), slot.eq(self.depth + p * R + w_slot[p])]
        meta_in = Signal(meta_l)
        m.d.comb += [meta_in.tag.eq(req.tag), meta_in.write.eq(req.write)]
        for mf in mq:
            m.d.comb += mf.w_data.eq(meta_in)

        word = Signal(len(req.addr))
        in_range = Signal()
        m.d.comb += [word.eq(_div(req.addr, WB)), in_range.eq(word < self.depth),
                     rd_addr.eq(Mux(in_range, word, 0))]
        rd_sub, wr_word = rd_data, req.wdata
        if any(b != WB for b in self.port_bytes):
            # narrow ports: the sub-word at byte offset addr % WB (read shifted down, written in place)
            shift = Signal(range(8 * WB), name="sub_shift")
            pmask = Signal(s.data_bits, name="sub_mask")
            m.d.comb += shift.eq(_mod(req.addr, WB) * 8)
            with m.Switch(grant):
                for p, b in enumerate(self.port_bytes):
                    with m.Case(p):
                        m.d.comb += pmask.eq((1 << (8 * b)) - 1)
            rd_sub = Signal(s.data_bits, name="rd_sub")
            wr_word = Signal(s.data_bits, name="wr_sub")
            m.d.comb += [rd_sub.eq((rd_data >> shift) & pmask),
                         wr_word.eq((rd_data & ~(pmask << shift)) | ((req.wdata & pmask) << shift))]
        with m.If(self.load_en):
            m.d.comb += [wr_en.eq(self.load_addr < self.depth), wr_addr.eq(self.load_addr),
                         wr_data.eq(self.load_data)]
        with m.Elif(accept & req.write):
            m.d.comb += [wr_en.eq(in_range), wr_addr.eq(word), wr_data.eq(wr_word)]
        with m.Elif(accept):
            m.d.comb += [wr_en.eq(1), wr_addr.eq(slot), wr_data.eq(Mux(in_range, rd_sub, 0))]

        # blocks of the accepted request
        nbytes = Signal(range(WB + 1))
        m.d.comb += nbytes.eq(Mux(req.bytes == 0, 1, Mux(req.bytes > WB, WB, req.bytes)))
        first = Signal(len(req.addr))
        last_b = Signal(len(req.addr) + 1)
        m.d.comb += [first.eq(_div(req.addr, RB)), last_b.eq(_div(req.addr + nbytes - 1, RB))]
        with m.If(accept):
            m.d.sync += [h_valid.eq(1), h_port.eq(grant), last.eq(grant),
                         h_ch.eq(_mod(first, C)), h_rem.eq(last_b - first + 1)]
        return m
