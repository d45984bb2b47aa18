"""A simulation-only DRAM model with channels, latency, bandwidth and an in-flight limit.

:class:`DramModel` serves several memory ports (:mod:`step_hdl.units.memport`)
from one word array, with the timing of :class:`step_hdl.sim.model.dram.DramParams`
(the approximate model's :class:`~step_hdl.sim.model.dram.Dram` uses the same
parameters with the same meaning). It is meant for long fabric-level runs: the
workload's tensors are loaded through a backdoor, the run needs no per-cycle
work from the testbench, and results are read back through a second backdoor.
It is never synthesized (it has no reason to be small), but it is plain
synchronous logic, so it also runs in Verilator.

The model is made of small components, each a piece of the rules in
:class:`DramModel`'s *Notes*: per port, :class:`PortRequests` (acceptance
and bursts) and :class:`PortResponses` (the in-order responses); shared,
:class:`WriteArbiter` (one write a cycle), :class:`Enqueue` (the ports'
sequencers and their turns at the channels) and :class:`DramChannels` (each
channel's queue, interval and in-flight limit, and the latency). The word
array (a :class:`WideMemory`), its backdoors and the ports' access to it are
:class:`DramModel`'s own. Only :class:`DramModel` is the module's interface.
"""

from __future__ import annotations

import operator

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.units.memport import BurstSplitter, MemPortShape, MemPortSignature, item_layout, response_layout
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
        """The model from its pieces: here the word array, its backdoors and each port's access to it; the
        channels (:class:`DramChannels`), the sequencers feeding them (:class:`Enqueue`), the write arbiter
        (:class:`WriteArbiter`), and each port's request and response side (:meth:`_port`). ``self.items``
        lists every port's items, for testbenches (they check the rules item by item)."""
        m = Module()
        P, C, NB = self.ports, self.params.channels, self.max_blocks
        array = self._word_array(m)
        m.submodules.channels = channels = DramChannels(self.params, P, self.faults)
        m.submodules.enqueue = enqueue = Enqueue(P, C, NB)
        m.d.comb += [enqueue.room.eq(channels.room), channels.enq.eq(enqueue.enq)]
        m.d.comb += [channels.enq_port[c].eq(enqueue.enq_port[c]) for c in range(C)]
        m.submodules.writes = writes = WriteArbiter(P)
        self.items = []
        for p in range(P):
            self._port(m, p, array, channels, enqueue, writes)
        return m

    def _word_array(self, m: Module) -> WideMemory:
        """The word array and its backdoors: read port 0 peeks, read port ``1 + p`` is port p's
        (:meth:`_port_word`); the write port is the backdoor load's while ``load_en`` is high, otherwise the
        granted write's."""
        array = WideMemory(m, "array", self.shape.data_bits, self.depth, 1 + self.ports, self.init,
                           verilog=self.array == "verilog", loadable=True)
        with m.If(self.load_en):
            m.d.comb += [array.we.eq(self.load_addr < self.depth), array.waddr.eq(self.load_addr),
                         array.wdata.eq(self.load_data)]
        m.d.comb += [array.raddr[0].eq(self.peek_addr),
                     self.peek_data.eq(Mux(self.peek_addr < self.depth, array.rdata[0], 0))]
        return array

    def _port(self, m: Module, p: int, array: WideMemory, channels: DramChannels, enqueue: Enqueue,
              writes: WriteArbiter) -> None:
        """Port p: its items (:class:`~step_hdl.units.memport.BurstSplitter`), its request side, its access to
        the word array and its response side, wired to one another, to the port and to the shared pieces."""
        s, port, C = self.shape, self.port(p), self.params.channels
        m.submodules[f"split{p}"] = sp = BurstSplitter(s)
        m.submodules[f"requests{p}"] = rq = PortRequests(s, C, self.max_blocks, self.params.request_bytes,
                                                         self.faults, p)
        m.submodules[f"responses{p}"] = rs = PortResponses(s, C, self.max_blocks, self.resp_depth, self.faults,
                                                           p, verilog=self.array == "verilog")
        self.items.append(sp.o)
        m.d.comb += [sp.i.valid.eq(port.req.valid), sp.i.payload.eq(port.req.payload), port.req.ready.eq(sp.i.ready)]
        wiring.connect(m, sp.o, rq.item)
        m.d.comb += [rq.stall.eq(self.load_en), rq.free.eq(enqueue.free[p]), rq.room.eq(rs.room),
                     rq.pending.eq(rs.pending), writes.want[p].eq(rq.want_write), rq.grant.eq(writes.grant[p]),
                     enqueue.load[p].eq(rq.accept), enqueue.load_ch[p].eq(rq.meta.ch),
                     enqueue.load_n[p].eq(rq.meta.n)]
        m.d.comb += [rs.push.eq(rq.accept), rs.meta.eq(rq.meta), rs.data.eq(self._port_word(m, p, array, rq)),
                     rs.arrive.eq(Cat(*(channels.done[c] & (channels.done_port[c] == p) for c in range(C)))),
                     port.resp.valid.eq(rs.resp.valid), port.resp.payload.eq(rs.resp.payload),
                     rs.resp.ready.eq(port.resp.ready)]

    def _port_word(self, m: Module, p: int, array: WideMemory, rq: PortRequests) -> Signal:
        """Port p's access to the word array (read port ``1 + p``) for its item: a write goes to the array at
        the end of the cycle it is accepted in; returns what a read accepted in this cycle answers.

        The item addresses word ``addr // word_bytes``; at or beyond ``depth`` a read gives 0 and a write is
        dropped. In a model with a narrower port every port reads and writes the sub-word at
        ``addr % word_bytes`` (its ``port_bytes``; for a full-width port, the word shifted by it)."""
        s, WB, req = self.shape, self.shape.word_bytes, rq.item.payload
        word = Signal(len(req.addr), name=f"word{p}")
        in_range = Signal(name=f"in_range{p}")
        m.d.comb += [word.eq(_div(req.addr, WB)), in_range.eq(word < self.depth),
                     array.raddr[1 + p].eq(Mux(in_range, word, 0))]
        rd = array.rdata[1 + p]
        rd_sub, wr_word = rd, req.wdata
        if any(b != WB for b in self.port_bytes):
            shift = Signal(range(8 * WB), name=f"sub_shift{p}")
            pmask = (1 << (8 * self.port_bytes[p])) - 1
            m.d.comb += shift.eq(_mod(req.addr, WB) * 8)
            rd_sub = Signal(s.data_bits, name=f"rd_sub{p}")
            wr_word = Signal(s.data_bits, name=f"wr_sub{p}")
            m.d.comb += [rd_sub.eq((rd >> shift) & pmask),
                         wr_word.eq((rd & ~(Const(pmask, s.data_bits) << shift)) | ((req.wdata & pmask) << shift))]
        with m.If(rq.accept & req.write):         # (never while loading: acceptance waits for load_en low)
            m.d.comb += [array.we.eq(in_range), array.waddr.eq(word), array.wdata.eq(wr_word)]
        return Mux(in_range, rd_sub, 0)


