"""A simulation-only DRAM model with channels, latency, bandwidth and an in-flight limit.

:class:`DramModel` serves several memory ports (:mod:`step_hdl.units.memport`)
from one word array, with the timing of :class:`step_hdl.sim.model.dram.DramParams`
(the approximate model's :class:`~step_hdl.sim.model.dram.Dram` uses the same
parameters with the same meaning). It is meant for long fabric-level runs: the
workload's tensors are loaded through a backdoor, the run needs no per-cycle
work from the testbench, and results are read back through a second backdoor.
It is never synthesized (it has no reason to be small), but it is plain
synchronous logic, so it also runs in Verilator.
"""

from __future__ import annotations

import operator

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.units.memport import BurstSplitter, MemPortShape, MemPortSignature
from step_hdl.units.params import ParamError, positive

from step_hdl.sim.model.dram import DramParams
from .faults import DramFaults, coin
from step_hdl.units.base import not_elaborated

__all__ = ["ARRAY_MODULE", "ARRAY_VERILOG", "IMAGE_PLUSARG", "MAX_INTERVAL", "MAX_LATENCY", "DramModel"]

#: largest ``latency`` accepted (the in-flight count uses a delay line of ``latency`` entries)
MAX_LATENCY = 4096
#: largest ``interval`` accepted
MAX_INTERVAL = 4096
#: widest memory the array is cut into (bits)
_CHUNK = 1024

