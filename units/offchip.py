"""Off-chip units: loads and stores over a memory port.

* :class:`LinearOffChipLoad`, :class:`LinearOffChipStore`,
  :class:`RandomOffChipLoad`, :class:`RandomOffChipStore` talk to off-chip
  memory through ``mem`` (:func:`~step_hdl.units.memport.MemPortSignature`;
  the interface, the test memory and the off-chip layout are documented in
  :mod:`step_hdl.units.memport`). A tile index ``t`` of a tensor stored at byte
  address ``tensor_addr`` is at ``tensor_addr + t * tile_bytes``; ``configure``
  takes ``tensor_addr`` (a mapper decision, not a language parameter) and folds
  it, the language ``base`` and the tile size into byte-address registers, so
  the hardware only adds.
(The on-chip buffer is :mod:`step_hdl.units.onchip`.)

The off-chip units share one request/response core (:class:`_Tracker`): the
unit's events (tiles to move, stops, block ends, done) enter an in-order
*order queue*; a request is issued to memory in the same cycle its event is
queued (when credits are free: at most ``max_inflight`` tiles whose responses
have not left the unit); responses wait in a response FIFO of
``max_inflight`` entries, so ``resp.ready`` stays high; the queue head leaves as
soon as its response (if any) is there. A credit comes back ``latency + 2``
cycles after its request (latency = memory latency in cycles), so throughput
is ``min(1, max_inflight / (latency + 2))`` tiles per cycle when the output is
ready and the memory takes a tile per cycle: size ``max_inflight`` for the
memory's latency (measured: latency 1 needs 3, latency 6 needs 8).

**Bursts** (``burst_bytes``, the memory's block; :mod:`~step_hdl.units.memport`):
a linear load's address walk sees how many of the next tiles are consecutive
in one aligned block (its innermost dimensions whose tiles follow one another
in memory, register ``run``) and reads them with one request; a linear store collects consecutive tiles up to the
block's end and writes them as one burst (the burst closes at the block's
end, at a stop or done, or in a cycle no tile comes). Random loads and stores
move one tile per address: one request each.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .address import AffineWalk
from .base import StepUnit
from .config import Reg
from .layout import TileFormat, TokenFormat, stop_bits, tile_format
from .memport import MemPortShape, MemPortSignature, tile_bytes
from .merger import StopMerger
from .params import ParamError, StreamParams, check_ref, concrete_param, positive
from .stream import FullSlice

__all__ = ["OffChipParams", "LinearLoadParams", "LinearOffChipLoad", "LinearOffChipStore", "RandomOffChipLoad",
           "RandomOffChipStore", "INDEX"]

INDEX = tile_format("int32", 1, 1)   # addresses / indices: [1, 1] int32 tiles


# ----------------------------------------------------------------------------- parameters

@dataclass(frozen=True)
class OffChipParams(StreamParams):
    """An off-chip unit: the physical tile, ``max_rank``, and the memory port.

    ``addr_bits`` (<= 32: addresses live in 32-bit registers), ``tag_bits``,
    ``max_inflight`` (items in flight, ``<= 2**tag_bits``), ``burst_bytes``: the
    memory's block (a power of two; 0: no bursts): a linear load or store moves
    consecutive tiles within one aligned block in one request (a burst of
    ``burst_words`` tiles at most).
    """

    addr_bits: int = 32
    tag_bits: int = 4
    max_inflight: int = 4
    burst_bytes: int = 0

    def validate(self):
        super().validate()
        positive(self.owner, "addr_bits", self.addr_bits)
        if self.addr_bits > 32:
            raise ParamError(f"{self.owner}: addr_bits {self.addr_bits} > 32 is not supported")
        positive(self.owner, "tag_bits", self.tag_bits)
        positive(self.owner, "max_inflight", self.max_inflight)
        if self.max_inflight > 1 << self.tag_bits:
            raise ParamError(f"{self.owner}: max_inflight {self.max_inflight} needs more than "
                             f"tag_bits {self.tag_bits} to name each request in flight")
        positive(self.owner, "burst_bytes", self.burst_bytes, minimum=0)
        if self.burst_bytes & (self.burst_bytes - 1):
            raise ParamError(f"{self.owner}: burst_bytes must be 0 or a power of two, got {self.burst_bytes}")
        if self.burst_words > self.max_inflight:
            raise ParamError(f"{self.owner}: a burst of {self.burst_words} tiles ({self.burst_bytes} bytes) needs "
                             f"max_inflight >= {self.burst_words}, got {self.max_inflight}")

    @property
    def burst_words(self) -> int:
        """Most tiles in one burst: the tiles of a ``burst_bytes`` block (1 without bursts, or when a tile is
        not a power-of-two part of the block)."""
        tb = self.tile_bytes
        if not self.burst_bytes or tb & (tb - 1) or tb >= self.burst_bytes:
            return 1
        return self.burst_bytes // tb

    @property
    def tile(self) -> TileFormat:
        return tile_format(self.dtype, self.rows, self.cols)

    @property
    def tile_bytes(self) -> int:
        return tile_bytes(self.tile)

    @property
    def port(self) -> MemPortShape:
        return MemPortShape(self.tile.width, self.addr_bits, self.tag_bits, self.burst_words)


@dataclass(frozen=True)
class LinearLoadParams(OffChipParams):
    """LinearOffChipLoad: ``max_dims`` output dimensions at most (ref dims + ``out_shape``
    dims, ``<= max_rank + 1``), ``count_bits`` per ``out_shape`` count, whether
    there is a ``ref`` input (its payload: a ``ref_rows × ref_cols`` tile of ``ref_dtype``,
    ignored: only its structure matters), and ``pipeline``: the walk's requests pass a
    register slice before the request tracker (a fabric with ``pipeline``), one cycle of
    latency that cuts the tracker's handshake from the address walk."""

    max_dims: int = 4
    count_bits: int = 16
    ref: bool = False
    ref_rows: int = 1
    ref_cols: int = 1
    ref_dtype: str = "int32"
    pipeline: bool = False

    def validate(self):
        super().validate()
        if not isinstance(self.pipeline, bool):
            raise ParamError(f"{self.owner}: pipeline must be true or false, got {self.pipeline!r}")
        positive(self.owner, "max_dims", self.max_dims)
        if self.max_dims > self.max_rank + 1:
            raise ParamError(f"{self.owner}: max_dims {self.max_dims} > max_rank + 1 = {self.max_rank + 1}")
        positive(self.owner, "count_bits", self.count_bits)
        if self.count_bits > 32:
            raise ParamError(f"{self.owner}: count_bits {self.count_bits} > 32 is not supported")
        check_ref(self)