# ----------------------------------------------------------------------------- the model's pieces
#
# Every component below is a module of its own in the model's Verilog, so the pieces repeated per channel (and
# the memories) are helpers inside a component instead: a module per channel would add `channels` modules to
# every fabric's harness (tests/test_shared_modules.py bounds the harness's module count).

def response_entry(shape: MemPortShape, channels: int, max_blocks: int) -> data.StructLayout:
    """An accepted item's entry in its port's response queue: its ``tag``, whether it is a ``write``, and the
    blocks it waits for, ``n`` of them from channel ``ch`` on (cyclically)."""
    return data.StructLayout({"tag": unsigned(shape.tag_bits), "write": unsigned(1),
                              "ch": unsigned(max(1, (channels - 1).bit_length())),
                              "n": unsigned(len(range(max_blocks + 1)))})


class PortRequests(wiring.Component):
    """The request side of one port: when its item is accepted (rule 2), and the blocks it leaves to enqueue.

    Parameters
    ----------
    shape : MemPortShape
        The model's port widths.
    channels : int
        Channels of the model.
    max_blocks : int
        Most blocks an item covers (:attr:`DramModel.max_blocks`).
    request_bytes : int
        Bytes of a block (rule 1).
    faults : DramFaults or None
        With ``refuse``, the item is refused in a random cycle (its own pattern, salt ``1000 + index``).
    index : int
        The port's number.

    Attributes
    ----------
    item : ``In(stream.Signature(item_layout(shape)))``
        The port's items (:class:`~step_hdl.units.memport.BurstSplitter`); ``ready`` is ``accept``.
    stall : ``In(1)``
        The backdoor is loading (rule 2 (iii)).
    free : ``In(1)``
        The port's sequencer is empty or enqueues its last block in this cycle (rule 2 (i)).
    room : ``In(1)``
        The port's response queue has room: fewer than ``resp_depth`` responses outstanding (rule 2 (ii)).
    pending : ``In(1)``
        The port has a response outstanding (a burst's item may then share its predecessor's block).
    want_write : ``Out(1)``
        The item is a write meeting rule 2 (i)-(iii): it asks :class:`WriteArbiter` for the cycle's write.
    grant : ``In(1)``
        The port's write is the one granted in this cycle (rule 2 (iv)).
    accept : ``Out(1)``
        The item is accepted in this cycle.
    meta : ``Out(response_entry(shape, channels, max_blocks))``
        The item's response queue entry: ``tag``, ``write``, and the ``n`` blocks it leaves to enqueue, the
        first on channel ``ch``.
    """

    def __init__(self, shape: MemPortShape, channels: int, max_blocks: int, request_bytes: int,
                 faults: DramFaults | None, index: int):
        self.shape, self.channels, self.max_blocks, self.request_bytes = shape, channels, max_blocks, request_bytes
        self.faults, self.index = faults, index
        super().__init__({"item": In(stream.Signature(item_layout(shape))), "stall": In(1), "free": In(1),
                          "room": In(1), "pending": In(1), "want_write": Out(1), "grant": In(1),
                          "accept": Out(1), "meta": Out(response_entry(shape, channels, max_blocks))})

    def elaborate(self, platform):
        m = Module()
        item, req, f = self.item, self.item.payload, self.faults
        can = Signal()                       # rule 2 (i)-(iii), and not refused
        ok = item.valid & self.room & ~self.stall & self.free
        if f is not None:
            ok &= ~coin(m, f, f.refuse, 1000 + self.index, f"refuse{self.index}")
        m.d.comb += [can.eq(ok), self.want_write.eq(can & req.write),
                     self.accept.eq(can & (~req.write | self.grant)), item.ready.eq(self.accept)]
        ch0, n = self._blocks(m)
        m.d.comb += [self.meta.tag.eq(req.tag), self.meta.write.eq(req.write), self.meta.ch.eq(ch0),
                     self.meta.n.eq(n)]
        return m

    def _blocks(self, m: Module) -> tuple[Signal, Signal]:
        """``(ch0, n)``: the item's blocks left to enqueue (rule 1), ``n`` of them from channel ``ch0`` on.

        A burst: an item's first block that is the port's last block of the item before it, not yet
        answered, is that block (it costs no channel slot; in-order responses make this item wait for it).
        """
        req, RB, WB, C = self.item.payload, self.request_bytes, self.shape.word_bytes, self.channels
        nbytes = Signal(range(WB + 1))
        m.d.comb += nbytes.eq(Mux(req.bytes == 0, 1, Mux(req.bytes > WB, WB, req.bytes)))
        first, last_b = Signal(len(req.addr)), Signal(len(req.addr) + 1, name="last")
        n, ch0 = Signal(range(self.max_blocks + 1)), Signal(range(C))
        prev_blk, merged = Signal(len(req.addr) + 1, name="prev_block"), Signal()
        start_b = Signal(len(req.addr) + 1, name="start_block")
        m.d.comb += [first.eq(_div(req.addr, RB)), last_b.eq(_div(req.addr + nbytes - 1, RB)),
                     merged.eq(req.cont & self.pending & (first == prev_blk)),
                     start_b.eq(first + merged), n.eq(last_b + 1 - start_b), ch0.eq(_mod(start_b, C))]
        with m.If(self.accept):
            m.d.sync += prev_blk.eq(last_b)
        return ch0, n


