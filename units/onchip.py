"""The on-chip buffer: Bufferize + Streamify as one unit (:class:`OnChipBuffer`), two banks of SRAM.

Its reader re-reads a buffered block in order, repeated, by an affine pattern
(:class:`~step_hdl.units.address.AffineWalk`) or once per token of a ``ref``
stream; the class docstring has the details.

The unit is a few small components, each documented with its latency and
combinational paths: :class:`_Writer` (the input into the write bank),
:class:`_Banks` (which bank is written and which read, and each closed
chunk's description), :class:`_Pager` (a pooled buffer's pages),
:class:`_Reader` (the next read event: entries, block ends, stops) and
:class:`_ReadPipe` (the read data joined to its event for the
:class:`~step_hdl.units.merger.StopMerger`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .address import AffineWalk
from .base import StepUnit
from .config import ConfigRegs, Reg
from .layout import TokenFormat, stop_bits, tile_format
from .merger import StopMerger, event_layout
from .params import ParamError, StreamParams, check_ref, concrete_param, positive
from .pool import pool_signature

__all__ = ["OnChipBufferParams", "OnChipBuffer"]


@dataclass(frozen=True)
class OnChipBufferParams(StreamParams):
    """OnChipBuffer: ``sram_bytes`` of tile storage split into two banks (double
    buffering), ``repeat_bits`` for the repeat count register, whether there is a
    Streamify ``ref`` input (payload a ``ref_rows × ref_cols`` ``ref_dtype`` tile, ignored),
    ``read_dims``: the most ``read_shape`` dimensions of an affine read pattern
    (0: no affine read hardware), and ``transpose``: the hardware that reads a
    rank-2 buffer column by column at its own size (needs ``read_dims >= 2``).
    ``pool_pages > 0``: no SRAM of its own; entries live in pages of
    ``page_entries`` taken from a :class:`~step_hdl.units.pool.TilePool` of
    ``pool_pages`` pages through the ``pool`` port (linear and ref reads
    only: ``read_dims = 0``)."""

    sram_bytes: int = 1024
    repeat_bits: int = 16
    ref: bool = False
    ref_rows: int = 1
    ref_cols: int = 1
    ref_dtype: str = "int32"
    read_dims: int = 0
    transpose: bool = False
    pool_pages: int = 0
    page_entries: int = 0
    out_reg: bool = False

    def validate(self):
        super().validate()
        if not isinstance(self.out_reg, bool):
            raise ParamError(f"{self.owner}: out_reg must be True or False, got {self.out_reg!r}")
        positive(self.owner, "read_dims", self.read_dims, minimum=0)
        positive(self.owner, "pool_pages", self.pool_pages, minimum=0)
        positive(self.owner, "page_entries", self.page_entries, minimum=1 if self.pool_pages else 0)
        if self.pool_pages and self.read_dims:
            raise ParamError(f"{self.owner}: a pooled buffer reads linearly (or by a ref): read_dims must be 0, "
                             f"got {self.read_dims}")
        if not isinstance(self.transpose, bool):
            raise ParamError(f"{self.owner}: transpose must be True or False, got {self.transpose!r}")
        if self.transpose and self.read_dims < 2:
            raise ParamError(f"{self.owner}: transpose reads walk 2 dimensions: read_dims must be >= 2, got "
                             f"{self.read_dims}")
        if self.read_dims > self.max_rank + 1:
            raise ParamError(f"{self.owner}: read_dims {self.read_dims} > max_rank + 1 = {self.max_rank + 1}")
        positive(self.owner, "sram_bytes", self.sram_bytes)
        positive(self.owner, "repeat_bits", self.repeat_bits)
        if self.repeat_bits > 32:
            raise ParamError(f"{self.owner}: repeat_bits {self.repeat_bits} > 32 is not supported")
        tb = self.rows * self.cols * self.dt.bits // 8
        if 2 * tb > self.sram_bytes:
            raise ParamError(f"{self.owner}: a {tb}-byte tile [{self.rows}, {self.cols}] {self.dtype} is larger "
                             f"than an SRAM bank of {self.sram_bytes // 2} bytes (sram_bytes {self.sram_bytes}, "
                             f"two banks)")
        check_ref(self)

    @property
    def bank_depth(self) -> int:
        """Entries (tiles or inner stop tokens) per bank (a pooled buffer's bank may take every page)."""
        if self.pool_pages:
            return self.pool_pages * self.page_entries
        return self.sram_bytes // 2 // (self.rows * self.cols * self.dt.bits // 8)

    @property
    def pooled(self) -> bool:
        return self.pool_pages > 0


class OnChipBuffer(StepUnit):
    """Bufferize + Streamify as one unit (the buffer handles stay inside).

    Each rank-``b`` chunk of ``i`` (closed by a stop ``S_k``, ``k >= b``) is written
    to one SRAM bank; the other bank is streamed out meanwhile (double
    buffering). The chunk's size is learned from its stop tokens (dynamic size).
    Each buffer is read ``repeat`` times (a new dimension of that size; register
    ``repeat = 0`` means no repeat dimension: read once, Streamify without
    ``repeat``). Output = Streamify(Bufferize(i, b)) token for token: buffer ends
    and the repeat dimension are block ends through a :class:`StopMerger` (eager
    when the buffer stream has rank 0, i.e. ``in_rank == b``; an affine
    reading's inner closes are always eager, since the next entry follows them,
    so a read pattern streams a token per cycle, stops included); an input stop
    ``S_k`` with ``k > b`` leaves after the buffer as ``S_(k - b + n + mid)``, where
    ``n`` is the number of dims of one reading (``b``, or ``len(read_shape)`` for
    affine reads) and ``mid`` the dims added per buffer (1 with ``repeat``, ``c``
    with a ref, else 0).

    With ``params.ref`` (Streamify's ``ref`` input ``i_ref``, payload ignored; its
    shape is the buffer stream's plus ``c`` inner dims, register ``c``), each buffer
    is read once per data element of the next rank-``c`` chunk of ``i_ref``; the
    chunk's inner stops ``S_k`` leave as ``S_(k + n)`` and its end as a block end
    ``S_(n + c)``; with ``c = 0`` one ref data token per buffer (ref stops are
    skipped, and trailing ref stops before the ref's done token are accepted).

    Registers: ``b`` (Bufferize rank, >= 1), ``in_rank`` (rank of ``i``), ``repeat``,
    ``c`` (ref mode), ``n_read``/``rcount*``/``rstride*`` (affine reads).
    Storage: ``bank_depth = sram_bytes / 2 / tile_bytes`` entries per bank; an
    entry is a tile or an inner stop token (stop levels are kept in side bits next
    to each tile). A chunk with more entries than a bank keeps its first
    ``bank_depth`` entries and sets the sticky status output ``overflow``: the
    rest are dropped, and the top level reports the buffer (the mapper sizes
    the SRAM for the largest buffer it knows of, so only a program that sends
    more than its bindings said gets there).

    Pooled storage (``params.pool_pages``): the banks hold no SRAM; each takes
    pages of ``page_entries`` entries from a
    :class:`~step_hdl.units.pool.TilePool` as its entries arrive (a request
    with the first entry of each page; the input waits while the pool has not
    granted one) and returns them all when its last reading is over, so a
    bank holds what its chunk needs, not the largest chunk. Reads walk the
    bank's chain of pages. Timing is the private SRAM's, but for a cycle lost
    whenever another client of the pool is granted a page before this one.

    Affine reads (``read_dims > 0`` and register ``n_read > 0``): the buffer keeps
    only its data tiles (flattened, inner stops dropped) and each reading emits
    the tiles at ``Σ idx_j · rstride_j`` over ``read_shape`` (``rcount0..``,
    ``rstride0..`` innermost first, in tiles), with the interpreter's block ends,
    including empty ``read_shape`` dims. A pattern reaching past the buffer reads
    whatever the bank holds (the interpreter raises an error). Register
    ``merge`` (``read_dims >= 2``) fuses a Flatten(0, ``merge``) of each
    reading: the walk sends no close of level ``merge`` or below and spends no
    cycle on them, and every level above comes ``merge`` lower (a matmul's
    operand read ``[m, n, k]`` streams its ``n·k`` tiles per row without a
    stop per ``k``-run; the sizes must not be 0).

    Transposed reads (``params.transpose``, register ``transpose``; Streamify
    ``transpose``, Bufferize rank 2): the writer counts each chunk's rows (its
    inner stops, plus the last row) and the tiles of its first row, and the
    affine walk reads that bank with counts ``[rows, cols]`` and strides
    ``[cols, 1]`` (innermost first) instead of the registers: each column's
    tiles top to bottom, at whatever size each chunk has (a packed tile's
    partial last block of rows).

    Latency: a buffer starts streaming 2 cycles after its closing stop was taken
    (SRAM read + output register); 3 with ``params.out_reg`` (the SRAM's data
    registered before the StopMerger). II 1 per output token; an affine reading's
    final close leaves with its last tile (the event's ``tail``), a linear
    reading's end costs one cycle (its block end event) unless it is eager (a
    rank-0 buffer stream, or a reading followed by another of the repeat), and
    each buffer switch none; in ref mode each
    ref token costs one cycle of its own. Writing is II 1
    while a bank is free. Combinational: ``i.ready`` from bank state only; SRAM
    read enable and the reader from ``o.ready`` (through the StopMerger);
    ``o.valid`` from registers. With ``out_reg`` (a pipelined fabric's build) a
    skid register sits between the SRAM's registered data and the StopMerger, so
    the reader and the SRAM's read enable follow registers only (``o.ready`` and
    the merger, which decodes each entry's stop bits, reach the skid's flag); the
    modes (repeat, eager, affine) are registers decoded from the writes, an affine
    walk over read counts that are registers (not transposed) keeps its last-step
    flags in registers, and whether the walk's next entry is written is formed
    from the write index and each way the walk can go, the handshakes selecting
    one. The same tokens; a token may leave a cycle earlier or later than without
    them where the output stalls (the skid holds one entry more).

    Structure: ``i`` -> :class:`_Writer` -> the SRAM (or, pooled, :class:`_Pager`)
    -> :class:`_ReadPipe` -> :class:`StopMerger` -> ``o``; :class:`_Banks` keeps
    the two banks' state between the writer and :class:`_Reader`, which forms
    the read events (and reads ``i_ref``) and addresses the SRAM.
    """

    kind = "Bufferize"

    @property
    def latency(self) -> int:
        return 3 if self.params.out_reg else 2

    @classmethod
    def latency_of(cls, node, pipeline: bool = False) -> int:
        return 3 if pipeline else 2

    def formats(self):
        p = self.params
        f = TokenFormat(tile_format(p.dtype, p.rows, p.cols), p.max_rank)
        out = {"i": (False, f), "o": (True, f)}
        if p.ref:
            out["i_ref"] = (False, TokenFormat(tile_format(p.ref_dtype, p.ref_rows, p.ref_cols), p.max_rank))
        return out

    def extra_members(self):
        out = {"overflow": Out(1)}
        if self.params.pooled:
            f = self.fmt("i")
            out["pool"] = Out(pool_signature(f.payload_width + f.stop_bits, self.params.pool_pages,
                                             self.params.page_entries))
        return out

    def registers(self):
        sb = stop_bits(self.params.max_rank)
        return [Reg("b", sb, 1, doc="Bufferize rank (>= 1)"), Reg("in_rank", sb, 1, doc="rank of the input"),
                Reg("repeat", self.params.repeat_bits, 0, doc="Streamify repeat count; 0: no repeat dimension"),
                Reg("c", sb, 0, doc="ref mode: dims of the ref below the buffer stream's")] + (
            [Reg("n_read", (self.params.read_dims).bit_length(), 0, doc="read_shape dims; 0: linear reads")]
            + [Reg(f"rcount{j}", 16, 1, doc=f"read_shape size, dim {j} from the innermost")
               for j in range(self.params.read_dims)]
            + [Reg(f"rstride{j}", 16, 0, signed=True, doc=f"read_stride (tiles), dim {j} from the innermost")
               for j in range(self.params.read_dims)] if self.params.read_dims else []) + (
            [Reg("merge", (self.params.read_dims - 1).bit_length(), 0,
                 doc="a fused Flatten(0, merge) of each reading: its inner closes up to this level not sent")]
            if self.params.read_dims >= 2 else []) + (
            [Reg("transpose", 1, 0, doc="read each rank-2 buffer column by column at its own size")]
            if self.params.transpose else [])

    def configure(self, op_params, in_types, bindings=None):
        """``op_params``: the Bufferize node's ``rank`` plus the Streamify node's ``repeat`` (or None),
        its read pattern, and ``merge``: the ``hi`` of a Flatten(0, hi) of the readings fused into the unit
        (or None); ``in_types``: ``in`` and, in ref mode, ``ref``."""
        unknown = {k for k, v in op_params.items() if v is not None} - {
            "rank", "repeat", "read_shape", "read_stride", "transpose", "merge"}
        if unknown:
            raise ParamError(f"OnChipBuffer: unsupported parameter(s) {sorted(unknown)}")
        b, rep = op_params["rank"], op_params.get("repeat")
        read = {}
        if op_params.get("transpose"):
            if not self.params.transpose:
                raise ParamError("OnChipBuffer: the Streamify node transposes but the unit was built without "
                                 "transpose (OnChipBufferParams(transpose=True))")
            if b != 2 or op_params.get("read_shape") is not None:
                raise ParamError(f"OnChipBuffer: transpose reads rank-2 buffers without a read_shape, got rank "
                                 f"{b}")
            read = {"n_read": 2, "transpose": 1}
        shape = op_params.get("read_shape")
        if shape is not None:
            shape = [concrete_param(d, bindings, self, "read_shape size") for d in shape]
            strides = list(op_params.get("read_stride") or [])
            if not 1 <= len(shape) <= self.params.read_dims or len(strides) != len(shape):
                raise ParamError(f"OnChipBuffer: read_shape {shape} / read_stride {strides}: need 1.."
                                 f"{self.params.read_dims} dims (read_dims) and one stride per dim")
            read["n_read"] = len(shape)
            for j, (n, st) in enumerate(zip(reversed(shape), reversed(strides))):
                read[f"rcount{j}"], read[f"rstride{j}"] = n, st
        merge = op_params.get("merge")
        if merge is not None:
            if isinstance(merge, bool) or not isinstance(merge, int) or not 1 <= merge < read.get("n_read", 0) \
                    or "transpose" in read:
                raise ParamError(f"OnChipBuffer: a fused Flatten(0, {merge}) needs an affine read_shape of more "
                                 f"than {merge} dims (got {shape}); it merges dims of one reading only")
            if 0 in shape:
                raise ParamError(f"OnChipBuffer: a fused Flatten needs read_shape sizes >= 1, got {shape}")
            read["merge"] = merge
        r = in_types["in"].rank
        ref_t = in_types.get("ref")
        if (ref_t is not None) != self.params.ref:
            raise ParamError(f"OnChipBuffer: the Streamify node {'has' if ref_t is not None else 'has no'} ref "
                             f"stream but the unit was built with ref={self.params.ref}")
        if not 1 <= b <= r:
            raise ParamError(f"OnChipBuffer: rank {b} must be in 1..{r} (the input's rank)")
        c = 0
        if ref_t is not None:
            if rep is not None:
                raise ParamError("OnChipBuffer: give either a ref stream or a repeat count, not both")
            c = ref_t.rank - (r - b)
            if c < 0:
                raise ParamError(f"OnChipBuffer: ref rank {ref_t.rank} below the buffer stream's rank {r - b}")
        mid = c if ref_t is not None else (0 if rep is None else 1)
        out_rank = r - b + mid + (read["n_read"] - read.get("merge", 0) if read else b)
        if out_rank > self.params.max_rank:
            raise ParamError(f"OnChipBuffer: output rank {out_rank} exceeds max_rank {self.params.max_rank}")
        if rep is not None and rep < 1:
            raise ParamError(f"OnChipBuffer: repeat must be >= 1, got {rep}")
        return self.config_image(b=b, in_rank=r, repeat=0 if rep is None else rep, c=c, **read)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        p, fmt = self.params, self.fmt("o")
        m.submodules.merger = mg = StopMerger(fmt)
        m.submodules.banks = banks = _Banks(p.bank_depth, fmt.stop_bits, p.transpose)
        m.submodules.writer = writer = _Writer(self.fmt("i"), p.bank_depth, p.pooled, p.transpose)
        m.submodules.reader = reader = _Reader(p, self.regs, p.bank_depth, self.fmt("i_ref") if p.ref else None)
        # with out_reg, the platform's block RAMs with their own output registers (an FPGA's), if it has them
        give = getattr(platform, "registered_ram", None) if p.out_reg and not p.pooled else None
        ram = give(m, fmt.payload_width + fmt.stop_bits, 2 * p.bank_depth, "sram") if give is not None else None
        m.submodules.pipe = pipe = _ReadPipe(fmt, p.out_reg, registered_word=ram is not None)
        wiring.connect(m, wiring.flipped(self.i), writer.i)
        wiring.connect(m, writer.banks, banks.w)
        wiring.connect(m, reader.banks, banks.r)
        m.d.comb += reader.progress.eq(writer.progress)
        if p.ref:
            wiring.connect(m, wiring.flipped(self.i_ref), reader.i_ref)
        wiring.connect(m, reader.o, pipe.i)
        wiring.connect(m, pipe.o, mg.i)
        wiring.connect(m, mg.o, wiring.flipped(self.o))
        self._configure(m, writer, reader)
        self._storage(m, ram, writer, reader, pipe)
        return m

    def _storage(self, m, ram, writer, reader, pipe):
        """The entries' storage, between the writer, the reader and the read pipe: both banks in one SRAM
        (bank ``k`` at ``k · bank_depth``; ``ram``: the platform's block RAMs with their output registers, else
        an Amaranth memory), or pooled, the pages of a tile pool through the pager."""
        p = self.params
        width = self.fmt("o").payload_width + self.fmt("o").stop_bits      # an entry: a tile and its stop bits
        if p.pooled:
            m.submodules.pager = pager = _Pager(width, p.pool_pages, p.page_entries)
            wiring.connect(m, writer.pages, pager.w)
            wiring.connect(m, pager.pool, wiring.flipped(self.pool))
            m.d.comb += [pager.r.bank.eq(reader.banks.bank), pager.r.first.eq(reader.first),
                         pager.r.en.eq(reader.read & reader.o.payload.entry), pager.r.free.eq(reader.banks.free),
                         pipe.word.eq(pager.r.data)]
            return
        if ram is None:
            m.submodules.sram = sram = memory.Memory(shape=unsigned(width), depth=2 * p.bank_depth, init=[])
            wr, rd = sram.write_port(), sram.read_port()
            m.d.comb += pipe.word.eq(rd.data)
        else:
            wr, rd = ram.write, ram.read
            m.d.comb += [ram.out_en.eq(pipe.load), pipe.word.eq(ram.data)]
        m.d.comb += [wr.addr.eq(writer.sram.addr), wr.data.eq(writer.sram.data), wr.en.eq(writer.sram.en),
                     self.overflow.eq(writer.overflow), rd.addr.eq(reader.addr), rd.en.eq(reader.read)]

    def _modes(self, m):
        """``(repeat_mode, eager_mode, affine)``: a repeat dimension, a rank-0 buffer stream (eager block ends)
        and affine reads, from the registers; with ``out_reg`` registers decoded from the writes, since each
        comparison of a register was at the head of the reader's logic."""
        R, Dr = self.regs, self.params.read_dims
        if not self.params.out_reg:
            return R["repeat"] != 0, R["in_rank"] == R["b"], (R["n_read"] != 0) if Dr else Const(0)

        def flag(names, fn):
            init = fn(*(R.regs[R.index[n]].init for n in names))
            return R.decoded(m, self.cfg, names, fn, int(init))
        return (flag(("repeat",), lambda v: v != 0), flag(("in_rank", "b"), operator.eq),
                flag(("n_read",), lambda v: v != 0) if Dr else Const(0))

    def _configure(self, m, writer, reader):
        """Drive the writer's and the reader's configuration inputs from the registers."""
        R = self.regs
        repeat_mode, eager_mode, affine = self._modes(m)
        m.d.comb += [writer.b.eq(R["b"]), writer.affine.eq(affine)]
        cfg = reader.config
        m.d.comb += [cfg.repeat_mode.eq(repeat_mode), cfg.eager_mode.eq(eager_mode), cfg.affine.eq(affine)]
        m.d.comb += [cfg[name].eq(R[name]) for name in _Reader.register_names(self.params)]
        if reader.static_walk:
            # the walk's step counters restart from count - 1 and whether the count is 1 or 2, decoded from
            # the counts' writes
            counts = [f"rcount{j}" for j in range(self.params.read_dims)]
            for name, less1, one, two in zip(counts, *R.count_flags(m, self.cfg, counts)):
                m.d.comb += [cfg[f"{name}_less1"].eq(less1), cfg[f"{name}_is1"].eq(one),
                             cfg[f"{name}_is2"].eq(two)]
            m.d.comb += reader.cfg_write.eq(self.cfg.valid)


# ----------------------------------------------------------------------------- the buffer's pieces

def _chunk_layout(depth: int, sb: int, transpose: bool) -> data.StructLayout:
    """A chunk as its bank holds it: its entries (``length``; 0 for the done token's), the level of the stop
    that closed it (``close``), whether that was the input's done token (``done``) and, for transposed reads,
    its ``rows`` and the tiles of its first row (``cols``)."""
    fields = {"length": range(depth + 1), "close": sb, "done": 1}
    if transpose:
        fields.update(rows=range(depth + 1), cols=range(depth + 1))
    return data.StructLayout(fields)


def _fill_signature(chunk: data.StructLayout) -> wiring.Signature:
    """The writer's side of the banks: the bank it writes and whether that holds a chunk not yet read
    (``bank``, ``full``); ``fill``: the chunk written there is closed (``chunk``) this cycle."""
    return wiring.Signature({"bank": In(1), "full": In(1), "fill": Out(1), "chunk": Out(chunk)})


def _drain_signature(chunk: data.StructLayout) -> wiring.Signature:
    """The reader's side of the banks: the bank it reads, whether that holds a closed chunk, and the chunk;
    ``free``: the reader is done with it this cycle."""
    return wiring.Signature({"bank": In(1), "full": In(1), "chunk": In(chunk), "free": Out(1)})


def _progress_layout(depth: int) -> data.StructLayout:
    """What the reader sees of the writer (an affine reading streams the chunk being written): the bank and
    entry index it writes, whether it writes an entry this cycle (``wrote``) and whether it closes its chunk
    (``fill``)."""
    return data.StructLayout({"bank": 1, "index": range(depth + 1), "wrote": 1, "fill": 1})


def _read_event_layout(sb: int) -> data.StructLayout:
    """A read event between the reader's stages: an SRAM entry (``entry``; its stop level and payload come
    with the read data, ``tail`` its trailing block end), else a stop of ``level`` (a block end with ``end``,
    sent at once with ``eager``) or the done token (``done``)."""
    return data.StructLayout({"entry": 1, "done": 1, "end": 1, "eager": 1, "level": sb, "tail": sb})


def _page_write_signature(width: int) -> wiring.Signature:
    """A pooled writer's side of its pager: the input's token is an ``entry`` (``data``), offered while its
    bank is free (``offer``), taken this cycle (``took``); ``first``: the chunk's first entry; ``close``:
    the token closes the chunk; ``room``: an entry may be taken (its page is granted or already there)."""
    return wiring.Signature({"bank": Out(1), "entry": Out(1), "offer": Out(1), "took": Out(1), "first": Out(1),
                             "close": Out(1), "data": Out(width), "room": In(1)})


class _Banks(wiring.Component):
    """The two banks' bookkeeping (double buffering): which bank the writer fills and which the reader reads,
    whether each holds a closed chunk, and each chunk's description (:func:`_chunk_layout`).

    Ports: ``w`` (:func:`_fill_signature`, flipped) for the writer, ``r`` (:func:`_drain_signature`, flipped)
    for the reader. A ``fill`` marks the writer's bank full and moves the writer to the other bank; a
    ``free`` empties the reader's bank and moves the reader to the other bank; both take effect in the next
    cycle. (A free would win over a fill of the same bank in the same cycle; neither side allows that: the
    writer fills only a bank that is not full, the reader frees only a full one.)

    Latency 1 (registers only); II 1. Combinational: none; every output is a register or selected from
    registers by a register.
    """

    def __init__(self, depth: int, sb: int, transpose: bool):
        self.layout = _chunk_layout(depth, sb, transpose)
        super().__init__({"w": In(_fill_signature(self.layout)), "r": In(_drain_signature(self.layout))})

    def elaborate(self, platform):
        m = Module()
        w, r = self.w, self.r
        wb, rb, full = Signal(), Signal(), Signal(2)
        chunks = [Signal(self.layout, name=f"chunk{k}") for k in range(2)]
        with m.If(w.fill):
            m.d.sync += wb.eq(~wb)
            for k in range(2):
                with m.If(wb == k):
                    m.d.sync += [chunks[k].eq(w.chunk), full[k].eq(1)]
        with m.If(r.free):
            m.d.sync += rb.eq(~rb)
            for k in range(2):
                with m.If(rb == k):
                    m.d.sync += full[k].eq(0)
        m.d.comb += [w.bank.eq(wb), w.full.eq(full.bit_select(wb, 1)), r.bank.eq(rb),
                     r.full.eq(full.bit_select(rb, 1)), r.chunk.eq(Mux(rb, chunks[1], chunks[0]))]
        return m


class _Writer(wiring.Component):
    """The write side: the input's tokens into the entries of the writer's bank, each chunk closed into it.

    Each token of ``i`` below the Bufferize rank ``b`` is an entry (in affine mode, ``affine``, only the
    data tiles: inner stops are dropped) written at the next index of the bank; a stop ``S_k``, ``k >= b``,
    or the done token closes the chunk (``banks.fill`` with its description), and the next chunk goes to the
    other bank. ``i`` waits while the bank holds a chunk not yet read. Storage: the private SRAM (``sram``:
    ``addr``, ``data``, ``en``; a chunk past ``depth`` entries keeps its first ``depth`` and sets the sticky
    ``overflow``) or, ``pooled``, pages taken through the pager (``pages``, :func:`_page_write_signature`).
    With ``transpose`` it counts each chunk's rows (its inner stops, plus an open last row) and the tiles of
    its first row. ``progress`` (:func:`_progress_layout`) tells the reader how far the chunk is written.

    Latency 0 (an entry is written in the cycle it is taken); II 1 while the bank is free. Combinational:
    ``i.ready`` from the bank's ``full`` (pooled: and the pager's ``room``, combinational in ``offer``); the
    writes and ``progress`` from ``i`` and ``i.ready``.
    """

    def __init__(self, fmt: TokenFormat, depth: int, pooled: bool, transpose: bool):
        self.depth, self.pooled, self.transpose = depth, pooled, transpose
        sb, width = fmt.stop_bits, fmt.payload_width + fmt.stop_bits
        members = {"i": In(stream.Signature(fmt.layout)), "b": In(sb), "affine": In(1),
                   "banks": Out(_fill_signature(_chunk_layout(depth, sb, transpose))),
                   "progress": Out(_progress_layout(depth))}
        if pooled:
            members["pages"] = Out(_page_write_signature(width))
        else:
            members.update({"sram": Out(wiring.Signature({"addr": Out(range(2 * depth)), "data": Out(width),
                                                          "en": Out(1)})), "overflow": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        tok, depth, banks = self.i.payload, self.depth, self.banks
        is_close = ~tok.done & (tok.stop >= self.b)
        is_entry = ~tok.done & (tok.stop < self.b) & (~self.affine | (tok.stop == 0))   # affine: data only
        took = self.i.valid & self.i.ready
        widx = Signal(range(depth + 1))
        with m.If(took):
            with m.If(is_entry):
                with m.If(widx < depth):
                    m.d.sync += widx.eq(widx + 1)
            with m.Elif(is_close | tok.done):
                m.d.sync += widx.eq(0)
        m.d.comb += [banks.fill.eq(took & (is_close | tok.done)), banks.chunk.length.eq(Mux(tok.done, 0, widx)),
                     banks.chunk.close.eq(tok.stop), banks.chunk.done.eq(tok.done)]
        m.d.comb += [self.progress.bank.eq(banks.bank), self.progress.index.eq(widx),
                     self.progress.wrote.eq(took & is_entry & (widx < depth)), self.progress.fill.eq(banks.fill)]
        word = Cat(tok.payload, tok.stop)        # what an entry holds: its tile and stop bits
        if self.pooled:
            pages = self.pages
            m.d.comb += [pages.bank.eq(banks.bank), pages.entry.eq(is_entry),
                         pages.offer.eq(self.i.valid & ~banks.full), pages.took.eq(took), pages.first.eq(widx == 0),
                         pages.close.eq(banks.fill), pages.data.eq(word), self.i.ready.eq(~banks.full & pages.room)]
        else:
            m.d.comb += [self.i.ready.eq(~banks.full), self.sram.addr.eq(Mux(banks.bank, depth, 0) + widx),
                         self.sram.data.eq(word), self.sram.en.eq(self.progress.wrote)]
            with m.If(took & is_entry & (widx >= depth)):
                m.d.sync += self.overflow.eq(1)     # an entry dropped: the output will be wrong, say so
        if self.transpose:
            self._count_shape(m, took)
        return m

    def _count_shape(self, m, took):
        """A chunk's shape for transposed reads: its rows (inner stops, plus the open last row) and the
        tiles of its first row."""
        tok, depth, chunk = self.i.payload, self.depth, self.banks.chunk
        wrows, wcols = Signal(range(depth + 1)), Signal(range(depth + 1))
        first_row, row_open = Signal(init=1), Signal()
        with m.If(took & ~tok.done & (tok.stop == 0)):
            m.d.sync += row_open.eq(1)
            with m.If(first_row):
                m.d.sync += wcols.eq(wcols + 1)
        with m.If(took & ~tok.done & (tok.stop != 0) & (tok.stop < self.b)):
            m.d.sync += [first_row.eq(0), row_open.eq(0), wrows.eq(wrows + 1)]
        with m.If(self.banks.fill):
            m.d.sync += [wrows.eq(0), wcols.eq(0), first_row.eq(1), row_open.eq(0)]
        m.d.comb += [chunk.rows.eq(wrows + row_open), chunk.cols.eq(wcols)]


class _Pager(wiring.Component):
    """A pooled buffer's pages: the write side takes a page of the pool for each ``page_entries`` entries
    of a chunk and chains them from the bank's head page; the read side walks a bank's chain; a ``free``
    returns all the pages of the bank read.

    Ports: ``pool`` (:func:`~step_hdl.units.pool.pool_signature`: the unit's own port), ``w``
    (:func:`_page_write_signature`, flipped) from the writer, ``r`` from the reader: ``bank``, ``first``
    (the reading is at its first entry), ``en`` (an entry is read this cycle), ``free`` (the reader is done
    with the bank), ``data`` (the entry read, the cycle after ``en``).

    The first entry of each page asks the pool for a page (``alloc``) and waits until it is granted
    (``w.room`` low meanwhile). Latency: a grant in the cycle of the request; read data 1 cycle after ``en``.
    II 1. Combinational: ``w.offer`` -> ``pool.alloc`` -> ``pool.grant`` -> ``w.room``; ``r.first`` and the
    bank -> ``pool.rpage`` (-> ``pool.next``).
    """

    def __init__(self, width: int, pages: int, page_entries: int):
        self.page_entries = page_entries
        super().__init__({"pool": Out(pool_signature(width, pages, page_entries)),
                          "w": In(_page_write_signature(width)),
                          "r": In(wiring.Signature({"bank": Out(1), "first": Out(1), "en": Out(1), "free": Out(1),
                                                    "data": In(width)}))})

    def elaborate(self, platform):
        m = Module()
        pool, w, r, S = self.pool, self.w, self.r, self.page_entries
        # write side: an entry that starts a page waits for the pool to grant one
        woff = Signal(range(S))
        wpage = Signal.like(pool.wpage)          # the page being filled
        head = [Signal.like(pool.wpage, name=f"head{k}") for k in range(2)]   # each bank's first page
        starts = w.entry & (woff == 0)
        m.d.comb += [pool.alloc.eq(w.offer & starts), pool.alloc_bank.eq(w.bank), pool.alloc_link.eq(~w.first),
                     w.room.eq(~starts | pool.grant)]
        page_now = Mux(starts, pool.page, wpage)
        m.d.comb += [pool.wen.eq(w.took & w.entry), pool.wpage.eq(page_now), pool.woff.eq(woff),
                     pool.wdata.eq(w.data)]
        with m.If(w.took & w.entry):
            m.d.sync += [wpage.eq(page_now), woff.eq(Mux(woff == S - 1, 0, woff + 1))]
            for k in range(2):
                with m.If(w.first & (w.bank == k)):
                    m.d.sync += head[k].eq(pool.page)
        with m.If(w.close):
            m.d.sync += woff.eq(0)
        # read side: a linear reading walks the bank's chain of pages from its head
        rpage, roff = Signal.like(pool.rpage), Signal(range(S))
        rp = Mux(r.first, Mux(r.bank, head[1], head[0]), rpage)
        ro = Mux(r.first, 0, roff)
        m.d.comb += [pool.ren.eq(r.en), pool.rpage.eq(rp), pool.roff.eq(ro), r.data.eq(pool.rdata)]
        with m.If(r.en):
            m.d.sync += [rpage.eq(Mux(ro == S - 1, pool.next, rp)), roff.eq(Mux(ro == S - 1, 0, ro + 1))]
        with m.If(r.free):
            m.d.comb += [pool.free.eq(1), pool.free_bank.eq(r.bank)]
        return m


class _Reader(wiring.Component):
    """The read side's first stage: the next read event (:func:`_read_event_layout`) and where the SRAM
    reads its entry.

    Per chunk of the reader's bank (``banks``, :func:`_drain_signature`), once it is closed: its entries in
    order (a linear reading, ``ridx`` up to the chunk's length) or at the affine walk's offsets (``affine``,
    :class:`~step_hdl.units.address.AffineWalk` over ``rcount*``/``rstride*``, or the chunk's own rows and
    columns when transposed), each reading closed by a block end; ``repeat`` readings (then the end of the
    repeat dimension) or, with a ref (``i_ref``), one per ref data token with the ref's inner stops between
    them; then the input's stop above the buffer, or the done token, and ``banks.free``. An affine reading of
    the bank being written (not transposed) starts before its chunk is closed, each entry once ``progress``
    says it is written. ``config`` holds the registers it reads (:meth:`register_names`) and the modes decoded from
    them; pipelined (``out_reg``, not transposed) also the walk's count flags, and ``cfg_write`` (a
    configuration write: the walk goes back to its start a cycle later). The SRAM reads ``addr`` (pooled: the
    pager reads from ``first``) when ``read`` is high: an event leaves for the next stage.

    Latency 0 (the event is formed from this cycle's state); II 1 per event. Combinational: ``o.valid`` and
    ``o.payload`` from registers, the bank's state and ``i_ref``; ``i_ref.ready``, ``read`` and ``banks.free``
    from ``o.ready``; ``addr`` from registers.
    """

    # read states: the entries of a reading, the end of the repeat dimension, the input's stop above the
    # buffer, waiting for a ref token
    ENTRIES, ENDB1, OSTOP, REF = 0, 1, 2, 3
    # what the repeat counter does in a cycle
    HOLD, INC, ZERO = 0, 1, 2

    @staticmethod
    def register_names(p: OnChipBufferParams) -> list[str]:
        """The configuration registers the reader reads."""
        Dr = p.read_dims
        return (["b", "c", "repeat"] + (["n_read"] + [f"rcount{j}" for j in range(Dr)]
                                        + [f"rstride{j}" for j in range(Dr)] if Dr else [])
                + (["merge"] if Dr >= 2 else []) + (["transpose"] if p.transpose else []))

    def __init__(self, params: OnChipBufferParams, regs: ConfigRegs, depth: int, ref_fmt: TokenFormat | None = None):
        p = self.params = params
        self.depth, sb, Dr = depth, stop_bits(p.max_rank), p.read_dims
        # pipelined, a walk whose read counts are its registers (not transposed: then the chunk's sizes)
        self.static_walk = bool(Dr) and p.out_reg and not p.transpose
        fields = {name: regs[name].shape() for name in self.register_names(p)}
        fields.update(repeat_mode=1, eager_mode=1, affine=1)
        for j in range(Dr if self.static_walk else 0):
            fields.update({f"rcount{j}_less1": regs[f"rcount{j}"].shape().width + 1, f"rcount{j}_is1": 1,
                           f"rcount{j}_is2": 1})
        members = {"config": In(data.StructLayout(fields)),
                   "banks": Out(_drain_signature(_chunk_layout(depth, sb, p.transpose))),
                   "progress": In(_progress_layout(depth)), "o": Out(stream.Signature(_read_event_layout(sb))),
                   "read": Out(1)}
        members.update({"first": Out(1)} if p.pooled else {"addr": Out(range(2 * depth))})
        if self.static_walk:
            members["cfg_write"] = In(1)
        if p.ref:
            members["i_ref"] = In(stream.Signature(ref_fmt.layout))
        super().__init__(members)
        cfg = self.config
        self._state = Signal(2, init=self.REF if p.ref else self.ENTRIES)
        self._ridx = Signal(range(depth + 1))
        self._advance = Signal()                # the event leaves this cycle
        self._rep_op = Signal(range(3))         # what the repeat counter does this cycle (HOLD, INC, ZERO)
        self._more = Signal()                   # another reading of the buffer follows (rep + 1 < repeat)
        self._early = Signal()                  # an affine reading of the chunk being written
        # the dims of one reading: b (linear) or n_read - merge (affine; a fused Flatten(0, merge) of each
        # reading sends no close up to merge, the rest shift down), and the dims added per buffer
        self._merge = cfg.merge if Dr >= 2 else Const(0)
        self._inner = Signal(sb)
        self._mid = cfg.c if p.ref else cfg.repeat_mode
        self._once = (cfg.c == 0) if p.ref else ~cfg.repeat_mode    # one reading per buffer: its end is the block's

    def elaborate(self, platform):
        m = Module()
        cfg, Dr = self.config, self.params.read_dims
        m.d.comb += [self._advance.eq(self.o.valid & self.o.ready), self.read.eq(self._advance),
                     self._inner.eq(Mux(cfg.affine, cfg.n_read - self._merge, cfg.b) if Dr else cfg.b)]
        self._count_repeats(m)
        walk = self._walk(m) if Dr else None
        if self.params.pooled:
            m.d.comb += self.first.eq(self._ridx == 0)
        else:
            offset = Mux(cfg.affine, walk[0].acc[0], self._ridx) if Dr else self._ridx
            m.d.comb += self.addr.eq(Mux(self.banks.bank, self.depth, 0) + offset)
        self._events(m, walk)
        if self.static_walk:
            # the walk's step counters count down from count - 1: a cycle after a configuration write (its
            # decoded registers are then written) the walk goes back to its start, before any entry is there
            # to read
            cfg_seen = Signal()
            m.d.sync += cfg_seen.eq(self.cfg_write)
            with m.If(cfg_seen):
                walk[0].reset(m)
                m.d.sync += walk[0].phase.eq(0)
        return m

    def _count_repeats(self, m):
        """The repeat counter ``rep``. What it does this cycle (hold, count, restart: ``_rep_op``) is set by the
        events; ``_more`` (``rep + 1 < repeat``) is registered beside it, each outcome compared from registers
        and the events' logic selecting one."""
        rep, rep_n = Signal(self.params.repeat_bits), self.config.repeat
        INC, ZERO, op = self.INC, self.ZERO, self._rep_op
        m.d.sync += [rep.eq(Mux(op == INC, rep + 1, Mux(op == ZERO, 0, rep))),
                     self._more.eq(Mux(op == INC, rep + 2 < rep_n, Mux(op == ZERO, 1 < rep_n, rep + 1 < rep_n)))]

    def _walk(self, m):
        """The affine read generator (one running offset per read_shape dim, as in LinearOffChipLoad) and
        whether the entry it is at is written; sets ``_early``. Returns ``(walk, at_written)``."""
        cfg, p, Dr, bank = self.config, self.params, self.params.read_dims, self.banks
        counts = [cfg[f"rcount{j}"] for j in range(Dr)]
        strides = [cfg[f"rstride{j}"] for j in range(Dr)]
        if p.transpose:     # the chunk's rows and columns: each column's tiles top to bottom
            tr, rows, cols = cfg.transpose, bank.chunk.rows, bank.chunk.cols
            counts[:2] = [Mux(tr, rows, counts[0]), Mux(tr, cols, counts[1])]
            strides[:2] = [Mux(tr, cols, strides[0]), Mux(tr, 1, strides[1])]
        # pipelined, the walk's last-step flags are registers, from count - 1 and whether it is 1 or 2
        flags = None
        if self.static_walk:
            flags = tuple([cfg[f"rcount{j}_{f}"] for j in range(Dr)] for f in ("less1", "is1", "is2"))
        g = AffineWalk(m, counts, strides, cfg.n_read, cfg.n_read, 16, signed(24), "g",
                       merge=self._merge if Dr >= 2 else None, static_counts=self.static_walk,
                       static_strides=self.static_walk, count_flags=flags)
        # whether the entry the walk is at is written yet (registered: from the write index and what the
        # writer does with it this cycle)
        w = self.progress
        at_written = g.below(w.index, w.wrote, w.fill)
        # streaming: an affine reading of the bank being written goes ahead of the chunk's close, each entry
        # once it is written; what needs the whole chunk (its close, length or done; a reading's last entry,
        # after which the block may end) waits for the close
        streamable = cfg.affine & ~cfg.transpose if p.transpose else cfg.affine
        # whether the bank being written has an entry yet: a register beside the write index, so the
        # reader's handshake does not start at its comparison
        written_any = Signal()
        with m.If(w.wrote):
            m.d.sync += written_any.eq(1)
        with m.Elif(w.fill):
            m.d.sync += written_any.eq(0)
        m.d.comb += self._early.eq(~bank.full & (bank.bank == w.bank) & written_any & streamable)
        return g, at_written

    def _emit(self, m, **fields):
        """This cycle's event: ``o.valid`` and the given fields (the others 0)."""
        m.d.comb += [self.o.valid.eq(1)] + [self.o.payload[k].eq(v) for k, v in fields.items()]

    def _events(self, m, walk):
        """The event of the reader's state, and what taking it (``_advance``) changes."""
        bank, state, adv = self.banks, self._state, self._advance
        with m.If(bank.full | self._early):
            with m.If(bank.full & bank.chunk.done):
                self._done(m)
            if self.params.ref:
                with m.Elif(state == self.REF):
                    self._ref_token(m)
            if walk is not None:
                with m.Elif((state == self.ENTRIES) & self.config.affine):
                    self._walk_step(m, *walk)
            with m.Elif(state == self.ENTRIES):
                self._linear_step(m)
            with m.Elif(state == self.ENDB1):   # end of the repeat dimension
                self._emit(m, end=1, level=self._inner + 1, eager=self.config.eager_mode)
                with m.If(adv):
                    self._after_block(m)
            with m.Else():                     # the input's stop above the buffer
                cfg = self.config
                self._emit(m, level=bank.chunk.close - cfg.b + self._inner + self._mid)
                with m.If(adv):
                    self._free(m)

    def _done(self, m):
        """The chunk is the input's done token: the done token (with a ref, the ref ends too: skip its
        trailing stops, take its done with ours)."""
        if self.params.ref:
            ref, rtok = self.i_ref, self.i_ref.payload
            with m.If(ref.valid & ~rtok.done):
                m.d.comb += ref.ready.eq(1)
            with m.If(ref.valid & rtok.done):
                self._emit(m, done=1)
                m.d.comb += ref.ready.eq(self._advance)
        else:
            self._emit(m, done=1)
        with m.If(self._advance):
            self._free(m)

    def _ref_token(self, m):
        """Waiting for a ref token: a data token starts a reading, an inner stop of the ref chunk leaves as
        ``S_(k + n)``, its end as the block end ``S_(n + c)`` (ref stops of outer levels, ``c = 0``, are
        skipped)."""
        ref, rtok, c, adv = self.i_ref, self.i_ref.payload, self.config.c, self._advance
        with m.If(ref.valid & ~rtok.done):
            with m.If(rtok.stop == 0):              # one reading of the buffer
                m.d.comb += ref.ready.eq(1)
                m.d.sync += [self._state.eq(self.ENTRIES), self._ridx.eq(0)]
            with m.Elif(c == 0):                    # c = 0: ref stops belong to outer levels
                m.d.comb += ref.ready.eq(1)
            with m.Elif(rtok.stop < c):             # inner stop of the ref chunk
                self._emit(m, level=rtok.stop + self._inner)
                m.d.comb += ref.ready.eq(adv)
            with m.Elif(self.banks.full):           # the ref chunk ends: block end S_(b + c)
                self._emit(m, end=1, level=self._inner + c, eager=self.config.eager_mode)
                m.d.comb += ref.ready.eq(adv)
                with m.If(adv):
                    self._after_block(m)

    def _walk_step(self, m, g, at_written):
        """An affine reading: the walk's entry, or in its phase 1 the close after it, once written."""
        cfg, merge = self.config, self._merge
        eager_once = cfg.eager_mode & self._once

        def end_of_reading():
            g.reset(m)
            m.d.sync += g.phase.eq(0)
            self._reading_done(m)
        # the reading's last entry carries its final close when that close may merge with an outer stop (not
        # eager): the close then costs no cycle of its own
        fold = ~g.has_zero & g.close_needed & ~eager_once
        written = Mux(g.phase == 0, ~g.has_zero & ~g.complete & at_written, ~g.pend_final)
        with m.If(self.banks.full | written):
            with m.If(g.phase == 0):
                with m.If(g.has_zero):
                    self._emit(m, end=1, level=g.lo, eager=eager_once & g.complete & ~g.close_needed)
                with m.Else():
                    self._emit(m, entry=1)
                    with m.If(g.complete & fold):
                        m.d.comb += self.o.payload.tail.eq(g.close - merge)
            with m.Else():
                # a close inside the reading is followed by the next entry: at once
                self._emit(m, end=1, level=g.pend - merge, eager=~g.pend_final | eager_once)
            with m.If(self._advance):
                g.advance(m, end_of_reading, fold)

    def _linear_step(self, m):
        """A linear reading: the bank's next entry, or the reading's end (a block end ``S_b``)."""
        cfg = self.config
        # ridx never passes the length (it counts up only below it, and a full bank's length holds while it is
        # read): an equality, no carry chain in front of the reader's handshake
        with m.If(self._ridx != self.banks.chunk.length):
            self._emit(m, entry=1)
            with m.If(self._advance):
                m.d.sync += self._ridx.eq(self._ridx + 1)
        with m.Else():
            # eager also between repeated readings: the next reading follows, not an outer stop
            self._emit(m, end=1, level=cfg.b, eager=(cfg.eager_mode & self._once) | (cfg.repeat_mode & self._more))
            with m.If(self._advance):
                self._reading_done(m)

    def _reading_done(self, m):
        """One reading of the buffer is over: read again, go back to the ref, or finish."""
        cfg = self.config
        if self.params.ref:
            with m.If(cfg.c != 0):
                m.d.sync += [self._state.eq(self.REF), self._ridx.eq(0)]
            with m.Else():
                self._after_block(m)
        else:
            with m.If(cfg.repeat_mode & self._more):
                m.d.sync += self._ridx.eq(0)
                m.d.comb += self._rep_op.eq(self.INC)
            with m.Elif(cfg.repeat_mode):
                m.d.sync += self._state.eq(self.ENDB1)
            with m.Else():
                self._after_block(m)

    def _after_block(self, m):
        """The buffer's readings are over: its input stop above the buffer next, or the next bank."""
        with m.If(self.banks.chunk.close > self.config.b):
            m.d.sync += self._state.eq(self.OSTOP)
        with m.Else():
            self._free(m)

    def _free(self, m):
        """Done with the bank: the banks move on (``banks.free``), the reader starts over."""
        m.d.sync += [self._ridx.eq(0), self._state.eq(self.REF if self.params.ref else self.ENTRIES)]
        m.d.comb += [self._rep_op.eq(self.ZERO), self.banks.free.eq(1)]


class _ReadPipe(wiring.Component):
    """The read side's registers after the reader: the read event (``i``, :func:`_read_event_layout`)
    joined with the SRAM's read data (``word``: an entry's payload and stop bits) into a
    :class:`~step_hdl.units.merger.StopMerger` event (``o``).

    Stage 2 holds the event while the SRAM reads (its data arrives with it). With ``out_reg`` a third stage
    registers the SRAM's data (the block RAM's output register: ``registered_word``, ``load`` is its enable,
    else a register here), so the RAM's access time leaves the loop through the merger's ready back to the
    RAM's read enable; and a skid register sits between it and the merger, whose ready decodes the entry's
    stop bits: stage 3 moves while the skid is empty (a register), so the ready chain from the output no
    longer runs through the SRAM's data and the stages into the reader's advance.

    Latency 1 (2 with ``out_reg``); II 1. Combinational: ``o.valid`` from registers; ``o.payload`` from
    registers and ``word``; ``i.ready`` (and ``load``) from ``o.ready`` (with ``out_reg`` from registers).
    """

    def __init__(self, fmt: TokenFormat, out_reg: bool, registered_word: bool = False):
        self.fmt, self.out_reg, self.registered_word = fmt, out_reg, registered_word
        self.layout = _read_event_layout(fmt.stop_bits)
        members = {"i": In(stream.Signature(self.layout)), "word": In(fmt.payload_width + fmt.stop_bits),
                   "o": Out(stream.Signature(event_layout(fmt)))}
        if registered_word:
            members["load"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s2_valid, s2 = Signal(), Signal(self.layout, name="s2")
        s2_out = Signal()                        # stage 2 hands its event on this cycle (or is empty)
        m.d.comb += self.i.ready.eq(~s2_valid | s2_out)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [s2_valid.eq(1), s2.eq(self.i.payload)]
        with m.Elif(s2_out):
            m.d.sync += s2_valid.eq(0)
        if self.out_reg:
            valid, ev, word = self._skid(m, s2_valid, s2, s2_out)
        else:
            m.d.comb += s2_out.eq(self.o.ready)
            valid, ev, word = s2_valid, s2, self.word
        pw = self.fmt.payload_width
        word_payload, word_stop = word[:pw], word[pw:]
        out = self.o.payload
        m.d.comb += [self.o.valid.eq(valid), out.done.eq(ev.done), out.end.eq(ev.end), out.eager.eq(ev.eager)]
        with m.If(ev.entry):
            m.d.comb += [out.stop.eq(word_stop), out.tail.eq(ev.tail)]
            with m.If(word_stop == 0):
                m.d.comb += out.payload.eq(word_payload)
        with m.Else():
            m.d.comb += out.stop.eq(ev.level)
        return m

    def _skid(self, m, s2_valid, s2, s2_out):
        """Stage 3 and the skid register (``out_reg``); drives ``s2_out``, returns the valid flag, event and
        SRAM data the merger sees."""
        s3_valid, s3 = Signal(name="s3_valid"), Signal(self.layout, name="s3")
        k_valid, k = Signal(name="k_valid"), Signal(self.layout, name="k")
        m.d.comb += s2_out.eq(~s3_valid | ~k_valid)
        with m.If(s2_out):
            m.d.sync += [s3_valid.eq(s2_valid), s3.eq(s2)]
        if self.registered_word:
            m.d.comb += self.load.eq(s2_out)       # the blocks' output registers load as s3_word would
            s3_word = self.word
        else:
            s3_word = Signal.like(self.word, name="s3_word")
            with m.If(s2_out):
                m.d.sync += s3_word.eq(self.word)
        k_word = Signal.like(s3_word, name="k_word")
        # (an empty skid copies stage 3 every cycle, so its registers' enable is its own empty flag, and only
        # whether it keeps the copy depends on the merger)
        with m.If(~k_valid):
            m.d.sync += [k.eq(s3), k_word.eq(s3_word), k_valid.eq(s3_valid & ~self.o.ready)]
        with m.Elif(self.o.ready):
            m.d.sync += k_valid.eq(0)
        ev = Signal(self.layout, name="ev")
        m.d.comb += ev.eq(Mux(k_valid, k, s3))
        return Mux(k_valid, k_valid, s3_valid), ev, Mux(k_valid, k_word, s3_word)