def _check_tile(unit, op_params, bindings=None):
    """The language node's tile must be the unit's physical tile."""
    p = unit.params
    tile = [concrete_param(d, bindings, unit, "tile") for d in op_params["tile"]]
    if tile != [p.rows, p.cols]:
        raise ParamError(f"{type(unit).__name__}: the node's tile {tile} is not the unit's physical tile "
                         f"[{p.rows}, {p.cols}]")


def _byte_base(unit, op_params, tensor_addr):
    value = tensor_addr + op_params.get("base", 0) * unit.params.tile_bytes
    if not 0 <= value < 1 << unit.params.addr_bits:
        raise ParamError(f"{type(unit).__name__}: base byte address {value} does not fit "
                         f"{unit.params.addr_bits} address bits")
    return value


def contiguous_run(counts, strides) -> int:
    """Tiles a walk (``counts``, ``strides`` in tiles, innermost first) reads at consecutive addresses one
    after the other: the innermost dimensions whose stride is the tiles below them (1 for the innermost), the
    product of their counts; 1 when the innermost dimension does not step by one tile."""
    run = 1
    for c, s in zip(counts, strides):
        if c == 1:
            continue            # never steps: its stride does not matter
        if s != run:
            break
        run *= c
    return max(run, 1)


# ----------------------------------------------------------------------------- shared request/response core

class _Tracker(wiring.Component):
    """In-order request/response core of the off-chip units (see the module docstring).

    ``ev`` (in): ``{mem, addr, words, stop, done, end, eager}``, with ``wdata`` for a unit that writes
    (``writes``: every request it issues is a write) and ``ack`` for one whose events carry their
    own acknowledgement (``event_ack``). A ``mem`` event is one tile moved: for a reader, ``words = n
    >= 1`` issues a read burst of ``n`` tiles (this event's and the next ``n - 1`` ``mem`` events',
    which carry ``words = 0`` and issue nothing), taking ``n`` credits; for a writer, every ``mem``
    event issues one write beat with its ``words`` (``n`` on a burst's first beat, 0 on the others),
    one credit each. ``o`` (out): ``{payload, stop, done, end, eager}``, one per event, in order; a
    ``mem`` event's payload is the response's ``rdata`` (``ack_bits == 0``), the event's ``ack``
    (``event_ack``) or 0. (A unit drives every field of its events: a field it had no use for
    would be a constant process, which Icarus never runs.)

    Latency: request issue 0 cycles after the event (``mem.req.valid`` combinational in
    ``ev.valid``, ``ev.ready`` combinational in ``mem.req.ready``); output 1 cycle after
    the event (order queue) or 1 cycle after the response (response FIFO). ``o.valid``
    comes from FIFO state only. II 1. ``buffered``: the order queue's head is a register
    (``SyncFIFOBuffered``), so the response handshake does not start at a LUT-RAM read, and an event
    without memory access that finds the queue empty is output 2 cycles after it.
    """

    def __init__(self, shape: MemPortShape, sbits: int, max_inflight: int, ack_bits: int = 0,
                 writes: bool = False, event_ack: bool = False, buffered: bool = False, stops: bool = True):
        self.shape, self.sbits, self.max_inflight, self.ack_bits = shape, sbits, max_inflight, ack_bits
        self.writes, self.event_ack, self.buffered = writes, event_ack, buffered
        # ``stops``: the events carry stops and block ends; a unit whose events never do (the linear store)
        # leaves the fields out rather than driving them with constants
        self.marks = {"stop": sbits, "done": 1, "end": 1, "eager": 1} if stops else {"done": 1}
        fields = {"mem": 1, "addr": shape.addr_bits, "words": shape.words_bits, **self.marks}
        if writes:
            fields["wdata"] = shape.data_bits
        if event_ack:
            fields["ack"] = ack_bits
        self.ev_layout = data.StructLayout(fields)
        self.o_layout = data.StructLayout({"payload": ack_bits or shape.data_bits, **self.marks})
        super().__init__({"ev": In(stream.Signature(self.ev_layout)), "o": Out(stream.Signature(self.o_layout)),
                          "mem": Out(MemPortSignature(shape))})

    def elaborate(self, platform):
        m = Module()
        s = self.shape
        marks = self.marks
        q_layout = data.StructLayout({"mem": 1, "ack": max(1, self.ack_bits), **marks})
        order = fifo.SyncFIFOBuffered if self.buffered else fifo.SyncFIFO
        m.submodules.order = q = order(width=q_layout.size, depth=self.max_inflight + 2)
        m.submodules.resp = rf = fifo.SyncFIFO(width=1 if self.ack_bits else s.data_bits, depth=self.max_inflight)
        ev, req, resp, o = self.ev, self.mem.req, self.mem.resp, self.o
        # the credits not taken: a register, so a request's credit check is one comparison (no adder before it)
        free = Signal(range(self.max_inflight + 1), init=self.max_inflight)
        seq = Signal(s.tag_bits)
        # a write beat takes one credit; a read burst its tiles' (the tiles it covers later take none)
        issue = ev.payload.mem & (Const(1) if self.writes else ev.payload.words != 0)
        need = Signal(range(max(s.burst_words, 1) + 1))
        m.d.comb += need.eq(Const(1) if self.writes else ev.payload.words)
        credit = need <= free

        m.d.comb += [
            req.valid.eq(ev.valid & issue & credit & q.w_rdy),
            req.payload.addr.eq(ev.payload.addr), req.payload.bytes.eq(s.word_bytes),
            req.payload.words.eq(ev.payload.words),
            req.payload.write.eq(int(self.writes)), req.payload.wdata.eq(ev.payload.wdata if self.writes else 0),
            req.payload.tag.eq(seq),
            ev.ready.eq(q.w_rdy & (~issue | (credit & req.ready))),
            q.w_en.eq(ev.valid & ev.ready),
        ]
        w = Signal(q_layout)
        m.d.comb += [w.mem.eq(ev.payload.mem), w.ack.eq(ev.payload.ack if self.event_ack else 0),
                     *(getattr(w, k).eq(getattr(ev.payload, k)) for k in marks), q.w_data.eq(w)]
        issued = req.valid & req.ready
        with m.If(issued):
            m.d.sync += seq.eq(seq + 1)

        m.d.comb += [rf.w_data.eq(0 if self.ack_bits else resp.payload.rdata), rf.w_en.eq(resp.valid),
                     resp.ready.eq(rf.w_rdy)]

        head = Signal(q_layout)
        m.d.comb += head.eq(q.r_data)
        m.d.comb += [
            o.valid.eq(q.r_rdy & (~head.mem | rf.r_rdy)),
            *(getattr(o.payload, k).eq(getattr(head, k)) for k in marks),
        ]
        with m.If(head.mem):
            m.d.comb += o.payload.payload.eq(head.ack if self.ack_bits else rf.r_data)
        pop = o.valid & o.ready
        freed = pop & head.mem
        m.d.comb += [q.r_en.eq(pop), rf.r_en.eq(freed)]
        m.d.sync += free.eq(free - Mux(issued, need, 0) + freed)
        return m