#: the Verilog module of the word array a ``DramModel(array="verilog")`` instantiates (:data:`ARRAY_VERILOG`)
ARRAY_MODULE = "step_dram_array"
#: the plusarg that names the hex file the word array starts from (``ARRAY_VERILOG``)
IMAGE_PLUSARG = "step_image"
#: its text, which the Verilog of such a model must be given with. The array is the Amaranth memory's
#: behaviour (one write port, written at the clock edge; combinational read ports; every word 0 at start)
#: without its initial image: Amaranth writes a memory's image word by word even when it is all zeros, and
#: for a 16,384-word array of 256-bit words that takes 540 MB and 10 s to convert. An instance with
#: ``LOADABLE = 1`` (the model's word array) reads its image instead from the hex file, one word per line,
#: that the simulator's plusarg ``+{IMAGE_PLUSARG}=PATH`` names, when it is given.
ARRAY_VERILOG = f"""
module {ARRAY_MODULE} #(parameter WIDTH = 1, DEPTH = 1, AW = 1, READS = 1, LOADABLE = 0) (
  input clk,
  input we,
  input [AW-1:0] waddr,
  input [WIDTH-1:0] wdata,
  input [READS*AW-1:0] raddr,
  output [READS*WIDTH-1:0] rdata
);
  reg [WIDTH-1:0] mem [0:DEPTH-1];
  reg [8*4096-1:0] image;
  integer i;
  initial begin
    for (i = 0; i < DEPTH; i = i + 1) mem[i] = {{WIDTH{{1'b0}}}};
    if (LOADABLE != 0 && $value$plusargs("{IMAGE_PLUSARG}=%s", image)) $readmemh(image, mem);
  end
  always @(posedge clk) if (we) mem[waddr] <= wdata;
  genvar r;
  generate for (r = 0; r < READS; r = r + 1) begin : rd
    assign rdata[r*WIDTH +: WIDTH] = mem[raddr[r*AW +: AW]];
  end endgenerate
endmodule
"""


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
        ``interval`` (1 .. 4096), ``inflight`` and ``queue``, all positive
        integers; see *Notes*.
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
    faults : DramFaults, optional
        Random latency jitter and back-pressure (:mod:`step_hdl.sim.faults`):
        the *Timing* rules below then hold only with the extra random holds;
        the *Semantics* always hold. None (default) or no fault: the exact
        timing below, and the same logic as without the argument.
    array : str
        How the word array is built: ``"memory"`` (default), an Amaranth
        memory, for every simulator; ``"verilog"``, an instance of
        :data:`ARRAY_MODULE`, for Verilog only, which must then be given
        :data:`ARRAY_VERILOG` (the same behaviour, without the initial image
        that makes a deep array slow and large to convert; ``init`` must be
        empty: the words are loaded through the backdoor, or from the hex file
        the plusarg ``+step_image=PATH`` names as the simulation starts).

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
    **Semantics** are those of the memory port: a request is split into its
    items (:class:`~step_hdl.units.memport.BurstSplitter`: a read burst of
    ``n`` words gives ``n`` items, one per cycle from the cycle it is offered;
    each write beat is an item), and every item gets exactly one response, in
    order per port; a read returns the word, a write returns ``rdata = 0``;
    ``tag`` comes back unchanged. An item reads or writes the array in the
    cycle it is accepted; a write takes effect at the end of that cycle, so it
    is visible to every item accepted later, on any port (a read accepted in
    the same cycle on another port sees the old word). ``bytes`` matters only
    for timing: the whole word is always read or written. Below, "request"
    means an item.

    **Timing.** "Cycle t" is a clock period; a transfer in cycle t means
    ``valid`` and ``ready`` are both high in cycle t (it happens at the clock
    edge ending cycle t). Each port has its own request sequencer; each
    channel its own queue.

    1. *Blocks.* The byte address space is cut into blocks of
       R = ``request_bytes`` bytes. A request ``(addr, bytes)`` covers blocks
       ``addr // R`` .. ``(addr + max(bytes, 1) - 1) // R`` (``bytes`` above
       ``word_bytes`` counts as ``word_bytes``). Block b is served by channel
       ``b % channels``.
    2. *Acceptance.* Port p's request is accepted in cycle t if (i) port p's
       sequencer is empty, or enqueues the last block of its request in cycle
       t; (ii) fewer than ``resp_depth`` of port p's requests accepted before
       cycle t have responses not transferred before cycle t; (iii)
       ``load_en`` is low; and (iv) for a write, it is the write granted in
       cycle t: of the ports with a write request meeting (i)-(iii), the first
       after the port whose write was accepted last, in the cyclic order
       port0, port1, ... (port0 first after reset). So any number of reads,
       and one write, are accepted per cycle. The request is in port p's
       sequencer from cycle t + 1.
    3. *Enqueue.* In cycle u the sequencers take turns, starting with port
       ``T(u) % ports``, where ``T(u)`` is the number of cycles before u in
       which some sequencer held a request: each enqueues the remaining blocks of its request in
       address order, several per cycle, up to the first block that cannot
       go: a block can be enqueued if its channel's queue held fewer than
       ``queue`` blocks at the start of cycle u and no sequencer before it in
       cycle u's turn order enqueued into that channel. So every channel takes
       at most one new block per cycle, from any port. *Bursts:* the first
       block of an item that continues a burst (``cont``: a read's item after
       its first, a write beat after its first), accepted while the same port
       has a response outstanding, if it is the last block of the port's
       previous item, is not enqueued: it is that block (in-order responses
       make the item wait for it). So the items of one burst within one block
       (two 32-byte 4x4 int16 tiles, eight 8-byte row pieces) cost one block
       and one channel slot; separate requests never share a block.
    4. *Issue.* In cycle u each channel issues the block at the head of its
       queue (enqueued before cycle u) if it issued no block in cycles
       u - ``interval`` + 1 .. u - 1 and fewer than
       ``max(1, inflight // channels)`` of its blocks are outstanding. A block
       issued in cycle s is outstanding in cycles s .. s + ``latency`` - 1 and
       complete from cycle s + ``latency``.
    5. *Response.* The response of a request is valid from the first cycle in
       which all its blocks are complete and the same port's previous response
       has been transferred in an earlier cycle; it stays valid until it is
       transferred.

    So **a lone request transferred in cycle t (its channels idle and their
    queues empty) has its response valid in cycle t + latency + 2**
    (:attr:`lone_latency` cycles later): enqueued in t + 1, issued in t + 2.
    Sustained rates are bounded by ``channels * request_bytes / interval``
    bytes per cycle (channels), ``inflight / latency`` blocks per cycle
    (in-flight limit) and, per port, one request per cycle.

    These rules are what the approximate
    :class:`~step_hdl.sim.model.dram.Dram` times, transfer by transfer: the
    same block-to-channel interleaving, one block per channel every
    ``interval`` cycles, completion ``latency`` cycles after issue, each port
    on its own. What a real HBM controller does and this model leaves out:
    row-buffer hits and misses (every block costs the same), bank conflicts
    and bank-level parallelism inside a channel, refresh, read/write
    turnaround, and reordering within a channel (each channel serves its
    queue first come, first served).
    """

    def __init__(self, shape: MemPortShape, ports: int, params: DramParams, depth: int, init=(),
                 resp_depth: int = 64, port_bytes=None, faults: DramFaults | None = None, array: str = "memory"):
        owner = "DramModel"
        try:
            if array not in ("memory", "verilog"):
                raise ParamError(f"{owner}: array must be 'memory' or 'verilog', got {array!r}")
            if array == "verilog" and len(init):
                raise ParamError(f"{owner}: an array of array='verilog' starts at zero: init must be empty "
                                 f"(load the words through the backdoor), got {len(init)} words")
            if faults is not None and not isinstance(faults, DramFaults):
                raise ParamError(f"{owner}: faults must be a DramFaults or None, got {faults!r}")
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
            positive(owner, "queue", params.queue)
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
            not_elaborated(self)  # no 'created but never used' warning for a rejected component
            raise
        self.shape, self.ports, self.params = shape, ports, params
        self.depth, self.init, self.resp_depth = depth, init, resp_depth
        self.port_bytes = tuple(port_bytes)
        self.faults = faults if faults is not None and faults.any else None
        self.array = array
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
        return self.params.latency + 2

    def port(self, p: int):
        """Memory port ``p`` (the member ``port{p}``)."""
        return getattr(self, f"port{p}")

    # ------------------------------------------------------------------ hardware

    def elaborate(self, platform):
        m = Module()
        s, p_ = self.shape, self.params
        P, C, RB, WB = self.ports, p_.channels, p_.request_bytes, s.word_bytes
        NB = self.max_blocks
        K = min(NB, C)                       # most blocks one sequencer enqueues in one cycle
        R = self.resp_depth
        ports = [self.port(p) for p in range(P)]

        # memories of data_bits-wide words, cut into memories of at most _CHUNK bits (a wider one overflows the
        # Python compiler's recursion limit in the simulator)
        chunks = [(lo, min(_CHUNK, s.data_bits - lo)) for lo in range(0, s.data_bits, _CHUNK)]

        arrays = []     # with array="verilog": (name, depth, write port, [(address, data)]), instanced at the end

        def wide_memory(name, depth, init=()):
            """``(write(en, addr, data), read(addr, name))`` of a memory of ``depth`` words: one write port,
            combinational read ports."""
            if self.array == "verilog":
                entry = (name, depth, [], [])
                arrays.append(entry)

                def write(en, addr, data):
                    entry[2].extend([en, addr, data])

                def read(addr, signal_name):
                    a = Signal(range(depth), name=f"{signal_name}_addr")
                    out = Signal(s.data_bits, name=signal_name)
                    m.d.comb += a.eq(addr)
                    entry[3].append((a, out))
                    return out
                return write, read
            image = list(init) + [0] * (depth - len(init))
            mems = []
            for j, (lo, width) in enumerate(chunks):
                mask = (1 << width) - 1
                m.submodules[f"{name}{j}"] = mem = memory.Memory(shape=unsigned(width), depth=depth,
                                                                 init=[w >> lo & mask for w in image])
                mems.append(mem)

            def write(en, addr, data):
                for mem, (lo, width) in zip(mems, chunks):
                    wp = mem.write_port()
                    m.d.comb += [wp.en.eq(en), wp.addr.eq(addr), wp.data.eq(data[lo:lo + width])]

            def read(addr, signal_name):
                out = Signal(s.data_bits, name=signal_name)
                for mem, (lo, width) in zip(mems, chunks):
                    rp = mem.read_port(domain="comb")
                    m.d.comb += [rp.addr.eq(addr), out[lo:lo + width].eq(rp.data)]
                return out
            return write, read

        # ---- the word array: one write port (the backdoor, or the one write accepted per cycle), a
        # combinational read port per memory port and one for peeking
        wr_en, wr_addr, wr_data = Signal(), Signal(range(self.depth)), Signal(s.data_bits)
        array_write, read_port = wide_memory("array", self.depth, self.init)
        array_write(wr_en, wr_addr, wr_data)
        with m.If(self.load_en):
            m.d.comb += [wr_en.eq(self.load_addr < self.depth), wr_addr.eq(self.load_addr),
                         wr_data.eq(self.load_data)]
        peek_data = read_port(self.peek_addr, "peek_row")
        m.d.comb += self.peek_data.eq(Mux(self.peek_addr < self.depth, peek_data, 0))

        # ---- channels: a queue of port numbers each, the interval, the in-flight limit
        pbits = max(1, (P - 1).bit_length())
        queues, room, issue, issue_port, outstanding_of, free_of = [], Signal(C), Signal(C), [], [], []
        enq, enq_port = Signal(C), [Signal(range(P), name=f"enq_port{c}") for c in range(C)]
        limit = p_.channel_inflight
        for c in range(C):
            m.submodules[f"queue{c}"] = q = fifo.SyncFIFO(width=pbits, depth=p_.queue)
            queues.append(q)
            ready_to_issue = Signal(name=f"ch_free{c}")
            outstanding = Signal(range(limit + 1), name=f"outstanding{c}")
            if p_.interval > 1:
                busy = Signal(range(p_.interval), name=f"busy{c}")
                with m.If(issue[c]):
                    m.d.sync += busy.eq(p_.interval - 1)
                with m.Elif(busy != 0):
                    m.d.sync += busy.eq(busy - 1)
                m.d.comb += ready_to_issue.eq(busy == 0)
            else:
                m.d.comb += ready_to_issue.eq(1)
            m.d.comb += [room[c].eq(q.w_rdy), q.w_en.eq(enq[c]), q.w_data.eq(enq_port[c]),
                         q.r_en.eq(issue[c])]
            issue_port.append(q.r_data)
            outstanding_of.append(outstanding)
            free_of.append(ready_to_issue)

        # completions: a delay line of per-cycle (issued, port) per channel, `latency` long (initially empty)
        entry = 1 + pbits
        m.submodules.line = line = memory.Memory(shape=unsigned(C * entry), depth=p_.latency, init=[])
        line_rd = line.read_port(domain="comb")
        line_wr = line.write_port()
        ptr = Signal(range(p_.latency))
        m.d.comb += [line_rd.addr.eq(ptr), line_wr.addr.eq(ptr), line_wr.en.eq(1),
                     line_wr.data.eq(Cat(*(Cat(issue[c], issue_port[c]) for c in range(C))))]
        m.d.sync += ptr.eq(Mux(ptr == p_.latency - 1, 0, ptr + 1))
        # the line holds `latency` cycles of issues since reset (a memory's initial contents are not reliably
        # zero in every simulator's Verilog)
        warm = Signal()
        with m.If(ptr == p_.latency - 1):
            m.d.sync += warm.eq(1)
        comp = [warm & line_rd.data[c * entry] for c in range(C)]             # a block completes now
        comp_port = [line_rd.data[c * entry + 1:(c + 1) * entry] for c in range(C)]
        f = self.faults
        for c, outstanding in enumerate(outstanding_of):
            # a block completing this cycle no longer counts against the limit (outstanding s .. s+latency-1)
            can_issue = queues[c].r_rdy & free_of[c] & (outstanding < limit + comp[c])
            if f is not None:
                can_issue &= ~coin(m, f, f.jitter, c, f"jitter{c}")
            m.d.comb += issue[c].eq(can_issue)
            m.d.sync += outstanding.eq(outstanding + issue[c] - comp[c])

        # ---- per port: the sequencer, the response queue (meta: tag, write, first channel, blocks), the read
        # data ring, and per channel the completed blocks not yet answered
        meta_l = data.StructLayout({"tag": unsigned(s.tag_bits), "write": unsigned(1),
                                    "ch": unsigned(max(1, (C - 1).bit_length())), "n": unsigned(len(range(NB + 1)))})
        h_valid = [Signal(name=f"h_valid{p}") for p in range(P)]
        h_ch = [Signal(range(C), name=f"h_ch{p}") for p in range(P)]
        h_rem = [Signal(range(NB + 1), name=f"h_rem{p}") for p in range(P)]

        # enqueue: the sequencers in turn order from port `turn`, each claiming the channels of its next blocks;
        # the turn moves on after every cycle in which a sequencer holds a request: it depends on the traffic
        # alone, not on how long the memory sat idle before it (loading, configuration)
        turn = Signal(range(P))
        with m.If(Cat(*h_valid).any()):
            m.d.sync += turn.eq(Mux(turn == P - 1, 0, turn + 1))
        claimed = Const(0, C)
        oks_of = {}
        for tag in "ab":                     # a: ports turn .. P-1, then b: ports 0 .. turn-1
            for q in range(P):
                active = Signal(name=f"turn{tag}{q}")
                m.d.comb += active.eq((q >= turn) if tag == "a" else (q < turn))
                rot_room = Signal(C, name=f"room{q}{tag}")
                rot_claimed = Signal(C, name=f"claimed{q}{tag}")
                before = Signal(C, name=f"claimed_before{q}{tag}")
                m.d.comb += [before.eq(claimed), rot_room.eq(Cat(room, room).bit_select(h_ch[q], C)),
                             rot_claimed.eq(Cat(before, before).bit_select(h_ch[q], C))]
                prev = active & h_valid[q]
                oks = []
                for i in range(K):
                    ok = Signal(name=f"enq{q}_{i}{tag}")
                    m.d.comb += ok.eq(prev & (h_rem[q] > i) & rot_room[i] & ~rot_claimed[i])
                    oks.append(ok)
                    prev = ok
                # the channels claimed: rotate the claims back by h_ch
                mine = Signal(C, name=f"mine{q}{tag}")
                spread = Cat(*oks, Const(0, C - K)) if C > K else Cat(*oks)
                back = Signal(range(C + 1), name=f"unrotate{q}{tag}")
                m.d.comb += [back.eq(C - h_ch[q]),
                             mine.eq(Cat(spread, spread).bit_select(back, C) if C > 1 else spread)]
                after = Signal(C, name=f"claimed_after{q}{tag}")
                m.d.comb += after.eq(before | mine)
                for c in range(C):
                    with m.If(mine[c]):
                        m.d.comb += [enq[c].eq(1), enq_port[c].eq(q)]
                claimed = after
                oks_of.setdefault(q, []).append(oks)
        finishing = []
        for q in range(P):
            kq = Signal(range(K + 1), name=f"k{q}")
            m.d.comb += kq.eq(sum(a | b for a, b in zip(*oks_of[q])))
            fin = Signal(name=f"finishing{q}")
            m.d.comb += fin.eq(h_valid[q] & (kq == h_rem[q]))
            finishing.append(fin)
            nxt = Signal(range(2 * C), name=f"nxt{q}")
            m.d.comb += nxt.eq(h_ch[q] + kq)
            m.d.sync += [h_rem[q].eq(h_rem[q] - kq), h_ch[q].eq(Mux(nxt >= C, nxt - C, nxt))]
            with m.If(fin):
                m.d.sync += h_valid[q].eq(0)

        # ---- every port's requests as items (a read burst split into its words); kept for testbenches, which
        # check the rules item by item
        items = self.items = []
        for p, port in enumerate(ports):
            m.submodules[f"split{p}"] = sp = BurstSplitter(s)
            m.d.comb += [sp.i.valid.eq(port.req.valid), sp.i.payload.eq(port.req.payload),
                         port.req.ready.eq(sp.i.ready)]
            items.append(sp.o)

        # ---- acceptance: every port whose sequencer frees up; one write per cycle, round-robin
        can = [Signal(name=f"can{p}") for p in range(P)]
        mq = []
        for p, item in enumerate(items):
            m.submodules[f"mq{p}"] = mf = fifo.SyncFIFO(width=meta_l.size, depth=R)
            mq.append(mf)
            ok = item.valid & mf.w_rdy & ~self.load_en & (~h_valid[p] | finishing[p])
            if f is not None:
                ok &= ~coin(m, f, f.refuse, 1000 + p, f"refuse{p}")
            m.d.comb += can[p].eq(ok)
        writing = [Signal(name=f"writing{p}") for p in range(P)]
        for p, item in enumerate(items):
            m.d.comb += writing[p].eq(can[p] & item.payload.write)
        last_w = Signal(range(P), init=P - 1)
        w_grant, w_any = Signal(range(P)), Signal()
        with m.Switch(last_w):
            for lp in range(P):
                with m.Case(lp):
                    for j in range(P):
                        q = (lp + 1 + j) % P
                        with (m.If if j == 0 else m.Elif)(writing[q]):
                            m.d.comb += [w_grant.eq(q), w_any.eq(1)]
        with m.If(w_any):
            m.d.sync += last_w.eq(w_grant)

        narrow = any(b != WB for b in self.port_bytes)
        for p, (port, item) in enumerate(zip(ports, items)):
            req = item.payload
            accept = Signal(name=f"accept{p}")
            m.d.comb += accept.eq(can[p] & (~req.write | (w_any & (w_grant == p))))
            m.d.comb += item.ready.eq(accept)
            word = Signal(len(req.addr), name=f"word{p}")
            in_range = Signal(name=f"in_range{p}")
            m.d.comb += [word.eq(_div(req.addr, WB)), in_range.eq(word < self.depth)]
            rd = read_port(Mux(in_range, word, 0), f"rd_data{p}")
            rd_sub, wr_word = rd, req.wdata
            if narrow:
                b = self.port_bytes[p]
                shift = Signal(range(8 * WB), name=f"sub_shift{p}")
                pmask = (1 << (8 * b)) - 1
                m.d.comb += shift.eq(_mod(req.addr, WB) * 8)
                rd_sub = Signal(s.data_bits, name=f"rd_sub{p}")
                wr_word = Signal(s.data_bits, name=f"wr_sub{p}")
                m.d.comb += [rd_sub.eq((rd >> shift) & pmask),
                             wr_word.eq((rd & ~(Const(pmask, s.data_bits) << shift)) | ((req.wdata & pmask) << shift))]
            with m.If(accept & req.write):         # (never while loading: acceptance waits for load_en low)
                m.d.comb += [wr_en.eq(in_range), wr_addr.eq(word), wr_data.eq(wr_word)]

            # the read data ring of this port's responses
            w_slot = Signal(range(R), name=f"w_slot{p}")
            r_slot = Signal(range(R), name=f"r_slot{p}")
            ring_write, ring_read = wide_memory(f"slots{p}_", R)
            ring_write(accept & ~req.write, w_slot, Mux(in_range, rd_sub, 0))
            ring_data = ring_read(r_slot, f"ring_data{p}")
            with m.If(accept & ~req.write):
                m.d.sync += w_slot.eq(Mux(w_slot == R - 1, 0, w_slot + 1))

            # blocks of the accepted request -> the sequencer and the response queue
            nbytes = Signal(range(WB + 1), name=f"nbytes{p}")
            m.d.comb += nbytes.eq(Mux(req.bytes == 0, 1, Mux(req.bytes > WB, WB, req.bytes)))
            first = Signal(len(req.addr), name=f"first{p}")
            last_b = Signal(len(req.addr) + 1, name=f"last{p}")
            n = Signal(range(NB + 1), name=f"n{p}")
            ch0 = Signal(range(C), name=f"ch0_{p}")
            # a burst: an item's first block that is the port's last block of the item before it, not yet
            # answered, is that block (it costs no channel slot; in-order responses make this item wait for it)
            prev_blk = Signal(len(req.addr) + 1, name=f"prev_block{p}")
            merged = Signal(name=f"merged{p}")
            start_b = Signal(len(req.addr) + 1, name=f"start_block{p}")
            m.d.comb += [first.eq(_div(req.addr, RB)), last_b.eq(_div(req.addr + nbytes - 1, RB)),
                         merged.eq(req.cont & mq[p].r_rdy & (first == prev_blk)),
                         start_b.eq(first + merged), n.eq(last_b + 1 - start_b), ch0.eq(_mod(start_b, C))]
            with m.If(accept):
                m.d.sync += prev_blk.eq(last_b)
            meta_in = Signal(meta_l, name=f"meta_in{p}")
            m.d.comb += [meta_in.tag.eq(req.tag), meta_in.write.eq(req.write), meta_in.ch.eq(ch0),
                         meta_in.n.eq(n), mq[p].w_en.eq(accept), mq[p].w_data.eq(meta_in)]
            with m.If(accept):
                m.d.sync += [h_valid[p].eq(n != 0), h_ch[p].eq(ch0), h_rem[p].eq(n)]

            # response: the head request's blocks on every channel complete
            meta = Signal(meta_l, name=f"meta{p}")
            m.d.comb += meta.eq(mq[p].r_data)
            full, extra = Signal(range(NB // C + 2), name=f"full{p}"), Signal(range(C), name=f"extra{p}")
            if C & (C - 1) == 0:
                m.d.comb += [full.eq(meta.n >> (C.bit_length() - 1)), extra.eq(meta.n & (C - 1))]
            else:
                m.d.comb += [full.eq(meta.n // C), extra.eq(meta.n % C)]
            complete = Signal(name=f"complete{p}")
            take = Signal(name=f"take{p}")
            checks = []
            for c in range(C):
                need = Signal(range(NB + 1), name=f"need{p}_{c}")
                dist = Signal(range(C), name=f"dist{p}_{c}")         # (c - first channel) mod C
                # (for the last channel ``ch <= c`` always holds: no comparison, which Verilator flags)
                wrap = c - meta.ch if c == C - 1 else Mux(meta.ch <= c, c - meta.ch, c + C - meta.ch)
                m.d.comb += [dist.eq(wrap), need.eq(full + (dist < extra))]
                done = Signal(range(R * NB + 1), name=f"done{p}_{c}")
                arrive = Signal(name=f"arrive{p}_{c}")
                m.d.comb += arrive.eq(comp[c] & (comp_port[c] == p))
                checks.append(done + arrive >= need)
                m.d.sync += done.eq(done + arrive - Mux(take, need, 0))
            m.d.comb += complete.eq(mq[p].r_rdy & Cat(*checks).all())
            show = complete
            if f is not None and f.hold:
                # held back before it is shown, never withdrawn: once valid, valid until the transfer
                shown = Signal(name=f"shown{p}")
                show = complete & (shown | ~coin(m, f, f.hold, 2000 + p, f"hold{p}"))
                with m.If(take):
                    m.d.sync += shown.eq(0)
                with m.Elif(show):
                    m.d.sync += shown.eq(1)
            m.d.comb += [port.resp.valid.eq(show),
                         port.resp.payload.rdata.eq(Mux(meta.write, 0, ring_data)),
                         port.resp.payload.tag.eq(meta.tag),
                         take.eq(port.resp.valid & port.resp.ready), mq[p].r_en.eq(take)]
            with m.If(take & ~meta.write):
                m.d.sync += r_slot.eq(Mux(r_slot == R - 1, 0, r_slot + 1))
        for name, depth, (en, addr, wdata), reads in arrays:
            m.submodules[name] = Instance(
                ARRAY_MODULE, p_WIDTH=s.data_bits, p_DEPTH=depth, p_AW=len(reads[0][0]), p_READS=len(reads),
                p_LOADABLE=int(name == "array"),
                i_clk=ClockSignal(), i_we=en, i_waddr=addr, i_wdata=wdata,
                i_raddr=Cat(*(a for a, _ in reads)), o_rdata=Cat(*(d for _, d in reads)))
        return m