class WriteArbiter(wiring.Component):
    """The one write accepted per cycle (rule 2 (iv)), round-robin over the ports.

    Of the ports asking, the first after the port whose write was granted last, in the cyclic order port0,
    port1, ... (port0 first after reset). A granted write is always accepted.

    Parameters
    ----------
    ports : int
        Memory ports.

    Attributes
    ----------
    want : ``In(ports)``
        Bit p: port p has a write meeting rule 2 (i)-(iii).
    grant : ``Out(ports)``
        Bit p: port p's write is granted in this cycle (one bit at most).
    """

    def __init__(self, ports: int):
        self.ports = ports
        super().__init__({"want": In(ports), "grant": Out(ports)})

    def elaborate(self, platform):
        m = Module()
        P = self.ports
        last_w = Signal(range(P), init=P - 1)
        w_grant, w_any = Signal(range(P)), Signal()
        with m.Switch(last_w):
            for lp in range(P):
                with m.Case(lp):
                    for j in range(P):
                        q = (lp + 1 + j) % P
                        with (m.If if j == 0 else m.Elif)(self.want[q]):
                            m.d.comb += [w_grant.eq(q), w_any.eq(1)]
        with m.If(w_any):
            m.d.sync += last_w.eq(w_grant)
        m.d.comb += [self.grant[p].eq(w_any & (w_grant == p)) for p in range(P)]
        return m