class _MemUnit(StepUnit):
    """A unit with a memory port ``mem`` (and possibly status outputs) besides its streams; its one register
    ``base`` is the byte address of tile index 0 (the language ``base`` and the tensor's address folded in)."""

    memory_port = True

    def extra_members(self) -> dict:
        return {"mem": Out(MemPortSignature(self.params.port))}

    #: what the ``base`` register holds (the register map's doc)
    base_doc = "byte address of tile index 0"

    def token_format(self) -> TokenFormat:
        return TokenFormat(self.params.tile, self.params.max_rank)

    def registers(self):
        return [Reg("base", self.params.addr_bits, 0, doc=self.base_doc)]

    def configure(self, op_params, in_types, tensor_addr: int = 0, bindings=None):
        _check_tile(self, op_params, bindings)
        return self.config_image(base=_byte_base(self, op_params, tensor_addr))


# ----------------------------------------------------------------------------- LinearOffChipLoad

class _LoadState:
    """The signals the pieces of a :class:`LinearOffChipLoad` share (:meth:`LinearOffChipLoad.elaborate`);
    no logic.

    Plain attributes, not a component: the control, the walk's events and the burst count each drive some of
    the event's fields, its valid and the walk's state, so ports between them would be most of these
    signals, in both directions.

    Parameters
    ----------
    unit : LinearOffChipLoad
        The unit, its registers already elaborated.

    Attributes
    ----------
    n_out : Value
        The ``n_out`` register (``out_shape`` dimensions).
    rstr, racc : list
        With a ref: per ref dimension its byte stride (register ``rstride{k}``) and its running byte
        address (``racc{k}``, the walk's start); empty without.
    top : Signal
        The highest block-end level the unit sends.
    state : Signal
        IDLE, RUN or FIN (:meth:`LinearOffChipLoad._control`).
    blk_done : Signal
        No ref: the one block is finished.
    walking : Signal
        No ref: the walk's events are being sent (RUN, the block not finished and not empty).
    ev_valid, final : Signal
        An event this cycle; it ends the block.
    covered, burst : Signal
        Bursts: the tiles of the current burst still to come (requested), and the tiles the next request
        covers.
    run_op, run_last : Signal
        What the run's position does this cycle (HOLD, INC, ZERO: hold, step, restart); registered
        ``run_rem == 1``.
    w, eager_mode, leaf_skip
        Set by :meth:`LinearOffChipLoad._walk`: the :class:`AffineWalk`, whether block ends are eager (a ref of
        rank 0), and whether the block has no tokens at all.
    ev, accept
        Set by :meth:`LinearOffChipLoad._request_side`: the event's payload and whether the event is taken
        this cycle.
    """

    IDLE, RUN, FIN = 0, 1, 2        # the unit's state
    HOLD, INC, ZERO = 0, 1, 2       # the run position's operation

    def __init__(self, unit):
        p, R = unit.params, unit.regs
        D, bw = p.max_dims, p.burst_words
        self.n_out = R["n_out"]
        self.rstr = [R[f"rstride{k}"] for k in range(D)] if p.ref else []
        self.racc = [Signal(p.addr_bits, name=f"racc{k}") for k in range(D)] if p.ref else []
        self.top = Signal(range(D + 1), name="top")
        self.state = Signal(2, name="state")
        self.blk_done = Signal(name="blk_done")
        self.walking = Signal(name="walking")
        self.ev_valid = Signal(name="ev_valid")
        self.final = Signal(name="final")
        self.covered = Signal(range(bw), name="covered")
        self.burst = Signal(range(bw + 1), name="burst")
        self.run_op = Signal(range(3), name="run_op")
        self.run_last = Signal(name="run_last")
        self.w = self.eager_mode = self.leaf_skip = None
        self.ev = self.accept = None


