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
* tiles with a dynamic row count move cut-through: the RTL passes their
  ``[1, P]`` rows on one by one, so a row-granular unit (element-wise map,
  broadcast, routing, column reduction, outer-product matmul) starts on a
  token's first row and its output's last row leaves one cycle after its
  input's, or when its own cost since the start is over; operands it needs
  whole (a static matmul operand, a ``[1, C]`` vector broadcast over rows)
  gate the start. Other tiles are store-and-forward;
* a Map or Accum element costs ``max(input tiles, compute cycles, output
  tiles)``; a matmul unit multiplies one pair of physical tiles per cycle
  (``[m/P, k/P, n/P]`` products, ``m`` row tiles when ``m`` is not a multiple
  of ``P``: ``P³`` MACs per cycle on full tiles), element-wise units one
  physical tile per cycle;
* routing with a selector costs one cycle per selector token plus the transfer
  of each routed token (a multi-hot copy is one transfer); a stop or done
  token costs one cycle;
* off-chip tiles go through :class:`Dram`, which has the parameters of the
  RTL's DRAM model (:class:`DramParams`): channels, bytes per request, latency,
  cycles between requests per channel, requests in flight;
* a load issues a tile's DRAM access when it starts to send that tile, plus
  the following tiles while they fit in its ``mem_inflight`` physical-tile
  credits (``units.memory`` ``_Tracker``: a request only while a credit is
  free, a credit back when its response leaves the unit), not the whole
  stream up front; and it streams each tile out as the responses arrive (II 1
  per tile while the memory keeps up), so the send takes ``max(transfer, DRAM
  completion)``, not their sum; a random load also issues the requests of the
  addresses already waiting at its input, as the RTL unit takes addresses
  while it has credits.

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
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from step_hdl.errors import StepDeadlockError, StepRuntimeError, where
from step_hdl.functions import ShapeOnly
from step_hdl.graph import Graph
from step_hdl.interp import Context, Memory, _bindings
from step_hdl.mapper.tiling import physical_tiles, stream_tokens
from step_hdl.process import Channel, Ports
from step_hdl.types import Tile


# ----------------------------------------------------------------------------- DRAM

@dataclass(frozen=True)
class DramParams:
    """Off-chip memory timing, shared with the RTL DRAM model.

    ``channels`` independent channels; a request moves ``request_bytes``; each
    channel accepts a new request every ``interval`` cycles; a request completes
    ``latency`` cycles after it is accepted; at most ``inflight`` requests are
    outstanding. Consecutive ``request_bytes`` blocks of the address space
    interleave over the channels.
    """

    channels: int = 8
    request_bytes: int = 64
    latency: int = 64
    interval: int = 2
    inflight: int = 512

    @property
    def peak_bytes_per_cycle(self) -> float:
        return self.channels * self.request_bytes / self.interval


#: the STeP paper's validation setup: 8 channels, 64-byte requests, one request per channel every 2 cycles
DRAM_PRESETS = {"paper": DramParams(8, 64, 64, 2, 512)}