class Enqueue(wiring.Component):
    """Every port's sequencer, and which of them enqueues which blocks in a cycle (rule 3).

    A sequencer holds the blocks of its port's accepted item still to enqueue. In a cycle the sequencers
    take turns from port ``turn``, each claiming the channels of its next blocks in address order, up to the
    first whose channel has no room or was claimed by a sequencer before it; so a channel takes one block a
    cycle at most. ``turn`` moves on after every cycle in which a sequencer holds an item: it depends on the
    traffic alone, not on how long the memory sat idle before it (loading, configuration).

    Parameters
    ----------
    ports, channels : int
        Memory ports and channels of the model.
    max_blocks : int
        Most blocks an item covers.

    Attributes
    ----------
    load, load_ch, load_n : ``In(1)``, ``In(range(channels))``, ``In(range(max_blocks + 1))``, each ``.array(ports)``
        Port p's item is accepted: from the next cycle its sequencer holds ``load_n[p]`` blocks, the first on
        channel ``load_ch[p]``, the others on the channels after it, cyclically (none when ``load_n[p]`` is 0:
        a burst's item wholly in its predecessor's block).
    free : ``Out(1).array(ports)``
        Port p's sequencer is empty, or enqueues its last block in this cycle: it takes the next item
        (rule 2 (i)).
    room : ``In(channels)``
        Bit c: channel c's queue has room.
    enq, enq_port : ``Out(channels)``, ``Out(range(ports)).array(channels)``
        Bit c: channel c takes a block of port ``enq_port[c]`` in this cycle.
    """

    def __init__(self, ports: int, channels: int, max_blocks: int):
        self.ports, self.channels, self.max_blocks = ports, channels, max_blocks
        self.K = min(max_blocks, channels)   # most blocks one sequencer enqueues in one cycle
        super().__init__({"load": In(1).array(ports), "load_ch": In(range(channels)).array(ports),
                          "load_n": In(range(max_blocks + 1)).array(ports), "free": Out(1).array(ports),
                          "room": In(channels), "enq": Out(channels),
                          "enq_port": Out(range(ports)).array(channels)})

    def elaborate(self, platform):
        m = Module()
        P, C = self.ports, self.channels
        # the sequencers: an item held, its next block's channel, its blocks left
        h_valid = [Signal(name=f"h_valid{q}") for q in range(P)]
        h_ch = [Signal(range(C), name=f"h_ch{q}") for q in range(P)]
        h_rem = [Signal(range(self.max_blocks + 1), name=f"h_rem{q}") for q in range(P)]
        turn = Signal(range(P))
        with m.If(Cat(*h_valid).any()):
            m.d.sync += turn.eq(Mux(turn == P - 1, 0, turn + 1))
        claimed, oks_of = Const(0, C), {}
        for tag in "ab":                     # a: ports turn .. P-1, then b: ports 0 .. turn-1
            for q in range(P):
                active = Signal(name=f"turn{tag}{q}")
                m.d.comb += active.eq((q >= turn) if tag == "a" else (q < turn))
                oks, claimed = self._claim(m, q, tag, active & h_valid[q], h_ch[q], h_rem[q], claimed)
                oks_of.setdefault(q, []).append(oks)
        for q in range(P):
            kq = Signal(range(self.K + 1), name=f"k{q}")
            m.d.comb += kq.eq(sum(a | b for a, b in zip(*oks_of[q])))     # (q goes in one of its two places)
            self._sequencer(m, q, h_valid[q], h_ch[q], h_rem[q], kq)
        return m

    def _claim(self, m: Module, q: int, tag: str, go, ch, rem, claimed) -> tuple[list[Signal], Signal]:
        """Sequencer q in its place ``tag`` of the turn order (``go``: its turn there, with an item of ``rem``
        blocks from channel ``ch`` on): returns ``(oks, claimed after it)``, ``oks[i]`` high when its ``i``-th
        next block goes, given the channels ``claimed`` before it."""
        C, K = self.channels, self.K
        rot_room = Signal(C, name=f"room{q}{tag}")         # rotated by ch: bit i is the i-th next block's
        rot_claimed = Signal(C, name=f"claimed{q}{tag}")
        before = Signal(C, name=f"claimed_before{q}{tag}")
        m.d.comb += [before.eq(claimed), rot_room.eq(Cat(self.room, self.room).bit_select(ch, C)),
                     rot_claimed.eq(Cat(before, before).bit_select(ch, C))]
        prev, oks = go, []
        for i in range(K):
            ok = Signal(name=f"enq{q}_{i}{tag}")
            m.d.comb += ok.eq(prev & (rem > i) & rot_room[i] & ~rot_claimed[i])
            oks.append(ok)
            prev = ok
        # the channels claimed: rotate the claims back by ch
        mine = Signal(C, name=f"mine{q}{tag}")
        spread = Cat(*oks, Const(0, C - K)) if C > K else Cat(*oks)
        back = Signal(range(C + 1), name=f"unrotate{q}{tag}")
        m.d.comb += [back.eq(C - ch), mine.eq(Cat(spread, spread).bit_select(back, C) if C > 1 else spread)]
        after = Signal(C, name=f"claimed_after{q}{tag}")
        m.d.comb += after.eq(before | mine)
        for c in range(C):
            with m.If(mine[c]):
                m.d.comb += [self.enq[c].eq(1), self.enq_port[c].eq(q)]
        return oks, after

    def _sequencer(self, m: Module, q: int, valid, ch, rem, k) -> None:
        """Sequencer q's item (``valid``, next channel ``ch``, ``rem`` blocks left) after a cycle in which it
        enqueued ``k`` blocks, or the next item of its port (``load``)."""
        C = self.channels
        finishing = Signal(name=f"finishing{q}")
        nxt = Signal(range(2 * C), name=f"nxt{q}")
        m.d.comb += [finishing.eq(valid & (k == rem)), self.free[q].eq(~valid | finishing), nxt.eq(ch + k)]
        m.d.sync += [rem.eq(rem - k), ch.eq(Mux(nxt >= C, nxt - C, nxt))]
        with m.If(finishing):
            m.d.sync += valid.eq(0)
        with m.If(self.load[q]):             # (after the updates above: a load in a finishing cycle wins)
            m.d.sync += [valid.eq(self.load_n[q] != 0), ch.eq(self.load_ch[q]), rem.eq(self.load_n[q])]