class LinearOffChipLoad(_MemUnit):
    """Affine tile loads (STeP LinearOffChipLoad), optionally once per element of ``i_ref``.

    Ports: ``i_ref`` (only with ``params.ref``; payload ignored), ``o`` (tiles), ``mem``.
    Registers: ``base`` (byte address of the first tile), ``n_out`` (number of
    ``out_shape`` dims), ``count0..`` (``out_shape`` sizes, innermost first),
    ``stride0..`` (signed byte strides of the ``out_shape`` dims, innermost first),
    with a ref ``rstride0..`` (byte strides of the ref dims, innermost first) and
    ``in_rank`` (the ref's rank); ``start`` (written last: the unit idles until it is
    1, and after its done token until it is written 0).

    Semantics are the interpreter's: tile ``base + Σ idx·stride`` over the ref dims
    then the ``out_shape`` dims, ``out_shape`` runs closed by block ends (merged by a
    :class:`StopMerger`, eager when the ref has rank 0, and always for the closes
    inside the walk, which the next tile follows: no cycle is lost per run), ref
    stop ``S_k`` sent as
    ``S_(k + n_out)``; empty ``out_shape`` dims give the interpreter's stops.

    The address generator keeps one running byte address per dimension (adders
    only, no multipliers). Latency: memory latency + 2 cycles from the request to
    the tile on ``o`` (+ 1 with ``params.pipeline``: the walk's request events pass
    a :class:`~step_hdl.units.stream.FullSlice` before the tracker; declared
    :attr:`latency` 1; the tracker's order queue then has a registered head, so a
    stop or done event that finds it empty leaves a cycle later, and the walk's
    step counters restart from ``count - 1`` and whether the count is 1 or 2,
    registers decoded from the counts' writes). II 1 per tile while the memory keeps up (see the module
    docstring); a block end that merges with a later stop costs one extra cycle.
    Combinational: ``i_ref.ready`` and ``mem.req.valid`` from the generator state,
    ``mem.req.ready`` and ``i_ref.valid`` (with ``pipeline``: ``mem.req.valid`` from
    the slice and the tracker's registers only, ``i_ref.ready`` from the walk and
    the slice's registered ``ready``); ``o`` comes from the StopMerger behind
    FIFOs (``o.valid`` never depends on ``o.ready``).
    """

    kind = "LinearOffChipLoad"

    @property
    def latency(self) -> int:
        return 1 if self.params.pipeline else 0

    @classmethod
    def latency_of(cls, node, pipeline: bool = False) -> int:
        return 1 if pipeline else 0

    def formats(self):
        p = self.params
        f = {"o": (True, TokenFormat(p.tile, p.max_rank))}
        if p.ref:
            f["i_ref"] = (False, TokenFormat(tile_format(p.ref_dtype, p.ref_rows, p.ref_cols), p.max_rank))
        return f

    def registers(self):
        p = self.params
        sb = stop_bits(p.max_rank)
        regs = [Reg("start", 1, 0, doc="1: run (write last)"),
                Reg("base", p.addr_bits, 0, doc="byte address of the first tile"),
                Reg("n_out", (p.max_dims).bit_length(), 1, doc="number of out_shape dimensions"),
                Reg("in_rank", sb, 0, doc="rank of the ref stream")]
        regs += [Reg(f"count{j}", p.count_bits, 1, doc=f"out_shape size, dim {j} from the innermost")
                 for j in range(p.max_dims)]
        regs += [Reg(f"stride{j}", 32, 0, signed=True, doc=f"byte stride of out dim {j} from the innermost")
                 for j in range(p.max_dims)]
        if p.ref:
            regs += [Reg(f"rstride{k}", 32, 0, signed=True, doc=f"byte stride of ref dim {k} from the innermost")
                     for k in range(p.max_dims)]
        if p.burst_words > 1:
            regs.append(Reg("run", 32, 1, doc="tiles of the walk's contiguous runs (1: none; bursts within one)"))
        return regs

    def configure(self, op_params, in_types, tensor_addr: int = 0, bindings=None):
        p = self.params
        _check_tile(self, op_params, bindings)
        ref_t = in_types.get("ref")
        if (ref_t is not None) != p.ref:
            raise ParamError(f"LinearOffChipLoad: the node {'has' if ref_t is not None else 'has no'} ref "
                             f"stream but the unit was built with ref={p.ref}")
        out_shape = [concrete_param(d, bindings, self, "out_shape size") for d in op_params["out_shape"]]
        n_ref = len(ref_t.shape) if ref_t is not None else 0
        n_out = len(out_shape)
        strides = list(op_params["stride"])
        if len(strides) != n_ref + n_out:
            raise ParamError(f"LinearOffChipLoad: {len(strides)} strides for {n_ref + n_out} dimensions")
        if n_ref + n_out > p.max_dims or n_ref + n_out - 1 > p.max_rank or (n_out == 0 and not p.ref):
            raise ParamError(f"LinearOffChipLoad: {n_ref} ref + {n_out} out dimensions do not fit max_dims "
                             f"{p.max_dims} / max_rank {p.max_rank}")
        tb = p.tile_bytes
        values = {"base": _byte_base(self, op_params, tensor_addr), "n_out": n_out, "in_rank": max(0, n_ref - 1)}
        for j, c in enumerate(reversed(out_shape)):
            values[f"count{j}"] = c
        for j, s in enumerate(reversed(strides[n_ref:])):
            values[f"stride{j}"] = s * tb
        for k, s in enumerate(reversed(strides[:n_ref])):
            values[f"rstride{k}"] = s * tb
        if p.burst_words > 1:
            values["run"] = contiguous_run(list(reversed(out_shape)), list(reversed(strides[n_ref:])))
        values["start"] = 1
        return self.config_image(**values)

    def elaborate(self, platform):
        """The unit's logic, in the order its pieces add it (the class docstring describes the whole).

        The response side (:meth:`_response_side`: the request/response core and the output's
        StopMerger), the shared signals (:class:`_LoadState`), the address walk (:meth:`_walk`), the
        request side (:meth:`_request_side`: the events' channel to the core, :meth:`_burst_length`,
        :meth:`_block_events`), and the control (:meth:`_control`, with the ref's tokens in
        :meth:`_ref_token`, or the one block of a unit without a ref in :meth:`_no_ref_run` and
        :meth:`_no_ref_walk`). Each piece takes the module ``m`` and the shared signals ``s``. (Helpers, not
        components: see :class:`_LoadState`.)
        """
        m = Module()
        self.regs.elaborate(m, self.cfg)
        tr = self._response_side(m)
        s = _LoadState(self)
        self._walk(m, s)
        self._request_side(m, s, tr)
        self._burst_length(m, s)
        self._control(m, s)
        if not self.params.ref:
            self._no_ref_walk(m, s)
        return m

    def _response_side(self, m):
        """The request/response core (:class:`_Tracker`) on ``mem`` and the :class:`StopMerger` on ``o``.

        The core issues each event's request as it queues the event (its request side is
        :meth:`_request_side`), keeps the responses in order and hands every event, with its tile, to the
        merger, which merges block ends into the stops after them. With ``pipeline`` the core's order queue
        has a registered head (``buffered``). Latency: memory latency + 2 cycles from a request to its tile on
        ``o``; an event without a tile that finds the order queue empty leaves the core 1 cycle after it
        (2 with ``pipeline``). Combinational: ``o`` from the merger behind the core's FIFOs (``o.valid``
        never depends on ``o.ready``).

        Returns
        -------
        _Tracker
            The core; its ``ev`` takes the unit's events.
        """
        p, fmt = self.params, self.token_format()
        m.submodules.tracker = tr = _Tracker(p.port, fmt.stop_bits, p.max_inflight, buffered=p.pipeline)
        m.submodules.merger = mg = StopMerger(fmt)
        wiring.connect(m, tr.mem, wiring.flipped(self.mem))
        wiring.connect(m, mg.o, wiring.flipped(self.o))
        m.d.comb += [mg.i.valid.eq(tr.o.valid), tr.o.ready.eq(mg.i.ready),
                     mg.i.payload.payload.eq(tr.o.payload.payload), mg.i.payload.stop.eq(tr.o.payload.stop),
                     mg.i.payload.done.eq(tr.o.payload.done), mg.i.payload.end.eq(tr.o.payload.end),
                     mg.i.payload.eager.eq(tr.o.payload.eager)]
        return tr

    def _walk(self, m, s):
        """The address walk of one block (``out_shape``, :class:`AffineWalk`, prefix ``o``): ``s.w``.

        Its levels go up to ``top`` (``n_out`` with a ref, whose stops follow the block's, else ``n_out -
        1``). With ``pipeline`` the walk's step counters restart from ``count - 1`` and whether the count is
        1 or 2, registers decoded from the counts' writes. Also ``s.eager_mode`` (a ref of rank 0: the
        block's final end is eager too, not only the closes inside the walk) and ``s.leaf_skip`` (no ref and
        an empty outermost dimension: no tokens at all; never with a ref, where ``lo <= n_out = top``).
        Everything here is combinational from the registers and the walk's state (the walk's
        :meth:`~AffineWalk.reset` and :meth:`~AffineWalk.advance` are the control's).
        """
        p, R = self.params, self.regs
        D = p.max_dims
        cnt = [R[f"count{j}"] for j in range(D)]
        ostr = [R[f"stride{j}"] for j in range(D)]
        m.d.comb += s.top.eq(s.n_out if p.ref else s.n_out - 1)
        less = None
        if p.pipeline:
            less = self.regs.count_flags(m, self.cfg, [f"count{j}" for j in range(D)])
        s.w = w = AffineWalk(m, cnt, ostr, s.n_out, s.top, p.count_bits, p.addr_bits, "o",
                             static_counts=True, count_flags=less)
        s.eager_mode = Const(int(p.ref)) & (R["in_rank"] == 0) if p.ref else Const(0)
        s.leaf_skip = w.has_zero & (w.lo > s.top)

    def _request_side(self, m, s, tr):
        """The events' channel into the core: ``s.ev`` (the event), valid from ``s.ev_valid``, and
        ``s.accept`` (the event is taken this cycle).

        With ``pipeline`` the events reach the core through a register slice (:class:`FullSlice`): the
        core's credit check and the memory handshake stay off the walk's advance (its counters' enables),
        and the event logic off the core's queues; a cycle of latency. Without it the channel is the core's
        ``ev``: ``mem.req.valid`` combinational in ``ev_valid`` and ``accept`` in ``mem.req.ready``.

        Parameters
        ----------
        tr : _Tracker
            The core (:meth:`_response_side`).
        """
        events = tr.ev
        if self.params.pipeline:
            m.submodules.slice = sl = FullSlice(tr.ev_layout)
            wiring.connect(m, sl.o, tr.ev)
            events = sl.i
        s.ev = events.payload
        m.d.comb += events.valid.eq(s.ev_valid)
        s.accept = events.valid & events.ready

    def _burst_length(self, m, s):
        """``s.burst``: the tiles the next read request covers (1 without bursts).

        The tiles left in the walk's contiguous run (register ``run``, from :meth:`configure`), up to the
        end of the burst block the walk's address is in; the run's position is a free-running count of its
        tiles not yet requested (each run is whole: the walk's blocks are runs), which ``s.run_op`` holds,
        steps or restarts (``_LoadState.INC``, ``ZERO``) and ``s.run_last`` flags at its last tile. Latency:
        the run's count and flags are registers; ``burst`` is combinational from them and the walk's offset.
        """
        p, bw = self.params, self.params.burst_words
        if bw == 1:
            m.d.comb += s.burst.eq(1)
            return
        INC, ZERO = _LoadState.INC, _LoadState.ZERO
        run_rem = Signal(32, name="run_rem")   # the run's tiles from the walk's position on (>= 1 once started)
        run_op, run_last = s.run_op, s.run_last
        lo, hi = (p.tile_bytes - 1).bit_length(), (p.burst_bytes - 1).bit_length()
        # (``to_end`` keeps the name Amaranth gives a signal it cannot name: a name of ours would rename its
        # wire in the Verilog)
        to_end, run_left = Signal(range(bw + 1), name="$signal"), Signal(range(bw + 1), name="run_left")
        # run_left: run_rem clamped to a burst: a register beside run_rem, each outcome computed from
        # registers by a decrement or a comparison (never a subtraction into a comparison), so the 32-bit
        # run arithmetic stays off the request's path and out of the carry chains' series
        run = self.regs["run"]

        def clamp(v):
            return Mux(v > bw, bw, v)
        m.d.sync += [run_rem.eq(Mux(run_op == INC, run_rem - 1, Mux(run_op == ZERO, run, run_rem))),
                     run_last.eq(Mux(run_op == INC, run_rem == 2, Mux(run_op == ZERO, run == 1, run_rem == 1))),
                     run_left.eq(Mux(run_op == INC, Mux(run_rem > bw + 1, bw, run_rem - 1),
                                     Mux(run_op == ZERO, clamp(run), clamp(run_rem))))]
        m.d.comb += [to_end.eq(bw - s.w.acc[0][lo:hi]),
                     s.burst.eq(Mux(run_left < to_end, run_left, to_end))]

    def _block_events(self, m, s):
        """The walk's event this cycle (in the control's state that sends the block).

        Phase 0: an element's tile (a read of ``burst`` tiles on the first tile of a burst, none for the
        tiles the burst covers), or, for an empty dimension, the block end the walk's ``lo`` names. Phase 1:
        the close after an element, sent at once (a close inside the walk is followed by the next element,
        never by an outer stop; held, it would cost the output a cycle per close), eager but for the
        block's final close (without a ref of rank 0). ``s.final``: this event ends the block.
        Combinational from the walk's registers and the burst count; ``covered`` and the run's position
        move when a tile's event is taken.
        """
        w, ev, bw = s.w, s.ev, self.params.burst_words
        with m.If(w.phase == 0):
            with m.If(w.has_zero):
                m.d.comb += [s.ev_valid.eq(1), ev.end.eq(1), ev.stop.eq(w.lo),
                             ev.eager.eq(s.eager_mode & w.complete & ~w.close_needed)]
            with m.Else():
                m.d.comb += [s.ev_valid.eq(1), ev.mem.eq(1), ev.addr.eq(w.acc[0]),
                             ev.words.eq(Mux(s.covered == 0, s.burst, 0))]
                if bw > 1:
                    with m.If(s.accept):
                        m.d.sync += s.covered.eq(Mux(s.covered == 0, s.burst - 1, s.covered - 1))
                        m.d.comb += s.run_op.eq(Mux(s.run_last, _LoadState.ZERO, _LoadState.INC))
            m.d.comb += s.final.eq(w.complete & ~w.close_needed)
        with m.Else():
            m.d.comb += [s.ev_valid.eq(1), ev.end.eq(1), ev.stop.eq(w.pend),
                         ev.eager.eq(~w.pend_final | s.eager_mode), s.final.eq(w.pend_final)]

    def _control(self, m, s):
        """The unit's state: IDLE until ``start``, RUN (the ref's tokens, or the one block), FIN after its
        done until ``start`` is written 0.

        The start resets the walk (and the ref's running addresses) to ``base``; with no ref it also sets
        ``walking`` unless the block is empty (the walk's empty-dimension registers follow the counts a
        cycle after their writes, and ``start`` is written after them and seen a cycle later).
        """
        p, R, w = self.params, self.regs, s.w
        with m.Switch(s.state):
            with m.Case(_LoadState.IDLE):
                with m.If(R["start"]):
                    m.d.sync += [s.state.eq(_LoadState.RUN), w.phase.eq(0), s.blk_done.eq(0), s.covered.eq(0)]
                    if not p.ref:
                        m.d.sync += s.walking.eq(~s.leaf_skip)
                    m.d.comb += s.run_op.eq(_LoadState.ZERO)
                    w.reset(m, R["base"])
                    m.d.sync += [a.eq(R["base"]) for a in s.racc]
            with m.Case(_LoadState.RUN):
                if p.ref:
                    self._ref_token(m, s)
                else:
                    self._no_ref_run(m, s)
            with m.Case(_LoadState.FIN):
                with m.If(~R["start"]):
                    m.d.sync += s.state.eq(_LoadState.IDLE)

    def _ref_token(self, m, s):
        """RUN with a ref: each token of ``i_ref`` (taken with the event it makes).

        Done: the done event, then FIN. A stop ``S_k``: the event ``S_(k + n_out)``, and ref dimension ``k``
        steps (the running addresses of it and the ones below it move on by its stride; the walk restarts
        there). A data token: the block's events (:meth:`_block_events`); the token is taken with the block's
        final event, and ref dimension 0 steps. Combinational: ``i_ref.ready`` from ``accept`` (so from the
        channel's ready: ``mem.req.ready``, or with ``pipeline`` the slice's registered ``ready``) and the
        walk's state.
        """
        D, w, ev = self.params.max_dims, s.w, s.ev
        ref = self.i_ref
        tok = ref.payload
        with m.If(ref.valid):
            with m.If(tok.done):
                m.d.comb += [s.ev_valid.eq(1), ev.done.eq(1), ref.ready.eq(s.accept)]
                with m.If(s.accept):
                    m.d.sync += s.state.eq(_LoadState.FIN)
            with m.Elif(tok.stop != 0):
                m.d.comb += [s.ev_valid.eq(1), ev.stop.eq(tok.stop + s.n_out), ref.ready.eq(s.accept)]
                with m.If(s.accept):
                    for k in range(1, D):
                        with m.If(tok.stop == k):
                            nxt = s.racc[k] + s.rstr[k]
                            m.d.sync += [s.racc[i].eq(nxt) for i in range(k + 1)]
                            w.reset(m, nxt)
            with m.Else():
                self._block_events(m, s)
                m.d.comb += ref.ready.eq(s.accept & s.final)

                def finish_ref():
                    nxt = s.racc[0] + s.rstr[0]
                    m.d.sync += s.racc[0].eq(nxt)
                    w.reset(m, nxt)
                with m.If(s.accept):
                    w.advance(m, finish_ref)

    def _no_ref_run(self, m, s):
        """RUN without a ref: once the block is finished (``blk_done``), the done event, then FIN; an empty
        block (not ``walking`` from the start) is finished at once. The block's events come from
        :meth:`_no_ref_walk`."""
        with m.If(s.blk_done):
            m.d.comb += [s.ev_valid.eq(1), s.ev.done.eq(1)]
            with m.If(s.accept):
                m.d.sync += s.state.eq(_LoadState.FIN)
        with m.Elif(~s.walking):
            m.d.sync += s.blk_done.eq(1)      # the empty block: nothing to send

    def _no_ref_walk(self, m, s):
        """Without a ref: while ``walking`` (one flag, set only in RUN, so the walk's enables and the event
        logic read it instead of the state, ``blk_done`` and whether the walk is empty), the block's events
        (:meth:`_block_events`); the block's final event ends it (``blk_done``). Outside the control's
        cases."""
        with m.If(s.walking):
            self._block_events(m, s)

            def finish_once():
                m.d.sync += [s.walking.eq(0), s.blk_done.eq(1)]
            with m.If(s.accept):
                s.w.advance(m, finish_once)