class Dram:
    """Channel occupancy per transfer in O(channels), not per request (a logical tile may be megabytes).

    A transfer of ``n`` requests starting at channel ``c0`` gives each channel
    its share; a channel issues one request per ``interval`` cycles from when it
    is free; a request completes ``latency`` cycles after issue. The in-flight
    limit caps the rate at ``inflight / latency`` requests per cycle.
    """

    def __init__(self, p: DramParams):
        self.p = p
        self.free = [0] * p.channels
        self.window_free = 0.0
        self.accept_free = 0
        self.bytes = 0
        self.last = 0

    def access(self, now: int, addr: int, nbytes: int, port_requests: int = 1) -> int:
        """Issue the requests of one transfer at ``now``; return the cycle the last one completes.

        ``port_requests``: memory-port requests the transfer takes (one per physical tile). The RTL DRAM
        model (``sim.dram``) accepts one port request per cycle over all ports and answers a request
        ``latency + 1`` cycles after accepting it, so a transfer of many small tiles (4x4 int16: 32 B) is
        limited to one tile per cycle whatever the channels could do.
        """
        p = self.p
        accepted = max(now, self.accept_free)
        self.accept_free = accepted + port_requests
        n = max(1, math.ceil(nbytes / p.request_bytes))
        c0 = (addr // p.request_bytes) % p.channels
        base, extra = divmod(n, p.channels)
        done = now
        for ch in range(p.channels):
            count = base + (1 if (ch - c0) % p.channels < extra else 0)
            if not count:
                continue
            start = max(now, self.free[ch])
            self.free[ch] = start + count * p.interval
            done = max(done, start + (count - 1) * p.interval + p.latency)
        # in-flight limit: at most `inflight` requests per `latency` cycles
        start = max(float(now), self.window_free)
        self.window_free = start + n * p.latency / p.inflight
        done = max(done, math.ceil(self.window_free) + p.latency - 1, accepted + port_requests + p.latency)
        self.bytes += nbytes
        self.last = max(self.last, done)
        return done


# ----------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class ModelParams:
    """What the model needs of a fabric: physical tile, element type, FIFO depth, DRAM.

    ``mem_inflight`` is the physical-tile requests each off-chip load keeps in
    flight (``mapper.fabric.FabricParams.mem_inflight``).
    """

    tile: int = 16
    dtype: str = "int16"
    fifo_depth: int = 2
    mem_inflight: int = 32
    dram: DramParams = field(default_factory=lambda: DRAM_PRESETS["paper"])

    @property
    def matmul_flops(self) -> int:
        return 2 * self.tile ** 3


# ----------------------------------------------------------------------------- memory with timing

class _Shape:
    """Stands in for a tensor in timing-only runs: just its shape."""

    def __init__(self, shape):
        self.shape = shape


class TimedMemory(Memory):
    """Off-chip memory whose reads and writes go through the DRAM timing model.

    In timing-only runs tiles carry no values, except tensors of int32 given
    as input: those hold control data (index tables such as KV offsets and
    lengths) that decide addresses and sizes, so they are read for real.
    """

    #: the physical tile side (the model sets it); 0 makes every transfer one port request
    tile = 0

    def pieces(self, tr: int, tc: int) -> int:
        """Port requests (physical tiles) of a ``[tr, tc]`` transfer."""
        return physical_tiles(tr, tc, self.tile) if self.tile else 1

    def __init__(self, graph, tensors, dram: Dram, bind, timing_only: bool):
        control = {k: v for k, v in tensors.items() if graph.tensors[k].dtype.name == "int32"}
        super().__init__(graph, control if timing_only else tensors)
        self.real = set(self.arrays) if timing_only else set(graph.tensors)
        self.dram, self.timing_only, self.now = dram, timing_only, 0
        self.ready: dict[str, deque] = {}
        self.pending: dict[str, deque] = {}
        self.held: dict[str, deque] = {}
        self.prefetched: dict[str, deque] = {}     # random loads: (completion, pieces) issued ahead
        self._random_tiles: dict[str, tuple] = {}  # random loads: (tensor address, tile bytes, pieces)
        self.base: dict[str, int] = {}
        addr = 0
        for name, spec in graph.tensors.items():
            rows, cols = (int(d.subs(bind)) for d in (spec.rows, spec.cols))
            self.base[name] = addr
            addr += -(-rows * cols * spec.dtype.bytes // 4096) * 4096
            if timing_only and name not in self.real:
                self.arrays[name] = _Shape((rows, cols))
        if not timing_only:
            self.allocate(bind)

    def _timed(self, node, index, tr, tc):
        spec = node.graph.tensors[node.p("tensor")]
        nbytes = tr * tc * spec.dtype.bytes
        done = self.dram.access(self.now, self.base[spec.name] + index * nbytes, nbytes, self.pieces(tr, tc))
        self.ready.setdefault(node.name, deque()).append(done)
        return nbytes

    def _pending_read(self, node, index, tr, tc):
        """A load's read, issued to DRAM later, when the load unit gets to it (:meth:`issue`), unless
        :meth:`prefetch` already issued it."""
        spec = node.graph.tensors[node.p("tensor")]
        nbytes = tr * tc * spec.dtype.bytes
        early = self.prefetched.get(node.name)
        if early:
            done, pieces = early.popleft()
            self.ready.setdefault(node.name, deque()).append(done)
            self.held.setdefault(node.name, deque()).append(pieces)
            return nbytes
        self.pending.setdefault(node.name, deque()).append((self.base[spec.name] + index * nbytes, nbytes,
                                                            self.pieces(tr, tc)))
        return nbytes

    def prefetch(self, node, queue, now: int, credits: int) -> None:
        """Issue random-load reads for addresses already waiting at the unit's input.

        The RTL :class:`~step_hdl.units.memory.RandomOffChipLoad` turns each
        address into a request as it arrives, while it has a credit, whatever
        its output is doing; the interpreter's load reads one address per tile
        sent. ``queue``: the unit's waiting input tokens; the first of its
        addresses may have been issued already. Only the addresses that fit in
        the free credits are looked at, so a long queue costs nothing.
        """
        shape = self._random_tiles.get(node.name)
        if shape is None:
            spec = node.graph.tensors[node.p("tensor")]
            tile = node.tile_type()
            tr, tc = int(tile.rows), int(tile.cols)
            shape = self._random_tiles[node.name] = (self.base[spec.name], tr * tc * spec.dtype.bytes,
                                                     self.pieces(tr, tc))
        start, nbytes, pieces = shape
        early = self.prefetched.setdefault(node.name, deque())
        if pieces * (len(early) + 1) > credits:
            return                      # the requests already issued ahead hold the credits (the usual case)
        free = credits - sum(self.held.get(node.name, ())) - pieces * len(early)
        if free < pieces:
            return
        skip, base = len(early), node.p("base")
        for tok in queue:
            if not tok.is_data:
                continue
            if skip:
                skip -= 1
                continue
            index = base + int(tok.payload.flat[0])
            early.append((self.dram.access(now, start + index * nbytes, nbytes, pieces), pieces))
            free -= pieces
            if free < pieces:
                break

    def issue(self, name: str, now: int, credits: int) -> int:
        """The DRAM completion time of load ``name``'s next tile; issue it at ``now`` if not yet issued.

        The interpreter's load code reads a whole block of tiles before it sends
        the first, but the RTL load (``units.memory``, :class:`_Tracker`) issues a
        request only while it has a credit (``max_inflight`` requests whose
        responses have not left the unit): requests go out as the unit's tiles
        leave, so the loads of a fabric share the DRAM tile by tile instead of one
        load's whole stream being served before the next's. As the tile starts to
        leave, the following tiles are issued too while they fit in ``credits``
        physical tiles, not counting this one.
        """
        ready = self.ready.setdefault(name, deque())
        held = self.held.setdefault(name, deque())     # physical tiles of each issued tile not yet sent
        pend = self.pending.get(name, ())

        def send(now):
            addr, nbytes, pieces = pend.popleft()
            ready.append(self.dram.access(now, addr, nbytes, pieces))
            held.append(pieces)

        if not ready and pend:
            send(now)
        use = sum(held) - held[0]                      # ready[0]/held[0]: the tile leaving now
        while pend and use + pend[0][2] <= credits:
            use += pend[0][2]
            send(now)
        held.popleft()
        return ready.popleft()

    def read_tile(self, node, arr, index, tr, tc):
        self._slot(node, arr, index, tr, tc)
        nbytes = self._pending_read(node, index, tr, tc)
        self.bytes_read[node.name] = self.bytes_read.get(node.name, 0) + nbytes
        if node.p("tensor") not in self.real:
            return ShapeOnly((tr, tc), node.graph.tensors[node.p("tensor")].dtype)
        rs, cs = self._slot(node, arr, index, tr, tc)
        return arr[rs, cs].copy()

    def write_tile(self, node, arr, index, tr, tc, tile):
        self._slot(node, arr, index, tr, tc)
        nbytes = self._timed(node, index, tr, tc)
        if node.kind != "RandomOffChipStore":
            self.ready[node.name].pop()   # a write does not hold a linear store up (posted)
        # a random store acknowledges each write when the memory has done it (``ready``, see acked())
        self.bytes_written[node.name] = self.bytes_written.get(node.name, 0) + nbytes
        if node.p("tensor") in self.real and not isinstance(tile, ShapeOnly):
            rs, cs = self._slot(node, arr, index, tr, tc)
            arr[rs, cs] = tile


# ----------------------------------------------------------------------------- timed ports

LOADS = {"LinearOffChipLoad", "RandomOffChipLoad"}
ROUTERS = {"Partition", "Reassemble", "EagerMerge"}
#: operators whose RTL unit (an OnChipBuffer) stores a whole chunk before it reads it out
BUFFERING = {"RepeatStatic", "Bufferize", "Streamify"}


class _Proc:
    __slots__ = ("node", "gen", "busy", "stalled", "idle", "since", "state", "finish", "ports")

    def __init__(self, node):
        self.node, self.gen = node, None
        self.busy = self.stalled = self.idle = 0
        self.since, self.state, self.finish = 0, None, 0


class TimedChannel(Channel):
    __slots__ = ("depth", "data_waiters", "space_waiters", "ends", "on_push")

    def __init__(self, name, depth):
        super().__init__(name, record=False)
        self.depth = depth
        self.ends: deque = deque()      # per queued token: when its last physical tile arrives
        self.on_push = None             # called after each push (a random load's address input)
        self.data_waiters: list = []
        self.space_waiters: list = []


class TimedPorts(Ports):
    """Ports whose reads and writes take simulated time (see the module docstring)."""

    def __init__(self, node, ins, outs, ctx, proc, model):
        super().__init__(node, ins, outs, ctx)
        self.proc, self.model = proc, model
        self.taken: dict = {}       # the last data token taken per input port
        self.cut_through, self.streamed = model.cut_through(node)
        self.first = None           # when the first input of the output being made was taken
        self.avail = 0              # when the last physical tile of those inputs has arrived
        self.whole = 0              # ... of those the unit needs whole before it starts (buffered operands)

    def get(self, port):
        ch = self.ins[port]
        while not ch.queue:
            yield ("data", (ch,))
        tok = ch.queue.popleft()
        end = ch.ends.popleft()
        self.model.wake(ch.space_waiters)
        if tok.is_data:
            self.taken[port] = tok
            self.first = self.model.now if self.first is None else self.first
            self.avail = max(self.avail, end)
            if port not in self.streamed:
                self.whole = max(self.whole, end)
        if tok.is_data and self.node.kind in ROUTERS and port == "sel":
            yield ("delay", 1)          # the selector cycle
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
        (``units.memory``: a request per tile while a credit is free, II 1 per tile
        while the memory keeps up), so a logical tile's transfer overlaps its DRAM
        access: it is done when both the last response is in and its tiles have
        streamed, not after the one and then the other.
        """
        cost = self._cost(tok)
        if tok.is_data and self.node.kind in LOADS:
            mem, credits = self.ctx.memory, self.model.params.mem_inflight
            ready = mem.issue(self.node.name, self.model.now, credits)
            if self.node.kind == "RandomOffChipLoad":
                self.prefetch()
            cost = max(cost, ready - self.model.now)
        return cost

    def prefetch(self):
        """A random load: issue the requests of the addresses waiting at its input (as credits allow)."""
        self.ctx.memory.prefetch(self.node, self.ins["addr"].queue, self.model.now, self.model.params.mem_inflight)

    def put(self, port, tok):
        yield from self.put_all([port], tok, self._send_cycles(tok))

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
        cost = self._cost(tok) if cost is None else cost
        now = self.model.now
        if tok.is_data and self.node.kind == "RandomOffChipStore":
            # the acknowledgement is ready when the write is done (``units.memory``: memory latency + 2);
            # writes are pipelined, so the store goes on while its consumer waits for that
            yield ("delay", cost)
            end = self.ctx.memory.ready[self.node.name].popleft() + 2
        elif tok.is_data and self.cut_through:
            start = max(now if self.first is None else self.first, self.whole)
            end = max(start + cost, self.avail + 1, now + 1)
            yield ("delay", 1)
        else:
            end = max(now, self.avail) + cost if tok.is_data else now + cost
            yield ("delay", end - now)
        for port in ports:
            ch = self.outs[port]
            while len(ch.queue) >= ch.depth:
                yield ("space", ch)
            ch.push(tok)
            ch.ends.append(max(end, self.model.now))
            self.model.wake(ch.data_waiters)
            if ch.on_push is not None:
                ch.on_push()
        if self.model.now < end:
            yield ("delay", end - self.model.now)
        if tok.is_data:
            self.first, self.avail, self.whole = None, 0, 0


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

    def to_dict(self) -> dict:
        return {"cycles": self.cycles, "offchip_bytes": self.offchip_bytes,
                "bandwidth_utilization": round(self.bandwidth_utilization, 4),
                "compute_utilization": round(self.compute_utilization, 4), "nodes": self.nodes}


class Model:
    def __init__(self, graph: Graph, params: ModelParams, tensors=None, streams=None, bindings=None,
                 timing_only: bool = True, depths: dict | None = None):
        graph.validate()
        self.graph, self.params = graph, params
        self.depths = depths
        bind = _bindings(graph, {} if timing_only else (tensors or {}), bindings or {})
        if timing_only and tensors:
            for name, arr in tensors.items():
                spec = graph.tensors[name]
                for d, n in ((spec.rows, arr.shape[0]), (spec.cols, arr.shape[1])):
                    if d.is_Symbol:
                        bind[d] = n
        self.dram = Dram(params.dram)
        self.memory = TimedMemory(graph, tensors or {}, self.dram, bind, timing_only)
        self.memory.tile = params.tile
        self.ctx = Context(self.memory, streams or {}, bind, None)
        self.now = 0
        self.heap: list = []
        self.seq = 0
        self.matmul_flops = 0
        self._info: dict = {}
        self.P = params.tile

    # -- cost rules
    def _tiles(self, payload, dynamic_rows: bool = False) -> int:
        """Physical tiles (stream tokens) a payload takes (:func:`physical_tiles`), whatever the element type.

        A hardware stream's payload is one physical tile of its own element type
        (``units.layout.TileFormat``: width by dtype), so an int32 accumulator
        tile moves at one per cycle like an int16 one. A tuple's items travel side
        by side in one token (``TupleFormat``); anything else (index, selector) is one token.
        """
        if isinstance(payload, (np.ndarray, ShapeOnly)) and hasattr(payload, "shape") and len(payload.shape) == 2:
            return stream_tokens(payload.shape[0], payload.shape[1], self.P, dynamic_rows)
        if isinstance(payload, tuple) and payload:
            return max(self._tiles(p) for p in payload)
        return 1

    def _node_info(self, node):
        """Per node, computed once: output element type and the static input tile sizes in physical tiles."""
        info = self._info.get(node.name)
        if info is None:
            out_t = next(iter(node.out_types.values())).dtype if node.out_types else None
            in_bytes = []
            if node.kind in ("Map", "Accum", "Scan"):
                for port in node.input_ports():
                    t = node.t(port).dtype
                    if isinstance(t, Tile):
                        r, c = t.rows.subs(self.ctx.bindings), t.cols.subs(self.ctx.bindings)
                        in_bytes.append((port, stream_tokens(int(r), int(c), self.P)
                                         if r.is_Integer and c.is_Integer else None))
            # a tile whose row count is dynamic is lowered to row tiles, whatever the count in this run
            dyn = isinstance(out_t, Tile) and not out_t.rows.is_Integer
            info = self._info[node.name] = (out_t, in_bytes, dyn)
        return info

    def cut_through(self, node) -> tuple[bool, set]:
        """``(cut-through, streamed input ports)``: whether ``node`` passes tiles on piece by piece, and
        which inputs it streams (row-tiled ones, and an Accum's); the others it needs whole before it
        starts.

        Cut-through: any of its streams carries tiles with a dynamic row count, which the RTL moves as
        ``[1, P]`` row tiles through row-granular units (element-wise maps, broadcasts, routing, column
        reductions, the outer-product matmul). Not: ``P x P`` tiles' consumers, on-chip buffers
        (RepeatStatic, Bufferize/Streamify) and matmuls, whose RTL buffers operands (each row, and the
        static operand re-read per row)."""
        def rows_dynamic(t):
            return isinstance(t, Tile) and not t.rows.is_Integer
        ins = {p: r.type.dtype for p, r in node.inputs.items() if r is not None}
        types = list(ins.values()) + [st.dtype for st in node.out_types.values()]
        if node.kind in BUFFERING or not any(map(rows_dynamic, types)):
            return False, set()
        if node.kind == "Map" and node.p("fn").name == "matmul" and not node.p("fn").param("transpose_a"):
            return False, set()     # buffers its operands: each row, and the static operand re-read per row
        # a load's or Streamify's ``ref`` of tiles counts logical tiles: one token after each one's last piece
        return True, {p for p, t in ins.items() if (rows_dynamic(t) or node.kind in ("Accum", "Scan"))
                      and p != "ref"}

    def cost(self, node, tok, inputs=None) -> int:
        """Cycles to produce ``tok``; ``inputs``: the data tokens just taken per input port (their actual
        sizes stand in for operands of data-dependent size)."""
        if not tok.is_data:
            return 1
        out_t, in_tiles, dyn = self._node_info(node)
        cycles = self._tiles(tok.payload, dyn)
        if node.kind in ("Map", "Accum", "Scan"):
            out = cycles
            cycles = max(cycles, self._compute_cycles(node, tok, dyn, inputs or {}))
            for port, b in in_tiles:
                if b is None:       # data-dependent size: this token's (row tiles), else as large as the output
                    got = (inputs or {}).get(port)
                    b = self._tiles(got.payload, True) if got is not None else out
                cycles = max(cycles, b)
        return max(1, cycles)

    def _compute_cycles(self, node, tok, dynamic_rows: bool = False, inputs=None) -> int:
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
                return physical_tiles(k, m, self.P, not inner.is_Integer) * -(-n // self.P)
            # one pair of physical tiles per cycle: [m/P (or m row tiles), k/P, n/P] products
            return physical_tiles(m, k, self.P, dynamic_rows) * -(-n // self.P)
        shape = tok.payload.shape if hasattr(tok.payload, "shape") else (1, 1)
        return physical_tiles(shape[0], shape[1], self.P, dynamic_rows)

    # -- scheduling
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

    def run(self, max_events: int = 200_000_000) -> ModelResult:
        g = self.graph
        from step_hdl.mapper.fifo import fifo_depths
        depths = self.depths or fifo_depths(g, self.params.fifo_depth, self.ctx.bindings)
        chans: dict = {}
        for ref, consumer, port in g.edges():
            chans[(ref.node.name, ref.port)] = TimedChannel(ref.label, depths.get(ref.label, self.params.fifo_depth))
        procs = []
        for node in g.nodes.values():
            proc = _Proc(node)
            ins = {p: chans[(r.node.name, r.port)] for p, r in node.inputs.items() if r is not None}
            outs = {p: chans[(node.name, p)] for p in node.out_types}
            proc.ports = TimedPorts(node, ins, outs, self.ctx, proc, self)
            if node.kind == "RandomOffChipLoad":
                # the RTL unit takes an address and issues its request as it arrives, whatever its output is
                # doing, while it has credits: its tracker holds up to mem_inflight of them
                ins["addr"].on_push = proc.ports.prefetch
                ins["addr"].depth = max(ins["addr"].depth, self.params.mem_inflight)
            proc.gen = node.run(proc.ports)
            procs.append(proc)
            self.schedule(proc, 0)
        events = 0
        live = len(procs)
        while self.heap:
            t, _, proc = heapq.heappop(self.heap)
            if proc.gen is None or proc.state is not None:
                continue
            self.now = self.memory.now = t
            while True:
                events += 1
                try:
                    cmd = next(proc.gen)
                except StopIteration:
                    proc.gen, proc.finish = None, self.now
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
                    self.schedule(proc, self.now + arg)
                    break
                if kind == "data":
                    if any(ch.queue for ch in arg):
                        continue
                    proc.state = ("data", self.now)
                    for ch in arg:
                        ch.data_waiters.append(proc)
                    break
                if kind == "space":
                    if len(arg.queue) < arg.depth:
                        continue
                    proc.state = ("space", self.now)
                    arg.space_waiters.append(proc)
                    break
            if events > max_events:
                raise StepRuntimeError(f"model stopped after {max_events} events")
        stuck = [p for p in procs if p.gen is not None]
        if stuck:
            raise _deadlock(stuck, chans)
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
        )


def _deadlock(stuck, chans) -> StepDeadlockError:
    blocked = []
    for p in stuck:
        kind = p.state[0] if p.state else "?"
        waits = [ch.name for ch in chans.values() if p in ch.data_waiters or p in ch.space_waiters]
        what = "input" if kind == "data" else "room on output"
        blocked.append(f"{p.node.kind} '{p.node.name}' waits for {what} {', '.join(waits) or '?'}")
    pending = {ch.name: len(ch.queue) for ch in chans.values() if ch.queue}
    held = ", ".join(f"{k} ({v} tokens)" for k, v in pending.items()) or "none"
    return StepDeadlockError("model deadlock: " + "; ".join(blocked) + f". Channels holding tokens: {held}",
                             blocked, pending)


def simulate(graph: Graph, params: ModelParams | None = None, tensors=None, streams=None, bindings=None,
             timing_only: bool = True, depths: dict | None = None) -> ModelResult:
    """Run the approximate performance model on ``graph``.

    ``depths`` gives FIFO depths per edge (``producer.port``); by default
    :func:`step_hdl.mapper.fifo.fifo_depths` sizes them.
    """
    return Model(graph, params or ModelParams(), tensors, streams, bindings, timing_only, depths).run()