class DramChannels(wiring.Component):
    """The channels (rule 4): each a queue of blocks, an issue interval and an in-flight limit; and the delay
    line that completes every block ``latency`` cycles after its issue.

    Parameters
    ----------
    params : DramParams
        The model's timing (``channels``, ``queue``, ``interval``, ``channel_inflight``, ``latency``).
    ports : int
        Memory ports of the model (a queued block is its port's number).
    faults : DramFaults or None
        With ``jitter``, a channel holds its head block back in a random cycle (channel c's own pattern,
        salt ``c``).

    Attributes
    ----------
    enq, enq_port : ``In(channels)``, ``In(range(ports)).array(channels)``
        Bit c: a block of port ``enq_port[c]`` joins channel c's queue at the clock edge (only with room).
    room : ``Out(channels)``
        Bit c: channel c's queue held fewer than ``queue`` blocks at the start of the cycle.
    done, done_port : ``Out(channels)``, ``Out(max(1, (ports - 1).bit_length())).array(channels)``
        Bit c: a block of port ``done_port[c]`` issued on channel c ``latency`` cycles before completes in
        this cycle (``done_port[c]`` means something only then).
    """

    def __init__(self, params: DramParams, ports: int, faults: DramFaults | None):
        self.params, self.faults = params, faults
        self.pbits = max(1, (ports - 1).bit_length())
        C = params.channels
        super().__init__({"enq": In(C), "enq_port": In(range(ports)).array(C), "room": Out(C),
                          "done": Out(C), "done_port": Out(self.pbits).array(C)})

    def elaborate(self, platform):
        m = Module()
        C = self.params.channels
        issue = Signal(C)
        issue_port = [self._channel(m, c, issue[c]) for c in range(C)]
        self._line(m, issue, issue_port)
        return m

    def _channel(self, m: Module, c: int, issue) -> Value:
        """Channel c: drives ``issue`` (its head block is issued in this cycle) and returns the port of that
        block. It issues if it issued nothing in the last ``interval`` - 1 cycles, fewer than
        ``channel_inflight`` of its blocks are outstanding and no jitter holds it back."""
        p_, f = self.params, self.faults
        m.submodules[f"queue{c}"] = q = fifo.SyncFIFO(width=self.pbits, depth=p_.queue)
        m.d.comb += [self.room[c].eq(q.w_rdy), q.w_en.eq(self.enq[c]), q.w_data.eq(self.enq_port[c]),
                     q.r_en.eq(issue)]
        ready_to_issue = Signal(name=f"ch_free{c}")
        if p_.interval > 1:
            busy = Signal(range(p_.interval), name=f"busy{c}")
            with m.If(issue):
                m.d.sync += busy.eq(p_.interval - 1)
            with m.Elif(busy != 0):
                m.d.sync += busy.eq(busy - 1)
            m.d.comb += ready_to_issue.eq(busy == 0)
        else:
            m.d.comb += ready_to_issue.eq(1)
        limit = p_.channel_inflight
        outstanding = Signal(range(limit + 1), name=f"outstanding{c}")
        # a block completing this cycle no longer counts against the limit (outstanding s .. s+latency-1)
        can_issue = q.r_rdy & ready_to_issue & (outstanding < limit + self.done[c])
        if f is not None:
            can_issue &= ~coin(m, f, f.jitter, c, f"jitter{c}")
        m.d.comb += issue.eq(can_issue)
        m.d.sync += outstanding.eq(outstanding + issue - self.done[c])
        return q.r_data

    def _line(self, m: Module, issue, issue_port) -> None:
        """The completions: a delay line of every cycle's ``(issue, issue_port)`` per channel, ``latency`` long
        (initially empty), whose far end drives ``done`` and ``done_port``."""
        C, L, entry = self.params.channels, self.params.latency, 1 + self.pbits
        m.submodules.line = line = memory.Memory(shape=unsigned(C * entry), depth=L, init=[])
        line_rd = line.read_port(domain="comb")
        line_wr = line.write_port()
        ptr = Signal(range(L))
        m.d.comb += [line_rd.addr.eq(ptr), line_wr.addr.eq(ptr), line_wr.en.eq(1),
                     line_wr.data.eq(Cat(*(Cat(issue[c], issue_port[c]) for c in range(C))))]
        m.d.sync += ptr.eq(Mux(ptr == L - 1, 0, ptr + 1))
        # the line holds `latency` cycles of issues since reset (a memory's initial contents are not reliably
        # zero in every simulator's Verilog)
        warm = Signal()
        with m.If(ptr == L - 1):
            m.d.sync += warm.eq(1)
        m.d.comb += [self.done[c].eq(warm & line_rd.data[c * entry]) for c in range(C)]
        m.d.comb += [self.done_port[c].eq(line_rd.data[c * entry + 1:(c + 1) * entry]) for c in range(C)]