# ----------------------------------------------------------------------------- LinearOffChipStore

class LinearOffChipStore(_MemUnit):
    """Write the tiles of ``i`` to consecutive tile slots from ``base`` (STeP LinearOffChipStore).

    Ports: ``i`` (tiles), ``mem``, ``finished`` (status, 1 once the done token was taken
    and every write was acknowledged; cleared by the next input token). Registers:
    ``base`` (byte address of the first slot). Stops are consumed; after the done token
    the next stream writes from ``base`` again.

    Latency: without bursts (``burst_words`` 1) the write request leaves in the cycle the
    tile arrives; with bursts a tile waits in a collector of ``2 * burst_words`` tiles until
    its burst closes (the block's last tile came, or a stop, done or a cycle without a
    tile), then the burst's beats leave one per cycle: a write leaves up to
    ``burst_words`` cycles later. II 1 while the memory keeps up. Combinational (without
    bursts): ``i.valid``/``i.payload`` -> ``mem.req``, ``mem.req.ready`` -> ``i.ready``;
    with bursts ``i.ready`` from the collector's state only.
    """

    kind = "LinearOffChipStore"

    def formats(self):
        return {"i": (False, self.token_format())}

    finishes = True

    def extra_members(self):
        return {**super().extra_members(), "finished": Out(1)}

    base_doc = "byte address of the first slot"

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        p = self.params
        fmt = self.token_format()
        m.submodules.tracker = tr = _Tracker(p.port, fmt.stop_bits, p.max_inflight, ack_bits=1, writes=True,
                                             stops=False)
        wiring.connect(m, tr.mem, wiring.flipped(self.mem))
        tok = self.i.payload
        off = Signal(p.addr_bits)
        is_data = ~tok.done & (tok.stop == 0)
        fin = Signal()
        m.d.comb += self.finished.eq(fin)
        ev = tr.ev.payload
        took = self.i.valid & self.i.ready
        m.d.comb += tr.o.ready.eq(1)
        bw = p.burst_words
        if bw == 1:
            m.d.comb += [
                tr.ev.valid.eq(self.i.valid & (is_data | tok.done)),
                ev.mem.eq(is_data), ev.addr.eq(self.regs["base"] + off), ev.wdata.eq(tok.payload), ev.words.eq(1),
                ev.done.eq(tok.done),
                self.i.ready.eq(Mux(is_data | tok.done, tr.ev.ready, 1)),
            ]
        else:
            self._bursts(m, tr, off, took & is_data)
        with m.If(took):
            m.d.sync += fin.eq(0)
            with m.If(is_data):
                m.d.sync += off.eq(off + p.tile_bytes)
            with m.If(tok.done):
                m.d.sync += off.eq(0)
        with m.If(tr.o.valid & tr.o.payload.done):
            m.d.sync += fin.eq(1)
        return m

    def _bursts(self, m, tr, off, took_data):
        """The write collector: tiles into a FIFO, each burst's length into another once it closes (at the
        block's end, a stop or done, or a cycle without a tile), the bursts' beats out to the tracker; the
        done token waits until every burst has left."""
        p = self.params
        bw = p.burst_words
        tok = self.i.payload
        ev = tr.ev.payload
        m.submodules.tiles = tiles = fifo.SyncFIFO(width=p.tile.width, depth=2 * bw)
        m.submodules.lengths = lengths = fifo.SyncFIFO(width=bw.bit_length(), depth=4)
        is_data = ~tok.done & (tok.stop == 0)
        n = Signal(range(bw + 1))               # tiles of the open burst
        lo, hi = (p.tile_bytes - 1).bit_length(), (p.burst_bytes - 1).bit_length()
        addr = self.regs["base"] + off
        ends_block = (addr + p.tile_bytes)[lo:hi] == 0      # the tile just taken is its block's last
        sent = Signal(range(bw + 1))            # beats of the head burst sent
        send_off = Signal(p.addr_bits)
        drained = (n == 0) & ~tiles.r_rdy
        m.d.comb += [tiles.w_data.eq(tok.payload), tiles.w_en.eq(took_data)]
        # a data tile needs room for itself and for its burst's length; done waits for the bursts to leave
        m.d.comb += self.i.ready.eq(Mux(is_data, tiles.w_rdy & lengths.w_rdy, ~tok.done | (drained & tr.ev.ready)))
        close = Signal()
        m.d.comb += close.eq(Mux(took_data, ends_block, n != 0))
        m.d.comb += [lengths.w_data.eq(n + took_data), lengths.w_en.eq(close & lengths.w_rdy)]
        with m.If(close & lengths.w_rdy):
            m.d.sync += n.eq(0)
        with m.Elif(took_data):
            m.d.sync += n.eq(n + 1)
        # the head burst's beats: its length on the first, 0 on the others
        head = lengths.r_data
        beat = lengths.r_rdy & tiles.r_rdy
        m.d.comb += [ev.wdata.eq(tiles.r_data), ev.addr.eq(self.regs["base"] + send_off),
                     ev.words.eq(Mux(sent == 0, head, 0))]
        with m.If(beat):
            m.d.comb += [tr.ev.valid.eq(1), ev.mem.eq(1)]
            with m.If(tr.ev.ready):
                m.d.comb += tiles.r_en.eq(1)
                m.d.sync += send_off.eq(send_off + p.tile_bytes)
                with m.If(sent + 1 == head):
                    m.d.comb += lengths.r_en.eq(1)
                    m.d.sync += sent.eq(0)
                with m.Else():
                    m.d.sync += sent.eq(sent + 1)
        with m.Elif(self.i.valid & tok.done & drained):
            m.d.comb += [tr.ev.valid.eq(1), ev.done.eq(1)]
            with m.If(tr.ev.ready):
                m.d.sync += send_off.eq(0)


