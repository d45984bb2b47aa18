"""Fast approximate performance model: the STeP graph as timed processes.

The model runs the user's graph — logical tiles, not the lowered one — with
the reference interpreter's operator code, but as a discrete-event simulation:
every node is a process with a clock, every edge a bounded FIFO (the fabric's
depth), and every token transfer takes time from a rule derived from the
fabric:

* moving a tile costs one cycle per token of the lowered stream
  (:func:`step_hdl.mapper.tiling.stream_tokens`: its physical tiles as the
  tiling pass cuts it, ``P x P`` blocks or ``[1, P]`` row tiles for a dynamic
  or non-multiple row count, plus the stop closing each block row), whatever
  its element type: a stream's payload is one physical tile of the stream's own
  type (``units.layout.TileFormat``, width by dtype), so the int32 output of an
  int16 matmul moves at one tile per cycle like its operands;
* tiles with a dynamic row count, or a static one that is not a multiple of
  ``P``, move cut-through: the RTL passes their
  ``[1, P]`` rows on one by one, so a row-granular unit (element-wise map,
  broadcast, routing, column reduction, matmul) starts on a
  token's first row and its output's last row leaves one cycle after its
  input's, or when its own cost since the start is over; operands it needs
  whole (a static matmul operand, a ``[1, C]`` vector broadcast over rows)
  gate the start. Other tiles are store-and-forward;
* a Map or Accum element costs ``max(input tiles, compute cycles, output
  tiles)``; a matmul unit (``units.matmul``) multiplies one pair of physical
  tiles per cycle (``[m/P, k/P, n/P]`` products, ``m`` row tiles when ``m`` is
  not a multiple of ``P``: ``P³`` MACs per cycle on full tiles) and counts
  each output tile's ``k/P`` products itself, so only the stop closing each
  block row of its operands' reads costs a cycle; element-wise units one
  physical tile per cycle; a matmul's output pieces leave one by one;
* a matmul's first operand is re-read from an on-chip buffer that streams
  (``units.onchip``: an entry is read once written), so the matmul starts on
  that operand's first piece (its second operand, re-read column by column, it
  needs whole) and ends no earlier than the last row's other ``n/P - 1``
  output tiles after the operand's last piece (:meth:`Model.stream_tail`);
* an edge's FIFO holds ``depth`` lowered tokens, as the RTL's: a logical tile
  takes as many places as its physical tiles (:func:`stream_tokens`); one of
  more pieces than ``depth`` enters an empty FIFO only and holds its producer
  until the consumer has taken it (the RTL unit is still sending its last
  pieces), so a long path buffers what the RTL buffers, not ``depth`` logical
  tiles;
* a token spends the pipeline cycles of the units the lowering makes of its
  node (:func:`~step_hdl.mapper.latency.chain_latency`: on the slowest path
  through them, a FIFO cycle into each unit after the first, ``units.stream.Queue``
  latency 1, and each unit's declared ``latency``: a Map's output register, an
  on-chip buffer's SRAM read and register): it arrives that much later, at
  the same rate, the edge holding that many tokens more (the chain's
  registers and FIFOs hold them);
* a tile whose rows a unit passes on as they come (an element-wise map, a
  broadcast, routing, packing rows into a tile) is timed by its first and
  its last piece: the consumer, if free, starts on the first piece, however
  late the producer has taken its last input; a reduction's output (a column
  sum) and a load's pieces come at the end;
* routing with a selector costs one cycle per selector token plus the transfer
  of each routed token (a multi-hot copy is one transfer); a stop or done
  token costs one cycle, except a stop right after a tile on the same output:
  the lowered stream merges it into the stop that closes the tile's last
  row of pieces (``units.merger``); an index, address or table record is one
  token with no closing stop;
* off-chip addresses are where the RTL lays the tensors out
  (:func:`~step_hdl.mapper.plan.tensor_layout`), and a random load's or store's
  request goes out when its address (and a store's data) is whole;
* off-chip tiles go through :class:`Dram`, which has the parameters of the
  RTL's DRAM model (:class:`DramParams`): channels, bytes per request, latency,
  cycles between requests per channel, requests in flight; at the addresses
  where the RTL lays them out (:meth:`TimedMemory.where`: physical tile after
  physical tile, row by row of the whole tensor, so a tile narrower than its
  tensor is a run of bytes per physical row, on the channels those runs map to);
* a load issues a tile's DRAM access when it starts to send that tile, and
  the following tiles as its ``mem_inflight`` physical-tile credits allow
  (``units.offchip`` ``_Tracker``: a request only while a credit is free, a
  credit back when its response leaves the unit): at once while they fit, else
  when enough pieces of the tiles before them have left (one a cycle once their
  responses are in), so a tile of more pieces than credits overlaps the next
  one's requests as the RTL walk does, not the whole stream up front; and it
  streams each tile out as the responses arrive (II 1
  per tile while the memory keeps up), so the send takes ``max(transfer, DRAM
  completion)``, not their sum; a random load also issues the requests of the
  addresses already waiting at its input, as the RTL unit takes addresses
  while it has credits, and a linear load whose ``ref`` elements each re-read
  one block (the MoE experts' weights per token tile) issues the blocks of the
  ref elements already waiting once its current block is issued
  (:meth:`TimedMemory.ref_prefetcher`), as the RTL walk goes on into them;
* a random store writes a tile as its (address, data) pair arrives and sends
  the acknowledgement when the memory has done the write (latency + 2), in
  request order; it takes the next pair meanwhile, up to ``mem_inflight``
  unacknowledged writes (``units.offchip`` ``_Tracker``), and its stops and
  done follow the acknowledgements before them.

The operators every fine-grained token passes through (random loads,
broadcasts, flat maps, accumulators) run as fused loops here, the timed
ports' reads inlined: the same port operations and results as their own
code, with less interpreter work per token (``Model(fused=False)`` runs
their own code).

Data values are optional: with ``timing_only=True`` tiles are
:class:`~step_hdl.functions.ShapeOnly` (sizes without values) so full-size
models run without the arithmetic; indices and selectors keep their values
(they decide routing). The model reports total cycles, per-node busy,
stalled (output FIFO full) and idle (input empty) cycles, off-chip bytes and
bandwidth utilization, compute utilization, and detects deadlock naming the
blocked channels.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from step_hdl import ops
from step_hdl.errors import StepDeadlockError, StepRuntimeError, where
from step_hdl.functions import ShapeOnly
from step_hdl.interp import Context, bindings_of
from step_hdl.mapper.fifo import capped_edges, capped_hints
from step_hdl.mapper.latency import chain_latency
from step_hdl.mapper.tiling import (BLOCKS, ELEMENTWISE, ROW_REDUCE, ROWS, row_blocks, counted_streams, in_row_blocks,
                                    physical_tiles, row_tiled, stream_tokens)
from step_hdl.process import Channel, Emitter, Ports, emit_block
from step_hdl.token import DONE, data, stop
from step_hdl.types import Tile, dims_equal

from .bounds import CycleBound, cycle_bound
from .dram import Dram, DramParams
from .memory import TimedMemory

_new_shape_only = object.__new__


# ----------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class ModelParams:
    """What the model needs of a fabric: physical tile, element type, FIFO depths, memory credits, DRAM.

    Build it from the fabric the RTL runs on with :meth:`from_fabric`, so both time the same hardware:
    ``fifo_depth`` and ``max_fifo_depth`` size every edge by :func:`step_hdl.mapper.fifo.edge_depth` as the
    plan does, and ``mem_inflight`` is the physical-tile requests each off-chip load keeps in flight
    (:attr:`step_hdl.mapper.fabric.Fabric.mem_inflight`).
    """

    tile: int
    dtype: str
    fifo_depth: int
    mem_inflight: int
    dram: DramParams
    max_fifo_depth: int
    #: the fabric's ``pipeline``: the compute units' function stages, each a cycle of latency
    pipeline: bool

    @classmethod
    def from_fabric(cls, fabric, dram: DramParams) -> "ModelParams":
        """The parameters of ``fabric`` (a :class:`~step_hdl.mapper.fabric.Fabric`) with DRAM timing
        ``dram``."""
        return cls(tile=fabric.tile, dtype=fabric.dtype, fifo_depth=fabric.fifo_depth,
                   mem_inflight=fabric.mem_inflight, dram=dram, max_fifo_depth=fabric.max_fifo_depth,
                   pipeline=fabric.pipeline)

    @property
    def matmul_flops(self) -> int:
        return 2 * self.tile ** 3


# ----------------------------------------------------------------------------- timed ports

class _Proc:
    __slots__ = ("node", "gen", "busy", "stalled", "idle", "since", "state", "finish", "ports")

    def __init__(self, node):
        self.node, self.gen = node, None
        self.busy = self.stalled = self.idle = 0
        self.since, self.state, self.finish = 0, None, 0


class TimedChannel(Channel):
    __slots__ = ("depth", "data_waiters", "space_waiters", "ends", "on_push", "pushed", "fill", "sizes", "need")

    def __init__(self, name, depth):
        super().__init__(name, record=False)
        self.depth = depth              # in lowered tokens (physical tiles and stops), as the RTL FIFO's
        self.fill = 0                   # lowered tokens queued
        self.sizes: deque = deque()     # per queued token: the lowered tokens it is
        self.need = 1                   # the lowered tokens of the token waiting to be pushed
        self.ends: deque = deque()      # per queued token: (when its first, when its last physical tile arrives)
        self.on_push = None             # called after each push (a random load's address input)
        self.pushed = 0                 # tokens pushed so far (counted where on_push is set)
        self.data_waiters: list = []
        self.space_waiters: list = []

    def room(self) -> bool:
        """Whether the waiting token fits: the RTL FIFO holds ``depth`` physical tiles, so a logical tile of
        more pieces than that streams through an empty FIFO only, and a smaller one waits for its pieces'
        room."""
        return not self.queue or self.fill + self.need <= self.depth


class TimedPorts(Ports):
    """Ports whose reads and writes take simulated time (see the module docstring)."""

    def __init__(self, node, ins, outs, ctx, proc, model):
        super().__init__(node, ins, outs, ctx)
        self.proc, self.model = proc, model
        self.taken: dict = {}       # the last data token taken per input port
        self.cut_through, self.streamed = model.cut_through(node)
        self.first = None           # when the unit started on the first input of the output being made
        self.free = 0               # when the unit finished sending its last output
        self.after_data: set = set()    # the output ports whose last token was data
        self.avail = 0              # when the last physical tile of those inputs has arrived
        self.whole = 0              # ... of those the unit needs whole before it starts (buffered operands)
        self.router = node.routes
        self.load = node.memory == "load"
        self.random_load = self.load and node.addressed
        self.random_store = node.memory == "store" and node.addressed
        self.acks: deque = deque()  # a random store's unacknowledged writes: when each acknowledgement leaves
        self.linear_store = node.memory == "store" and not node.addressed
        # the cost of a token of a node without compute (not a Map, Accum or Scan): its physical tiles
        self.plain = not node.computes
        self.out_cut = model._node_info(node)[2]    # how the lowering cuts its output tiles' rows
        self.tail = model.stream_tail(node)
        self.port_tail = model.port_tail(node)
        self.blocks = model.block_buffer(node)     # packing or unpacking P-row blocks: its buffer's timing
        self._pieces_of: dict = {}  # lowered tokens per payload shape
        # an index, selector, address or table record is one token, with no stop closing it as a row tile's
        # (the lowering adds no block dims to such streams: ``indices`` of the lowered graph)
        self.scalar_out = bool(node.out_types) and all(
            not isinstance(st.dtype, Tile) or f"{node.name}.{p}" in model.indices for p, st in node.out_types.items())
        if self.plain:
            self._cost = self._pieces   # a node without compute: one cycle per lowered token it sends
        if self.random_load:
            self._prefetch = ctx.memory.prefetcher(node, ins["addr"], model.params.mem_inflight)
        self._ref_prefetch = (ctx.memory.ref_prefetcher(node, ins["ref"], model.params.mem_inflight)
                              if self.load and "ref" in ins else None)
        # the pipeline cycles of the units the lowering makes of this node: its tokens arrive that much later
        self.chain = model.chain.get(node.name, 0)
        self.passes_rows = self.cut_through and model.passes_rows(node)

    def get(self, port):
        ch = self.ins[port]
        queue = ch.queue
        while not queue:
            yield ("data", (ch,))
        tok = queue.popleft()
        _take(self, port, ch, tok, *ch.ends.popleft())
        if self.router and port == "sel" and not tok.stop and not tok.done:
            yield ("delay", 1)              # the selector cycle
        return tok

    def peek(self, port):
        ch = self.ins[port]
        while not ch.queue:
            yield ("data", (ch,))
        return ch.queue[0]

    def wait_any(self, ports):
        chans = [self.ins[p] for p in ports]
        while True:
            ready = [p for p, ch in zip(ports, chans) if ch.queue]
            if ready:
                return ready[0]
            yield ("data", tuple(chans))

    def _cost(self, tok) -> int:
        return self.model.cost(self.node, tok, self.taken)

    def _send_cycles(self, tok) -> int:
        """Cycles until ``tok`` has left the unit.

        An off-chip load streams each physical tile out as its response arrives
        (``units.offchip``: a request per tile while a credit is free, II 1 per tile
        while the memory keeps up), so a logical tile's transfer overlaps its DRAM
        access: it is done when both the last response is in and its tiles have
        streamed, not after the one and then the other.
        """
        cost = self._cost(tok)
        if self.load and not tok.stop and not tok.done:
            model = self.model
            now = model.now
            ready = self.ctx.memory.issue(self.node.name, now, model.params.mem_inflight, self._pieces(tok))
            if self.random_load:
                self._prefetch()
            elif self._ref_prefetch is not None:
                self._ref_prefetch()
            if ready - now > cost:
                cost = ready - now
        return cost

    def _pieces(self, tok) -> int:
        """The lowered tokens ``tok`` is on its stream (physical tiles and the stops among them)."""
        if tok.stop or tok.done or self.scalar_out:
            return 1
        payload = tok.payload
        tp = type(payload)
        if tp is not ShapeOnly and tp is not np.ndarray:
            return max(1, self.model._tiles(payload, self.out_cut))
        n = self._pieces_of.get(payload.shape)      # it depends on the shape only
        if n is None:
            n = self._pieces_of[payload.shape] = max(1, self.model._tiles(payload, self.out_cut))
        return n

    def put(self, port, tok):
        if self.random_load and self.avail > self.model.now:
            return self._put_when_whole(port, tok)
        return self.put_all((port,), tok, self._send_cycles(tok))

    def _put_when_whole(self, port, tok):
        yield from self._address_whole()
        yield from self.put_all((port,), tok, self._send_cycles(tok))

    def _address_whole(self):
        """A random load's request goes out when its address is whole (an address passed on as it was
        made is taken on its first piece)."""
        yield ("delay", self.avail - self.model.now)
        self.first = self.model.now

    def put_all(self, ports, tok, cost=None):
        """Send ``tok`` on ``ports`` (a Broadcast's copies go out together).

        Store and forward: the token is pushed once its ``cost`` cycles are
        over, and not before its inputs' last physical tiles have arrived.
        Cut-through (:meth:`Model.cut_through`: streams of row tiles, which
        every unit passes on row by row): the unit starts when its first input
        is there and its whole operands (a matmul's static operand, the
        ``[1, C]`` vector broadcast over rows: the RTL buffers them) have
        arrived; the token is pushed one cycle after, stamped with when its
        last physical tile leaves, ``max(start + cost, streamed inputs' last
        tile + 1)``, and the unit stays busy until then.
        """
        is_data = not tok.stop and not tok.done
        # a stop right after a tile merges with the stop that closes the tile's last row of pieces on the
        # lowered stream (``units.merger``: one stop token of the higher level), so it costs no cycle
        merged = tok.stop and not self.scalar_out and self.after_data.issuperset(ports)
        if merged:
            cost = 0
        elif cost is None:
            cost = self._cost(tok)
        if is_data:
            self.after_data.update(ports)
        else:
            self.after_data.difference_update(ports)
        model = self.model
        now = model.now
        lead = None     # when its first piece leaves, if before it is pushed (a unit passing rows on)
        if is_data and self.blocks is not None:
            due = self.blocks.due()
            if due > now:
                yield ("delay", due - now)
                now = model.now
        if is_data and self.random_store:
            # the acknowledgement is ready when the write is done (``units.offchip``: memory latency + 2),
            # in request order; writes are pipelined: the unit takes the next pair while up to mem_inflight
            # writes are unacknowledged (its tracker's credits), not after this one's acknowledgement
            yield ("delay", cost)
            acks = self.acks
            end = max(self.ctx.memory.ready[self.node.name].popleft() + 2, acks[-1] if acks else 0)
            acks.append(end)
            while len(acks) >= model.params.mem_inflight:      # the next write needs a free credit
                first = acks.popleft()
                if first > model.now:
                    yield ("delay", first - model.now)
        elif self.random_store:
            # a stop or done leaves after the acknowledgements before it
            last = self.acks[-1] if self.acks else 0
            end = max(now, last) + cost
            yield ("delay", end - now)
        elif is_data and self.cut_through:
            start = max(now if self.first is None else self.first, self.whole)
            end = max(start + cost, self.avail + 1 + self.tail, now + 1)
            # its first piece leaves after its input's first (a unit passing rows on), or with the rest at
            # the end, one a cycle
            lead = start + 1 if self.passes_rows else end - self._pieces(tok) + 1
            yield ("delay", 1)
        else:
            begin = self.avail if is_data and self.avail > now else now
            end = begin + cost
            if is_data and self.load:
                # a load streams each physical tile out as its response arrives, the last at the end: a
                # consumer that passes pieces on starts on the first, at the latest one a cycle before
                lead = end - self._pieces(tok) + 1
            yield ("delay", end - now)
        outs = self.outs
        need = 0 if merged else self._pieces(tok)
        for port in ports:
            ch = outs[port]
            queue = ch.queue
            ch.need = need
            while not ch.room():
                yield ("space", ch)
            queue.append(tok)           # TimedChannel.push: nothing recorded
            ch.fill += need
            ch.sizes.append(need)
            now = model.now
            chain = self.chain
            ch.ends.append((now if lead is None else lead + chain, (end if end > now else now) + chain))
            if ch.data_waiters:
                model.wake(ch.data_waiters)
            if ch.on_push is not None:
                ch.pushed += 1
                ch.on_push()
        for port in ports:
            ch = outs[port]
            if need > ch.depth:
                # more pieces than the FIFO holds: the unit is still sending the last of them until its
                # consumer has taken the rest, so it starts nothing new before the consumer takes the token
                while ch.queue:
                    yield ("space", ch)
        now = model.now
        if now < end and not (is_data and self.random_store):
            yield ("delay", end - now)
        if is_data:
            self.first, self.avail, self.whole = None, 0, 0
        self.free = model.now


# ----------------------------------------------------------------------------- fused operator loops

# The operators that every KV row (or other fine-grained token) passes through run here with the timed
# ports' ``get`` inlined: the same token behaviour as their ``run`` in ``step_hdl.ops`` (same port
# operations in the same order, same yields), one generator level less per token. ``Model(fused=False)``
# runs the operators' own code instead; tests/test_model.py checks both give identical results.

def _take(io, port, ch, tok, lead, end):
    """What :meth:`TimedPorts.get` does with a token just taken from ``ch`` (the selector cycle aside): its
    first physical tile arrives at ``lead``, its last at ``end``."""
    pieces = ch.sizes.popleft()
    ch.fill -= pieces
    if ch.space_waiters:
        io.model.wake(ch.space_waiters)
    if (io.linear_store or io.random_store) and not tok.stop and not tok.done:
        # the unit writes each piece as it comes (a token taken on its first piece ends at ``end``): the
        # writes go to the memory at the pieces' pace from the first piece's arrival (or from when the unit
        # is free: a random store waits for a credit), though the token is taken when whole, the last one
        # when the last piece is in (a random store's address too: no write before it is there)
        memory = io.ctx.memory
        memory.now = max(end - pieces + 1, io.free)
    if not tok.stop and not tok.done:
        io.taken[port] = tok
        if io.blocks is not None:
            io.blocks.took(io.model.now, tok, end)
        if io.first is None:
            # a unit that was free starts on the first piece as it arrives, though the token (a tile whose
            # rows a unit upstream passed on as they came) was only whole later
            io.first = max(lead, io.free)
        last = end + io.port_tail.get(port, 0)
        if last > io.avail:
            io.avail = last
        if end > io.whole and port not in io.streamed:
            io.whole = end


class _BlockBuffer:
    """The transposing on-chip buffer through which the lowering packs rows into ``P``-row blocks and
    unpacks them (``mapper.tiling``: Bufferize + Streamify ``transpose``), timed as ``units.onchip`` does:
    a block is written whole, one token a cycle, starts streaming 2 cycles after its last token has been
    written, and streams one token a cycle after the block before it (two banks)."""

    def __init__(self, P: int, cb: int):
        self.P, self.cb = P, cb
        self.read_end = 0

    def block(self, written: int, tokens: int) -> int:
        """When a block of ``tokens`` whose last token was written at ``written`` starts streaming."""
        start = max(written + 2, self.read_end)
        self.read_end = start + tokens
        return start


class _PackBuffer(_BlockBuffer):
    """Packing (Accum ``retile_row``): the rows of each block go in as they come (``cb`` tiles each), through
    the lowered Flatten and Reshape into the buffer (a register each, and the buffer's write: a row is in 3
    cycles after it arrives); the block leaves column block by column block (its rows and a stop) into the
    Accum, whose packed tile is out 1 cycle after the last block's last column has been streamed."""

    def __init__(self, P, cb):
        super().__init__(P, cb)
        self.rows, self.last = 0, 0

    def took(self, now, tok, end):
        self.rows, self.last = self.rows + 1, max(now, end) + 3
        if self.rows == self.P:
            self._close()

    def due(self) -> int:
        if self.rows:
            self._close()
        return self.read_end + 1

    def _close(self):
        """The block written so far is whole: its columns stream (each its rows and a stop)."""
        self.block(self.last, (self.rows + 1) * self.cb)
        self.rows = 0


class _UnpackBuffer(_BlockBuffer):
    """Unpacking (FlatMap ``retile_streamify``): each tile of a block becomes its rows and a stop, one token
    a cycle (after the FlatMap's register), into the buffer, which then streams the block's rows (``cb``
    tiles and a stop each) through the lowered Flatten and Reshape (2 registers); a row leaves when its
    first piece can."""

    def __init__(self, P, cb):
        super().__init__(P, cb)
        self.rows: deque = deque()

    def took(self, now, tok, end):
        n = tok.payload.shape[0]
        written = now + 1
        for b0 in range(0, n, self.P):
            r = min(self.P, n - b0)
            written += (r + 1) * self.cb
            start = self.block(written, r * (self.cb + 1))
            self.rows.extend(start + 2 + j * (self.cb + 1) for j in range(r))

    def due(self) -> int:
        return self.rows.popleft() if self.rows else 0


def _run_random_load(node, io):
    """``ops.RandomOffChipLoad.run``."""
    arr, tr, tc = node.grid(io)
    base, read, send = node.p("base"), io.ctx.memory.read_tile, io._send_cycles
    ch = io.ins["addr"]
    queue, ends, wait = ch.queue, ch.ends, ("data", (ch,))
    out = ("out",)
    while True:
        while not queue:
            yield wait
        t = queue.popleft()
        _take(io, "addr", ch, t, *ends.popleft())
        if t.stop == 0 and not t.done:
            t = data(read(node, arr, base + int(t.payload.reshape(-1)[0]), tr, tc))
            if io.avail > io.model.now:
                yield from io._address_whole()
        yield from io.put_all(out, t, send(t))
        if t.done:
            return


def _run_broadcast(node, io):
    """``ops.Broadcast.run``."""
    outs = list(node.out_types)
    ch = io.ins["in"]
    queue, ends, wait = ch.queue, ch.ends, ("data", (ch,))
    while True:
        while not queue:
            yield wait
        t = queue.popleft()
        _take(io, "in", ch, t, *ends.popleft())
        yield from io.put_all(outs, t)
        if t.done:
            return


def _run_accum(node, io):
    """``ops.Accum.run`` without kept dimensions."""
    b = node.p("rank")
    state = node.init_state(io)
    ch = io.ins["in"]
    queue, ends, wait = ch.queue, ch.ends, ("data", (ch,))
    update = node.update
    # packing value-less rows (timing-only runs): the shape that ``_Reduce.update`` (``apply_typed`` on
    # ShapeOnly operands, ``retile_row``'s rule) gives, without the generic dispatch
    pack = node.p("update").name == "retile_row" and isinstance(node._state, Tile)
    dt = node._state.dtype if pack else None
    while True:
        while not queue:
            yield wait
        t = queue.popleft()
        _take(io, "in", ch, t, *ends.popleft())
        if t.done:
            yield from io.put("out", DONE)
            return
        if t.stop == 0:
            x = t.payload
            if pack and type(state) is ShapeOnly and type(x) is ShapeOnly:
                packed = _new_shape_only(ShapeOnly)
                packed.shape, packed.dtype = (state.shape[0] + x.shape[0], state.shape[1]), dt
                state = packed
            else:
                state = update(state, x)
        elif t.stop >= b:
            yield from io.put("out", data(node.final(state, io)))
            if t.stop > b:
                yield from io.put("out", stop(t.stop - b))
            state = node.init_state(io)


def _run_flat_map(node, io):
    """``ops.FlatMap.run``."""
    f, q = node.p("fn"), node._q
    em = Emitter(io, "out", "in")
    ch = io.ins["in"]
    queue, ends, wait = ch.queue, ch.ends, ("data", (ch,))
    while True:
        while not queue:
            yield wait
        t = queue.popleft()
        _take(io, "in", ch, t, *ends.popleft())
        if t.done:
            yield from em.done()
            return
        if t.stop:
            yield from em.stop(t.stop + q)
        else:
            yield from emit_block(em, f.spec.apply(f, t.payload), q)
            yield from em.element_done()


def _fused(node):
    """The fused loop for ``node``, or ``None`` to run its own code."""
    if type(node) is ops.RandomOffChipLoad:
        return _run_random_load
    if type(node) is ops.Broadcast:
        return _run_broadcast
    if type(node) is ops.Accum and not node.p("keep"):
        return _run_accum
    if type(node) is ops.FlatMap:
        return _run_flat_map
    return None


# ----------------------------------------------------------------------------- the simulator

@dataclass
class ModelResult:
    """What the model measured (all times in cycles)."""

    cycles: int
    nodes: dict            # name -> {"kind", "busy", "stalled", "idle", "finish"}
    offchip_bytes: int
    bandwidth_utilization: float
    compute_utilization: float
    outputs: dict
    memory: dict
    bound: CycleBound | None = None     # the lower bound on cycles from this run's counts
    #: with ``Model(timeline=K)``: ``{"every": K, "busy": {node: [busy cycles in each K-cycle bin]}}``
    timeline: dict | None = None
    #: the FLOPs the matmuls did
    matmul_flops: int = 0

    def to_dict(self) -> dict:
        return {"cycles": self.cycles, "offchip_bytes": self.offchip_bytes,
                "bandwidth_utilization": round(self.bandwidth_utilization, 4),
                "compute_utilization": round(self.compute_utilization, 4),
                **({"bound": self.bound.to_json(self.cycles)} if self.bound else {}), "nodes": self.nodes}


class Model:
    """The timed processes of a program the mapper lowered (:class:`~step_hdl.mapper.lower.Lowered`): its
    source graph's operators on its fabric's timing (:meth:`ModelParams.from_fabric`) with ``dram``, its FIFO
    depths (``depths`` replaces them, edge by edge, for a what-if), its units' pipeline cycles and its off-chip
    layout; :meth:`run` times it."""

    def __init__(self, lowered, dram: DramParams, tensors=None, streams=None, bindings=None,
                 timing_only: bool = True, depths: dict | None = None, fused: bool = True, timeline: int = 0):
        graph = lowered.source
        graph.validate()
        if isinstance(timeline, bool) or not isinstance(timeline, int) or timeline < 0:
            raise ValueError(f"model: timeline must be a bin width in cycles (0: none), got {timeline!r}")
        self.timeline = timeline    # bin width of the per-node busy timeline (0: none)
        self.fused = fused          # run the hot operators' fused loops (same results, faster)
        params = ModelParams.from_fabric(lowered.fabric, dram)
        self.graph, self.params = graph, params
        # the processes' own bindings (the graph's dynamic sizes stay dynamic unless given); the mapper's (the
        # workload's sizes) join them for the FIFO depths and the layout, as the plan computes them
        bind = bindings_of(graph, {} if timing_only else (tensors or {}), bindings or {})
        if timing_only and tensors:
            for name, arr in tensors.items():
                spec = graph.tensors[name]
                for d, n in ((spec.rows, arr.shape[0]), (spec.cols, arr.shape[1])):
                    if d.is_Symbol:
                        bind[d] = n
        fifos = {} if depths else lowered.fifos(bind)
        self.depths = depths or {label: built for label, (built, _) in fifos.items()}
        # the FIFOs the plan caps below what their stream may hold: a deadlock names them
        self.capped = capped_edges(fifos)
        self.dram = Dram(params.dram)
        self.memory = TimedMemory(graph, tensors or {}, self.dram, bind, timing_only, lowered.layout(bind))
        self.memory.tile = params.tile
        self.memory.schedule = self._timer
        self.ctx = Context(self.memory, streams or {}, bind, None)
        self.now = 0
        self.heap: list = []
        self.seq = 0
        self.matmul_flops = 0
        self._info: dict = {}
        self.P = params.tile
        self.counted = counted_streams(graph, self.P)
        self.chain = chain_latency(lowered.graph, params.pipeline)
        self.indices = lowered.graph.indices

    # -- cost rules
    def _tiles(self, payload, cut=None) -> int:
        """Physical tiles (stream tokens) a payload takes (:func:`physical_tiles`), whatever the element type.

        A hardware stream's payload is one physical tile of its own element type
        (``units.layout.TileFormat``: width by dtype), so an int32 accumulator
        tile moves at one per cycle like an int16 one. A tuple's items travel side
        by side in one token (``TupleFormat``); anything else (index, selector) is one token.
        """
        if isinstance(payload, (np.ndarray, ShapeOnly)):
            shape = payload.shape
            return stream_tokens(shape[0], shape[1], self.P, cut) if len(shape) == 2 else 1
        if isinstance(payload, tuple) and payload:
            return max(self._tiles(p) for p in payload)
        return 1

    def _node_info(self, node):
        """Per node, computed once: output element type and the static input tile sizes in physical tiles."""
        info = self._info.get(node.name)
        if info is None:
            out_t = next(iter(node.out_types.values())).dtype if node.out_types else None
            in_bytes = []
            if node.computes:
                for port in node.input_ports():
                    t = node.t(port).dtype
                    if isinstance(t, Tile):
                        r, c = t.rows.subs(self.ctx.bindings), t.cols.subs(self.ctx.bindings)
                        cut = self.row_cut(node, port, output=False)
                        in_bytes.append((port, stream_tokens(int(r), int(c), self.P, cut)
                                         if r.is_Integer and c.is_Integer else None, cut or ROWS))
            info = self._info[node.name] = (out_t, in_bytes, self.row_cut(node, next(iter(node.out_types), None)))
        return info

    def row_cut(self, node, port, output=True):
        """How the lowering cuts the rows of the tiles on ``node``'s output (or input) ``port``: in blocks of
        ``P`` rows when it packs them (:func:`~step_hdl.mapper.tiling.counted_streams`), into row tiles when
        their count is dynamic (whatever it is in this run), else by their count."""
        st = node.out_types.get(port) if output else node.inputs[port].type
        label = f"{node.name}.{port}" if output else node.inputs[port].label
        if label in self.counted:
            return BLOCKS
        return ROWS if st is not None and isinstance(st.dtype, Tile) and not st.dtype.rows.is_Integer else None

    def cut_through(self, node) -> tuple[bool, set]:
        """``(cut-through, streamed input ports)``: whether ``node`` passes tiles on piece by piece, and
        which inputs it streams (row-tiled ones, and an Accum's); the others it needs whole before it
        starts.

        Cut-through: any of its streams carries tiles whose rows the lowering cuts into ``[1, P]`` row
        tiles (a dynamic row count, or a static one that is not a multiple of ``P``:
        :func:`~step_hdl.mapper.tiling.row_tiled`), which the RTL moves through row-granular units
        (element-wise maps, broadcasts, routing, column reductions, the outer-product matmul, and a
        matmul of row tiles, which buffers each row and its static operand whole, re-read per row, and
        starts on the first row). Not: ``P x P`` tiles' consumers and on-chip buffers (RepeatStatic,
        Bufferize/Streamify)."""
        P = self.P

        def rows_cut(t):
            return isinstance(t, Tile) and row_tiled(t.rows, P)
        ins = {p: r.type.dtype for p, r in node.inputs.items() if r is not None}
        types = list(ins.values()) + [st.dtype for st in node.out_types.values()]
        if node.buffers:
            return False, set()
        if node.kind == "Map" and node.p("fn").name == "matmul" and not node.p("fn").param("transpose_a") \
                and not any(map(rows_cut, types)):
            # its first operand's on-chip buffer streams (an affine reading follows the writes of the block
            # being written): it starts on the first piece; the second, re-read column by column, it needs whole
            return True, {"in0"}
        if not any(map(rows_cut, types)):
            # static tiles: an element-wise map or a broadcast passes the P x P pieces of a logical tile on
            # one by one too (the lowered stream is [..., R/P, C/P] of pieces), and so does an [R, 1]
            # operand's column pieces, each repeated along its block row by the lowering; a [1, 1] or [1, C]
            # operand broadcast over a block (buffered by the lowering) it needs whole. A row reduction makes
            # its [R, 1] column piece by piece too, each once its block row of pieces is in
            if node.kind == "Map" and node.p("fn").name in ROW_REDUCE:
                return True, {"in0"}
            if node.kind == "Broadcast" or (node.kind == "Map" and node.p("fn").name in ELEMENTWISE):
                out = node.out_types[next(iter(node.out_types))].dtype
                streamed = {p for p, t in ins.items() if isinstance(t, Tile) and isinstance(out, Tile)
                            and t.rows == out.rows and (t.cols == out.cols or t.cols == 1)}
                return bool(streamed), streamed
            return False, set()
        out_rows = {st.dtype.rows for st in node.out_types.values() if isinstance(st.dtype, Tile)}

        def streams(t):         # row tiles the unit passes on row by row; a static [1, C] row broadcast
            return rows_cut(t) and (not t.rows.is_Integer or t.rows in out_rows)   # over rows is whole
        if node.kind == "Map" and node.p("fn").name == "matmul" and not node.p("fn").param("transpose_a"):
            # buffers its operands, each row of the row-tiled one and the static one whole (re-read per row),
            # and starts on the first row
            return True, {p for p, t in ins.items() if streams(t)}
        # a load's or Streamify's ``ref`` of tiles counts logical tiles: one token after each one's last piece
        return True, {p for p, t in ins.items() if (streams(t) or (node.computes and node.kind != "Map"))
                      and p != "ref"}

    def passes_rows(self, node) -> bool:
        """Whether a cut-through ``node``'s output rows are its streamed input's rows, passed on as they come
        (an element-wise map, a broadcast, routing, packing rows into a tile, a matmul of row tiles), so its
        output's first piece leaves right after its input's first, however late the whole token is made;
        not a reduction over the rows (a column sum, a contraction over them), whose output is made at
        their end."""
        if node.memory == "load":
            return False        # its pieces leave as the memory's responses come
        if node.kind == "Accum" and node.p("update").name == "retile_row":
            return True         # row tiles packed into a tile of row tiles: the rows go on as they come
        ins = [r.type.dtype for p, r in node.inputs.items() if r is not None]
        rows = {t.rows for t in ins if isinstance(t, Tile)}
        return any(isinstance(st.dtype, Tile) and st.dtype.rows in rows for st in node.out_types.values())

    def block_buffer(self, node):
        """The transposing buffer's timing (:class:`_PackBuffer`, :class:`_UnpackBuffer`) of a node that the
        lowering packs into ``P``-row blocks or unpacks from them, else None."""
        P = self.P
        if not P:
            return None
        if node.kind == "Accum" and node.p("update").name == "retile_row" and isinstance(node._state, Tile):
            if in_row_blocks(node._state.rows, P, f"{node.name}.out" in self.counted):
                return _PackBuffer(P, -(-int(node._state.cols) // P))
        if node.kind == "FlatMap" and node.p("fn").name == "retile_streamify":
            t = node.t("in").dtype
            if in_row_blocks(t.rows, P, node.inputs["in"].label in self.counted):
                return _UnpackBuffer(P, -(-int(t.cols) // P))
        return None

    def stream_tail(self, node) -> int:
        """Cycles a cut-through unit's output goes on after its streamed input's last piece: a matmul's first
        operand is read from an on-chip buffer that streams (``units.onchip``: each entry once written), a
        row (block row, or ``P``-row block of a static tile) ``N/P`` times for its output tiles of ``K/P``
        products each, so after the last row's last piece it still makes that row's other ``N/P - 1``
        output tiles (the buffer's write and read 3 cycles, and for row tiles the lowered split's register);
        0 for every other node (its last piece leaves one cycle after its input's)."""
        if node.kind != "Map" or node.p("fn").name != "matmul" or node.p("fn").param("transpose_a"):
            return 0
        a, b = node.t("in0").dtype, node.t("in1").dtype
        if not (self.P and isinstance(a, Tile) and isinstance(b, Tile) and b.rows.is_Integer
                and b.cols.is_Integer):
            return 0
        kb, nb = -(-int(b.rows) // self.P), -(-int(b.cols) // self.P)
        return (4 if row_tiled(a.rows, self.P) else 3) + (nb - 1) * kb

    def port_tail(self, node) -> dict:
        """Per streamed input port, the cycles a cut-through unit's output goes on after that input's last
        piece beyond the one it takes to pass a piece on: an ``[R, 1]`` operand's column piece is repeated
        along its block row by the lowering (a RepeatStatic: ``C/P`` pieces, the last of them after the
        piece), and a row reduction's Accum gives a block row's piece on the stop that closes the row (one
        cycle after its last piece)."""
        if node.kind != "Map" or not self.P:
            return {}
        f, out = node.p("fn").name, node.out_types["out"].dtype
        ins = {p: r.type.dtype for p, r in node.inputs.items() if r is not None and isinstance(r.type.dtype, Tile)}
        if f in ROW_REDUCE:
            a = ins.get("in0")
            return {"in0": 1} if a is not None and a.cols.is_Integer and int(a.cols) > self.P else {}
        if f not in ELEMENTWISE or not isinstance(out, Tile) or not out.cols.is_Integer or int(out.cols) <= self.P:
            return {}
        cb = -(-int(out.cols) // self.P)
        return {p: cb - 1 for p, t in ins.items() if dims_equal(t.cols, 1) and dims_equal(t.rows, out.rows)}

    def cost(self, node, tok, inputs=None) -> int:
        """Cycles to produce ``tok``; ``inputs``: the data tokens just taken per input port (their actual
        sizes stand in for operands of data-dependent size)."""
        if not tok.is_data:
            return 1
        out_t, in_tiles, cut = self._node_info(node)
        cycles = self._tiles(tok.payload, cut)
        if node.computes:
            out = cycles
            cycles = max(cycles, self._compute_cycles(node, tok, cut, inputs or {}))
            for port, b, in_cut in in_tiles:
                if b is None:       # data-dependent size: this token's (as the lowering cuts it), else the output's
                    got = (inputs or {}).get(port)
                    b = self._tiles(got.payload, in_cut) if got is not None else out
                cycles = max(cycles, b)
        return max(1, cycles)

    def _compute_cycles(self, node, tok, cut=None, inputs=None) -> int:
        f = node.p("fn") if node.kind == "Map" else node.p("update")
        if f.name == "matmul":
            a = node.t("in0").dtype
            m, n = tok.payload.shape
            inner = a.rows if f.param("transpose_a") else a.cols
            got = (inputs or {}).get("in0")
            if inner.is_Integer or not inner.free_symbols - set(self.ctx.bindings):
                k = int(inner.subs(self.ctx.bindings))
            elif got is not None and hasattr(got.payload, "shape"):
                k = got.payload.shape[0 if f.param("transpose_a") else 1]
            else:
                k = n
            self.matmul_flops += 2 * m * k * n
            if f.param("transpose_a"):
                # aᵀ·b with a dynamic inner size: one outer product of [1, P] rows per row pair
                return physical_tiles(k, m, self.P, None if inner.is_Integer else ROWS) * -(-n // self.P)
            # one pair of physical tiles per cycle: [m/P (or m row tiles), k/P, n/P] products, and the stop
            # that closes each block row (the MatMul unit counts each output tile's k/P products itself: its
            # operands are read [m/P, n/P·k/P])
            return (physical_tiles(m, k, self.P, cut) * -(-n // self.P)
                    + row_blocks(m, self.P, cut))
        shape = tok.payload.shape if hasattr(tok.payload, "shape") else (1, 1)
        return physical_tiles(shape[0], shape[1], self.P, cut)

    # -- scheduling
    def _timer(self, t: int, fn) -> None:
        """Call ``fn()`` at cycle ``t`` (a process of its own that runs once)."""
        def once():
            fn()
            return
            yield       # (a generator)
        proc = _Proc(None)
        proc.gen = once()
        self.schedule(proc, t)

    def schedule(self, proc, t):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, proc))

    def wake(self, waiters):
        while waiters:
            proc = waiters.pop()
            if proc.state is not None:
                kind, since = proc.state
                waited = self.now - since
                if kind == "space":
                    proc.stalled += waited
                else:
                    proc.idle += waited
                proc.state = None
                self.schedule(proc, self.now)

    def run(self, max_events: int = 200_000_000, max_idle_events: int = 2_000_000) -> ModelResult:
        """Simulate to the end; a :class:`StepRuntimeError` after ``max_events`` process resumptions, or after
        ``max_idle_events`` in a row without progress (only nodes on a cycle ran, none touching memory:
        tokens going round a feedback loop forever), naming the nodes that ran."""
        g = self.graph
        depths = self.depths
        chans: dict = {}
        for ref, consumer, port in g.edges():
            # a token spends its producer's pipeline cycles (``chain``) in the registers and FIFOs of the units
            # the lowering made of it, which hold one a cycle: the edge holds that many more
            chans[(ref.node.name, ref.port)] = TimedChannel(
                ref.label, depths.get(ref.label, self.params.fifo_depth) + self.chain.get(ref.node.name, 0))
        procs = []
        for node in g.nodes.values():
            proc = _Proc(node)
            ins = {p: chans[(r.node.name, r.port)] for p, r in node.inputs.items() if r is not None}
            outs = {p: chans[(node.name, p)] for p in node.out_types}
            proc.ports = TimedPorts(node, ins, outs, self.ctx, proc, self)
            if node.memory == "load" and node.addressed:
                # the RTL unit takes an address and issues its request as it arrives, whatever its output is
                # doing, while it has credits: its tracker holds up to mem_inflight of them
                ins["addr"].on_push = proc.ports._prefetch
                ins["addr"].depth = max(ins["addr"].depth, self.params.mem_inflight)
            elif proc.ports._ref_prefetch is not None:
                ins["ref"].on_push = proc.ports._ref_prefetch
            run = _fused(node) if self.fused else None
            proc.gen = run(node, proc.ports) if run is not None else node.run(proc.ports)
            procs.append(proc)
            self.schedule(proc, 0)
        events = 0
        live = len(procs)
        heap, pop, push = self.heap, heapq.heappop, heapq.heappush
        memory = self.memory
        cyclic = g.cyclic_nodes()
        idle_procs = {p for p in procs if p.node.kind == "Output"
                      or (p.node.name in cyclic and p.node.memory is None)}
        idle, ran = 0, {}
        every = self.timeline
        bins: dict | None = {} if every else None
        while heap:
            t, _, proc = pop(heap)
            gen = proc.gen
            if gen is None or proc.state is not None:
                continue
            if proc in idle_procs:
                idle += 1
                ran[proc] = ran.get(proc, 0) + 1
                if idle > max_idle_events:
                    raise StepRuntimeError(f"model: no progress in {idle:,} events: only {_ran_procs(ran)} ran, "
                                           f"tokens going round a cycle without the program finishing")
            elif idle and proc.node is not None:
                idle = 0
                ran.clear()
            self.now = memory.now = t        # the time stands while the process runs
            while True:
                events += 1
                try:
                    cmd = next(gen)
                except StopIteration:
                    proc.gen, proc.finish = None, t
                    live -= 1
                    break
                except StepRuntimeError:
                    raise
                except (ValueError, TypeError, IndexError, KeyError) as exc:
                    raise StepRuntimeError(f"{where(proc.node.kind, proc.node.name)}: {type(exc).__name__}: "
                                           f"{exc}") from exc
                if cmd is None:
                    continue
                kind, arg = cmd
                if kind == "delay":
                    proc.busy += arg
                    if bins is not None and arg:
                        _add_busy(bins.setdefault(proc.node.name, []), t, arg, every)
                    self.seq += 1
                    push(heap, (t + arg, self.seq, proc))
                    break
                if kind == "data":
                    if arg[0].queue if len(arg) == 1 else any(ch.queue for ch in arg):
                        continue
                    proc.state = ("data", t)
                    for ch in arg:
                        ch.data_waiters.append(proc)
                    break
                if kind == "space":
                    if arg.room():
                        continue
                    proc.state = ("space", t)
                    arg.space_waiters.append(proc)
                    break
            if events > max_events:
                raise StepRuntimeError(f"model stopped after {max_events} events")
        stuck = [p for p in procs if p.gen is not None]
        if stuck:
            raise _deadlock(stuck, chans, self.capped)
        cycles = max([p.finish for p in procs] + [self.dram.last])
        nbytes = int(sum(self.memory.bytes_read.values()) + sum(self.memory.bytes_written.values()))
        n_matmul = sum(1 for n in g.nodes.values() if n.kind == "Map" and n.p("fn").name == "matmul")
        peak = self.params.dram.peak_bytes_per_cycle
        return ModelResult(
            cycles=cycles,
            nodes={p.node.name: {"kind": p.node.kind, "busy": p.busy, "stalled": p.stalled, "idle": p.idle,
                                 "finish": p.finish} for p in procs},
            offchip_bytes=nbytes,
            bandwidth_utilization=nbytes / (cycles * peak) if cycles else 0.0,
            compute_utilization=(self.matmul_flops / (cycles * n_matmul * self.params.matmul_flops)
                                 if cycles and n_matmul else 0.0),
            outputs=self.ctx.outputs,
            memory=self.memory.arrays if not self.memory.timing_only else {},
            bound=cycle_bound(self.matmul_flops, n_matmul, self.params.matmul_flops, nbytes, peak,
                              self.dram.requests),
            timeline={"every": every, "busy": bins} if bins is not None else None,
            matmul_flops=self.matmul_flops,
        )


def _ran_procs(ran: dict) -> str:
    busy = sorted(ran.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{p.node.kind} '{p.node.name}'" for p, _ in busy[:8]) + \
        (f" and {len(busy) - 8} more" if len(busy) > 8 else "")


def _deadlock(stuck, chans, capped: dict) -> StepDeadlockError:
    blocked = []
    for p in stuck:
        kind = p.state[0] if p.state else "?"
        waits = [ch.name for ch in chans.values() if p in ch.data_waiters or p in ch.space_waiters]
        what = "input" if kind == "data" else "room on output"
        blocked.append(f"{p.node.kind} '{p.node.name}' waits for {what} {', '.join(waits) or '?'}")
    pending = {ch.name: len(ch.queue) for ch in chans.values() if ch.queue}
    held = ", ".join(f"{k} ({v} tokens)" for k, v in pending.items()) or "none"
    hints = "".join(f"\n  {line}" for line in capped_hints(capped, pending))
    return StepDeadlockError("model deadlock: " + "; ".join(blocked) + f". Channels holding tokens: {held}" + hints,
                             blocked, pending)


def simulate(lowered, dram: DramParams, tensors=None, streams=None, bindings=None, timing_only: bool = True,
             depths: dict | None = None, timeline: int = 0) -> ModelResult:
    """Time the program ``lowered`` (a :class:`~step_hdl.mapper.lower.Lowered`: what the mapper made of a
    graph) with DRAM timing ``dram``; the flow's :func:`step_hdl.flow.model` lowers a workload and calls this.

    ``depths`` replaces the mapper's FIFO depths per edge (``producer.port``). ``timeline``: a bin width in
    cycles: the result's ``timeline`` holds each node's busy cycles per bin.
    """
    return Model(lowered, dram, tensors, streams, bindings, timing_only, depths, timeline=timeline).run()


def _add_busy(row: list, start: int, length: int, every: int) -> None:
    """Add the busy span ``start .. start + length`` to ``row``, a node's busy cycles per ``every``-cycle bin."""
    end = start + length
    k = start // every
    while start < end:
        stop = min(end, (k + 1) * every)
        if k >= len(row):
            row.extend([0] * (k + 1 - len(row)))
        row[k] += stop - start
        start, k = stop, k + 1