class PortResponses(wiring.Component):
    """The response side of one port: its accepted items' responses, in order, each once its blocks are
    complete (rule 5).

    The response queue holds every accepted item's entry (:func:`response_entry`) until its response is
    transferred; beside it a ring of ``resp_depth`` words holds the reads' data, read from the array as they
    are accepted.

    Parameters
    ----------
    shape : MemPortShape
        The model's port widths.
    channels, max_blocks, resp_depth : int
        Channels of the model, most blocks of an item, entries of the queue.
    faults : DramFaults or None
        With ``hold``, a complete response is held back in a random cycle (its own pattern, salt
        ``2000 + index``); once valid, it stays valid until it is transferred.
    index : int
        The port's number.
    verilog : bool
        The ring as an instance of :data:`ARRAY_MODULE` (:class:`WideMemory`).

    Attributes
    ----------
    push, meta, data : ``In(1)``, ``In(response_entry(shape, channels, max_blocks))``, ``In(shape.data_bits)``
        An item is accepted: its entry and, for a read, its data join the queue.
    room, pending : ``Out(1)``, ``Out(1)``
        The queue has room for another entry; the queue is not empty.
    arrive : ``In(channels)``
        Bit c: a block of this port completes on channel c in this cycle.
    resp : ``Out(stream.Signature(response_layout(shape)))``
        The port's responses (a write's ``rdata`` is 0).
    """

    def __init__(self, shape: MemPortShape, channels: int, max_blocks: int, resp_depth: int,
                 faults: DramFaults | None, index: int, verilog: bool):
        self.shape, self.channels, self.max_blocks, self.resp_depth = shape, channels, max_blocks, resp_depth
        self.faults, self.index, self.verilog = faults, index, verilog
        self.entry = response_entry(shape, channels, max_blocks)
        super().__init__({"push": In(1), "meta": In(self.entry), "data": In(shape.data_bits), "room": Out(1),
                          "pending": Out(1), "arrive": In(channels),
                          "resp": Out(stream.Signature(response_layout(shape)))})

    def elaborate(self, platform):
        m = Module()
        resp = self.resp
        m.submodules.queue = mq = fifo.SyncFIFO(width=self.entry.size, depth=self.resp_depth)
        head = Signal(self.entry)
        m.d.comb += [mq.w_en.eq(self.push), mq.w_data.eq(self.meta), self.room.eq(mq.w_rdy),
                     self.pending.eq(mq.r_rdy), head.eq(mq.r_data)]
        take = Signal()
        ring_data = self._ring(m, head, take)
        complete = Signal()
        m.d.comb += complete.eq(mq.r_rdy & self._tally(m, head, take))
        m.d.comb += [resp.valid.eq(self._hold(m, complete, take)),
                     resp.payload.rdata.eq(Mux(head.write, 0, ring_data)), resp.payload.tag.eq(head.tag),
                     take.eq(resp.valid & resp.ready), mq.r_en.eq(take)]
        return m

    def _ring(self, m: Module, head, take) -> Signal:
        """The ring of the reads' data: written as a read is accepted, read for the queue's ``head`` (moving
        on as a read's response is taken, ``take``); returns the head read's data."""
        R = self.resp_depth
        ring = WideMemory(m, "slots", self.shape.data_bits, R, 1, verilog=self.verilog)
        w_slot, r_slot = Signal(range(R)), Signal(range(R))
        write = self.push & ~self.meta.write
        m.d.comb += [ring.we.eq(write), ring.waddr.eq(w_slot), ring.wdata.eq(self.data), ring.raddr[0].eq(r_slot)]
        with m.If(write):
            m.d.sync += w_slot.eq(Mux(w_slot == R - 1, 0, w_slot + 1))
        with m.If(take & ~head.write):
            m.d.sync += r_slot.eq(Mux(r_slot == R - 1, 0, r_slot + 1))
        return ring.rdata[0]

    def _tally(self, m: Module, head, take) -> Value:
        """Whether the ``head`` item's blocks are all complete, from a count per channel of the port's
        completed blocks not yet answered (an answer, ``take``, removes the head's).

        Its ``n`` blocks from channel ``ch`` on are ``n // channels`` on every channel and one more on the
        ``n % channels`` channels from ``ch``; a channel completes its blocks in order and the port's items
        are answered in order, so the head's blocks on a channel are the first ones counted there."""
        C, NB = self.channels, self.max_blocks
        full, extra = Signal(range(NB // C + 2), name="full"), Signal(range(C), name="extra")
        if C & (C - 1) == 0:
            m.d.comb += [full.eq(head.n >> (C.bit_length() - 1)), extra.eq(head.n & (C - 1))]
        else:
            m.d.comb += [full.eq(head.n // C), extra.eq(head.n % C)]
        checks = []
        for c in range(C):
            need = Signal(range(NB + 1), name=f"need{c}")
            dist = Signal(range(C), name=f"dist{c}")         # (c - first channel) mod C
            # (for the last channel ``ch <= c`` always holds: no comparison, which Verilator flags)
            wrap = c - head.ch if c == C - 1 else Mux(head.ch <= c, c - head.ch, c + C - head.ch)
            m.d.comb += [dist.eq(wrap), need.eq(full + (dist < extra))]
            done = Signal(range(self.resp_depth * NB + 1), name=f"done{c}")
            checks.append(done + self.arrive[c] >= need)
            m.d.sync += done.eq(done + self.arrive[c] - Mux(take, need, 0))
        return Cat(*checks).all()

    def _hold(self, m: Module, complete, take) -> Value:
        """``valid`` of the head's response: ``complete``, unless a ``hold`` fault holds it back before it is
        shown (never withdrawn: once valid, valid until the transfer, ``take``)."""
        f = self.faults
        if f is None or not f.hold:
            return complete
        shown = Signal()
        show = complete & (shown | ~coin(m, f, f.hold, 2000 + self.index, f"hold{self.index}"))
        with m.If(take):
            m.d.sync += shown.eq(0)
        with m.Elif(show):
            m.d.sync += shown.eq(1)
        return show


class WideMemory:
    """A memory of ``depth`` words of ``width`` bits built into a module: one write port, ``reads``
    combinational read ports (not a component: it adds no Verilog module of its own).

    It is Amaranth memories at most 1,024 bits wide (a wider one overflows the Python compiler's recursion
    limit in the simulator), or one instance of :data:`ARRAY_MODULE`.

    Parameters
    ----------
    m : Module
        The module it is built into.
    name : str
        Its name there (of its memories, ``name0``, ``name1``, ..., or of its instance).
    width, depth, reads : int
        Bits of a word, words, read ports.
    init : sequence of int
        Initial words, padded with zeros to ``depth`` (Amaranth memories only).
    verilog : bool
        An instance of :data:`ARRAY_MODULE`, for Verilog that is given :data:`ARRAY_VERILOG`: every word 0 at
        the start, no image to convert.
    loadable : bool
        With ``verilog``: the instance reads its image from the file the plusarg ``+step_image`` names.

    Attributes
    ----------
    we, waddr, wdata : Signal
        In a cycle with ``we`` high, word ``waddr`` becomes ``wdata`` at the clock edge.
    raddr, rdata : list of Signal
        ``rdata[r]`` is word ``raddr[r]`` (combinational).
    """

    def __init__(self, m: Module, name: str, width: int, depth: int, reads: int, init=(), verilog: bool = False,
                 loadable: bool = False):
        self.we, self.waddr, self.wdata = Signal(name=f"{name}_we"), Signal(range(depth), name=f"{name}_waddr"), \
            Signal(width, name=f"{name}_wdata")
        self.raddr = [Signal(range(depth), name=f"{name}_raddr{r}") for r in range(reads)]
        self.rdata = [Signal(width, name=f"{name}_rdata{r}") for r in range(reads)]
        if verilog:
            m.submodules[name] = Instance(
                ARRAY_MODULE, p_WIDTH=width, p_DEPTH=depth, p_AW=len(self.waddr), p_READS=reads,
                p_LOADABLE=int(loadable), i_clk=ClockSignal(), i_we=self.we, i_waddr=self.waddr,
                i_wdata=self.wdata, i_raddr=Cat(*self.raddr), o_rdata=Cat(*self.rdata))
            return
        image = list(init) + [0] * (depth - len(init))
        for j, lo in enumerate(range(0, width, _CHUNK)):
            part = min(_CHUNK, width - lo)
            mask = (1 << part) - 1
            m.submodules[f"{name}{j}"] = mem = memory.Memory(shape=unsigned(part), depth=depth,
                                                             init=[w >> lo & mask for w in image])
            wp = mem.write_port()
            m.d.comb += [wp.en.eq(self.we), wp.addr.eq(self.waddr), wp.data.eq(self.wdata[lo:lo + part])]
            for addr, out in zip(self.raddr, self.rdata):
                rp = mem.read_port(domain="comb")
                m.d.comb += [rp.addr.eq(addr), out[lo:lo + part].eq(rp.data)]