# ----------------------------------------------------------------------------- random access

class RandomOffChipLoad(_MemUnit):
    """One tile per address token: tile index ``base + addr`` (STeP RandomOffChipLoad).

    Ports: ``i_addr`` ([1, 1] int32 indices), ``o`` (tiles, the address stream's
    shape), ``mem``. Registers: ``base`` (byte address of tile index 0 of the view,
    i.e. ``tensor_addr + base * tile_bytes``).

    Latency: memory latency + 2 cycles. II 1 while the memory keeps up.
    Combinational: ``i_addr`` -> ``mem.req`` (address = base + addr * tile_bytes),
    ``mem.req.ready`` -> ``i_addr.ready``; ``o.valid`` from FIFO state only.
    """

    kind = "RandomOffChipLoad"

    def formats(self):
        return {"i_addr": (False, TokenFormat(INDEX, self.params.max_rank)), "o": (True, self.token_format())}

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        p = self.params
        fmt = self.token_format()
        m.submodules.tracker = tr = _Tracker(p.port, fmt.stop_bits, p.max_inflight)
        wiring.connect(m, tr.mem, wiring.flipped(self.mem))
        tok = self.i_addr.payload
        is_data = ~tok.done & (tok.stop == 0)
        ev = tr.ev.payload
        m.d.comb += [
            tr.ev.valid.eq(self.i_addr.valid), self.i_addr.ready.eq(tr.ev.ready),
            ev.mem.eq(is_data), ev.addr.eq(self.regs["base"] + tok.payload[0] * p.tile_bytes), ev.words.eq(1),
            ev.stop.eq(Mux(is_data, 0, tok.stop)), ev.done.eq(tok.done), ev.end.eq(0), ev.eager.eq(0),
            self.o.valid.eq(tr.o.valid), tr.o.ready.eq(self.o.ready),
            self.o.payload.payload.eq(tr.o.payload.payload), self.o.payload.stop.eq(tr.o.payload.stop),
            self.o.payload.done.eq(tr.o.payload.done),
        ]
        return m


class RandomOffChipStore(_MemUnit):
    """One tile write per (address, data) pair; the address comes back as acknowledgement
    (STeP RandomOffChipStore).

    Ports: ``i_addr`` ([1, 1] int32 indices), ``i_data`` (tiles, same shape), ``o``
    (the addresses, sent when their write is acknowledged), ``mem``. Registers:
    ``base`` as for :class:`RandomOffChipLoad`. The two inputs are taken together;
    their stop tokens must line up (the interpreter checks it; the hardware follows
    ``i_addr``'s).

    Latency: memory latency + 2 cycles from the pair to its acknowledgement; II 1
    while the memory keeps up. Combinational: ``i_addr``/``i_data`` -> ``mem.req``;
    ``i_*.ready`` from ``mem.req.ready`` and the other input's ``valid``.
    """

    kind = "RandomOffChipStore"

    def formats(self):
        ind = TokenFormat(INDEX, self.params.max_rank)
        return {"i_addr": (False, ind), "i_data": (False, self.token_format()), "o": (True, ind)}

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        p = self.params
        fmt = self.token_format()
        m.submodules.tracker = tr = _Tracker(p.port, fmt.stop_bits, p.max_inflight, ack_bits=INDEX.width,
                                             writes=True, event_ack=True)
        wiring.connect(m, tr.mem, wiring.flipped(self.mem))
        a, d = self.i_addr, self.i_data
        tok = a.payload
        is_data = ~tok.done & (tok.stop == 0)
        ev = tr.ev.payload
        m.d.comb += [
            tr.ev.valid.eq(a.valid & d.valid),
            a.ready.eq(tr.ev.ready & d.valid), d.ready.eq(tr.ev.ready & a.valid),
            ev.mem.eq(is_data), ev.wdata.eq(d.payload.payload),
            ev.addr.eq(self.regs["base"] + tok.payload[0] * p.tile_bytes), ev.ack.eq(tok.payload), ev.words.eq(1),
            ev.stop.eq(Mux(is_data, 0, tok.stop)), ev.done.eq(tok.done), ev.end.eq(0), ev.eager.eq(0),
            self.o.valid.eq(tr.o.valid), tr.o.ready.eq(self.o.ready),
            self.o.payload.payload.eq(tr.o.payload.payload), self.o.payload.stop.eq(tr.o.payload.stop),
            self.o.payload.done.eq(tr.o.payload.done),
        ]
        return m
