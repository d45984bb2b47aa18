"""The on-chip buffer: Bufferize + Streamify as one unit (:class:`OnChipBuffer`), two banks of SRAM.

Its reader re-reads a buffered block in order, repeated, by an affine pattern
(:class:`~step_hdl.units.address.AffineWalk`) or once per token of a ``ref``
stream; the class docstring has the details.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import Out

from .address import AffineWalk
from .base import StepUnit
from .config import Reg
from .layout import TokenFormat, stop_bits, tile_format
from .merger import StopMerger
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
        p, R = self.params, self.regs
        fmt = self.fmt("o")
        sb, pw = fmt.stop_bits, fmt.payload_width
        depth = p.bank_depth
        b, rep_n, c = R["b"], R["repeat"], R["c"]
        Dr = p.read_dims
        if p.out_reg:
            # pipelined: the modes are registers decoded from the writes (each comparison of a register was at
            # the head of the reader's logic)
            def flag(names, fn):
                init = fn(*(R.regs[R.index[n]].init for n in names))
                return R.decoded(m, self.cfg, names, fn, int(init))
            repeat_mode = flag(("repeat",), lambda v: v != 0)
            eager_mode = flag(("in_rank", "b"), operator.eq)
            affine = flag(("n_read",), lambda v: v != 0) if Dr else Const(0)
        else:
            repeat_mode = rep_n != 0
            eager_mode = R["in_rank"] == b
            affine = (R["n_read"] != 0) if Dr else Const(0)
        if p.ref:
            mid = Signal(sb)
            m.d.comb += mid.eq(c)
            once = c == 0                       # one reading per buffer: its end is the block's end
        else:
            mid = repeat_mode
            once = ~repeat_mode
        # a fused Flatten(0, merge) of each reading: its closes up to ``merge`` are not sent, the rest shift down
        merge = R["merge"] if Dr >= 2 else Const(0)
        inner = Signal(sb)                      # dims of one reading: b (linear) or n_read - merge (affine)
        m.d.comb += inner.eq(Mux(affine, R["n_read"] - merge, b) if Dr else b)

        pooled = p.pooled
        # with out_reg, the platform's block RAMs with their own output registers (an FPGA's), if it has them
        give = getattr(platform, "registered_ram", None) if p.out_reg and not pooled else None
        ram = give(m, pw + sb, 2 * depth, "sram") if give is not None else None
        if ram is not None:
            wr, rd = ram.write, ram.read
        elif not pooled:
            m.submodules.sram = sram = memory.Memory(shape=unsigned(pw + sb), depth=2 * depth, init=[])
            wr = sram.write_port()
            rd = sram.read_port()
        m.submodules.merger = mg = StopMerger(fmt)
        wiring.connect(m, mg.o, wiring.flipped(self.o))

        full = Signal(2)
        length = [Signal(range(depth + 1), name=f"len{k}") for k in range(2)]
        close = [Signal(sb, name=f"close{k}") for k in range(2)]
        isdone = Signal(2)

        # ---- writer
        wb = Signal()
        widx = Signal(range(depth + 1))
        tok = self.i.payload
        is_close = ~tok.done & (tok.stop >= b)
        is_entry = ~tok.done & (tok.stop < b) & (~affine | (tok.stop == 0))   # affine: data only
        took = self.i.valid & self.i.ready
        if pooled:
            # an entry that starts a page waits for the pool to grant one
            pool, S = self.pool, p.page_entries
            woff = Signal(range(S))
            wpage = Signal.like(pool.wpage)          # the page being filled
            head = [Signal.like(pool.wpage, name=f"head{k}") for k in range(2)]   # each bank's first page
            starts = is_entry & (woff == 0)
            m.d.comb += [pool.alloc.eq(self.i.valid & ~full.bit_select(wb, 1) & starts), pool.alloc_bank.eq(wb),
                         pool.alloc_link.eq(widx != 0),
                         self.i.ready.eq(~full.bit_select(wb, 1) & (~starts | pool.grant))]
            page_now = Mux(starts, pool.page, wpage)
            m.d.comb += [pool.wen.eq(took & is_entry), pool.wpage.eq(page_now), pool.woff.eq(woff),
                         pool.wdata.eq(Cat(tok.payload, tok.stop))]
            with m.If(took & is_entry):
                m.d.sync += [wpage.eq(page_now), woff.eq(Mux(woff == S - 1, 0, woff + 1))]
                for k in range(2):
                    with m.If((widx == 0) & (wb == k)):
                        m.d.sync += head[k].eq(pool.page)
            with m.If(took & (is_close | tok.done)):
                m.d.sync += woff.eq(0)
        else:
            m.d.comb += self.i.ready.eq(~full.bit_select(wb, 1))
            m.d.comb += [wr.addr.eq(Mux(wb, depth, 0) + widx), wr.data.eq(Cat(tok.payload, tok.stop)),
                         wr.en.eq(took & is_entry & (widx < depth))]
            with m.If(took & is_entry & (widx >= depth)):
                m.d.sync += self.overflow.eq(1)     # an entry dropped: the output will be wrong, say so
        if p.transpose:
            # a chunk's shape for transposed reads: rows (inner stops + the open last row), first row's tiles
            t_rows = [Signal(range(depth + 1), name=f"rows{k}") for k in range(2)]
            t_cols = [Signal(range(depth + 1), name=f"cols{k}") for k in range(2)]
            wrows, wcols = Signal(range(depth + 1)), Signal(range(depth + 1))
            first_row, row_open = Signal(init=1), Signal()
            with m.If(took & ~tok.done & (tok.stop == 0)):
                m.d.sync += row_open.eq(1)
                with m.If(first_row):
                    m.d.sync += wcols.eq(wcols + 1)
            with m.If(took & ~tok.done & (tok.stop != 0) & (tok.stop < b)):
                m.d.sync += [first_row.eq(0), row_open.eq(0), wrows.eq(wrows + 1)]
            with m.If(took & (is_close | tok.done)):
                m.d.sync += [wrows.eq(0), wcols.eq(0), first_row.eq(1), row_open.eq(0)]
                for k in range(2):
                    with m.If(wb == k):
                        m.d.sync += [t_rows[k].eq(wrows + row_open), t_cols[k].eq(wcols)]
        with m.If(took):
            with m.If(is_entry):
                with m.If(widx < depth):
                    m.d.sync += widx.eq(widx + 1)
            with m.Elif(is_close | tok.done):    # (an inner stop in affine mode is dropped)
                m.d.sync += [widx.eq(0), wb.eq(~wb)]
                for k in range(2):
                    with m.If(wb == k):
                        m.d.sync += [length[k].eq(Mux(tok.done, 0, widx)), close[k].eq(tok.stop),
                                     isdone[k].eq(tok.done), full[k].eq(1)]

        # ---- reader, stage 1: the next event
        rb = Signal()
        ridx = Signal(range(depth + 1))
        rep = Signal(p.repeat_bits)
        # what rep does this cycle (hold, count, restart) and, registered beside it, whether another reading
        # follows (rep + 1 < repeat): each outcome compared from registers, the reader's logic selects one
        HOLD, INC, ZERO = 0, 1, 2
        rep_op = Signal(range(3))
        more = Signal()
        m.d.sync += [rep.eq(Mux(rep_op == INC, rep + 1, Mux(rep_op == ZERO, 0, rep))),
                     more.eq(Mux(rep_op == INC, rep + 2 < rep_n, Mux(rep_op == ZERO, 1 < rep_n, rep + 1 < rep_n)))]
        ENTRIES, ENDB1, OSTOP, REF = 0, 1, 2, 3
        START = REF if p.ref else ENTRIES
        rstate = Signal(2, init=START)
        rlen, rclose = Signal(range(depth + 1)), Signal(sb)
        m.d.comb += [rlen.eq(Mux(rb, length[1], length[0])), rclose.eq(Mux(rb, close[1], close[0]))]
        rfull, rdone = full.bit_select(rb, 1), isdone.bit_select(rb, 1)

        s1_valid, s1_entry, s1_stop, s1_done, s1_end, s1_eager = (Signal(name=f"s1_{n}") for n in
                                                                  ("valid", "entry", "stop", "done", "end", "eager"))
        s1_level = Signal(sb)
        s2_valid, s2_entry, s2_done, s2_end, s2_eager = (Signal(name=f"s2_{n}") for n in
                                                         ("valid", "entry", "done", "end", "eager"))
        s2_level = Signal(sb)
        s1_tail, s2_tail = Signal(sb), Signal(sb)   # an entry's trailing block end (affine reads' final close)
        advance = Signal()
        # with out_reg, a third stage registers the SRAM's data (the block RAM's output register): the
        # RAM's access time then leaves the loop through the merger's ready back to the RAM's read enable
        s2_out = Signal()                        # stage 2 hands its entry on this cycle (or is empty)
        m.d.comb += advance.eq(s1_valid & (~s2_valid | s2_out))
        if pooled:
            # a linear reading walks the bank's chain of pages from its head
            rpage, roff = Signal.like(pool.rpage), Signal(range(S))
            rp = Mux(ridx == 0, Mux(rb, head[1], head[0]), rpage)
            ro = Mux(ridx == 0, 0, roff)
            m.d.comb += [pool.ren.eq(advance & s1_entry), pool.rpage.eq(rp), pool.roff.eq(ro)]
            with m.If(advance & s1_entry):
                m.d.sync += [rpage.eq(Mux(ro == S - 1, pool.next, rp)), roff.eq(Mux(ro == S - 1, 0, ro + 1))]
        else:
            m.d.comb += rd.en.eq(advance)

        # ---- affine read generator (one running offset per read_shape dim, as in LinearOffChipLoad)
        if Dr:
            counts = [R[f"rcount{j}"] for j in range(Dr)]
            strides = [R[f"rstride{j}"] for j in range(Dr)]
            if p.transpose:
                tr = R["transpose"]
                rows_r = Mux(rb, t_rows[1], t_rows[0])
                cols_r = Mux(rb, t_cols[1], t_cols[0])
                counts[:2] = [Mux(tr, rows_r, counts[0]), Mux(tr, cols_r, counts[1])]
                strides[:2] = [Mux(tr, cols_r, strides[0]), Mux(tr, 1, strides[1])]
            # pipelined, a buffer whose read counts are its registers (not transposed: then the chunk's sizes)
            # registers its walk's last-step flags, from count - 1 and whether it is 1 or 2, decoded from the
            # writes
            static = p.out_reg and not p.transpose
            g = AffineWalk(m, counts, strides, R["n_read"], R["n_read"], 16, signed(24), "g",
                           merge=merge if Dr >= 2 else None, static_counts=static, static_strides=static,
                           count_flags=self.regs.count_flags(m, self.cfg, [f"rcount{j}" for j in range(Dr)])
                           if static else None)
            # whether the entry the walk is at is written yet (registered: from the write index and what the
            # writer does with it this cycle)
            at_written = g.below(widx, took & is_entry & (widx < depth), took & (is_close | tok.done))
            m.d.comb += rd.addr.eq(Mux(rb, depth, 0) + Mux(affine, g.acc[0], ridx))
        elif not pooled:
            m.d.comb += rd.addr.eq(Mux(rb, depth, 0) + ridx)

        def free_bank():
            m.d.sync += [ridx.eq(0), rstate.eq(START), rb.eq(~rb)]
            m.d.comb += rep_op.eq(ZERO)
            if pooled:
                m.d.comb += [pool.free.eq(1), pool.free_bank.eq(rb)]
            for k in range(2):
                with m.If(rb == k):
                    m.d.sync += full[k].eq(0)

        def after_block():
            with m.If(rclose > b):
                m.d.sync += rstate.eq(OSTOP)
            with m.Else():
                free_bank()

        def reading_done():
            """One reading of the buffer is over: read again, go back to the ref, or finish."""
            if p.ref:
                with m.If(c != 0):
                    m.d.sync += [rstate.eq(REF), ridx.eq(0)]
                with m.Else():
                    after_block()
            else:
                with m.If(repeat_mode & more):
                    m.d.sync += ridx.eq(0)
                    m.d.comb += rep_op.eq(INC)
                with m.Elif(repeat_mode):
                    m.d.sync += rstate.eq(ENDB1)
                with m.Else():
                    after_block()

        if p.ref:
            ref = self.i_ref
            rtok = ref.payload
        # streaming: an affine reading of the bank being written goes ahead of the chunk's close, each entry
        # once it is written; what needs the whole chunk (its close, length or done; a reading's last entry,
        # after which the block may end) waits for the close
        early = Signal()
        if Dr:
            streamable = affine & ~R["transpose"] if p.transpose else affine
            # whether the bank being written has an entry yet: a register beside widx, so the reader's
            # handshake does not start at widx's comparison
            written_any = Signal()
            with m.If(took & is_entry & (widx < depth)):
                m.d.sync += written_any.eq(1)
            with m.Elif(took & (is_close | tok.done)):
                m.d.sync += written_any.eq(0)
            m.d.comb += early.eq(~rfull & (rb == wb) & written_any & streamable)
        with m.If(rfull | early):
            with m.If(rfull & rdone):
                if p.ref:   # the ref ends too: skip its trailing stops, take its done with ours
                    with m.If(ref.valid & ~rtok.done):
                        m.d.comb += ref.ready.eq(1)
                    with m.If(ref.valid & rtok.done):
                        m.d.comb += [s1_valid.eq(1), s1_done.eq(1), ref.ready.eq(advance)]
                else:
                    m.d.comb += [s1_valid.eq(1), s1_done.eq(1)]
                with m.If(advance):
                    free_bank()
            if p.ref:
                with m.Elif(rstate == REF):
                    with m.If(ref.valid & ~rtok.done):
                        with m.If(rtok.stop == 0):              # one reading of the buffer
                            m.d.comb += ref.ready.eq(1)
                            m.d.sync += [rstate.eq(ENTRIES), ridx.eq(0)]
                        with m.Elif(c == 0):                    # c = 0: ref stops belong to outer levels
                            m.d.comb += ref.ready.eq(1)
                        with m.Elif(rtok.stop < c):             # inner stop of the ref chunk
                            m.d.comb += [s1_valid.eq(1), s1_level.eq(rtok.stop + inner), ref.ready.eq(advance)]
                        with m.Elif(rfull):                     # the ref chunk ends: block end S_(b + c)
                            m.d.comb += [s1_valid.eq(1), s1_end.eq(1), s1_level.eq(inner + c), s1_eager.eq(eager_mode),
                                         ref.ready.eq(advance)]
                            with m.If(advance):
                                after_block()
            if Dr:
                with m.Elif((rstate == ENTRIES) & affine):
                    def end_of_reading():
                        g.reset(m)
                        m.d.sync += g.phase.eq(0)
                        reading_done()
                    # the reading's last entry carries its final close when that close may merge with an
                    # outer stop (not eager): the close then costs no cycle of its own
                    fold = ~g.has_zero & g.close_needed & ~(eager_mode & once)
                    written = Mux(g.phase == 0, ~g.has_zero & ~g.complete & at_written, ~g.pend_final)
                    with m.If(rfull | written):
                        with m.If(g.phase == 0):
                            with m.If(g.has_zero):
                                m.d.comb += [s1_valid.eq(1), s1_end.eq(1), s1_level.eq(g.lo),
                                             s1_eager.eq(eager_mode & once & g.complete & ~g.close_needed)]
                            with m.Else():
                                m.d.comb += [s1_valid.eq(1), s1_entry.eq(1)]
                                with m.If(g.complete & fold):
                                    m.d.comb += s1_tail.eq(g.close - merge)
                        with m.Else():
                            m.d.comb += [s1_valid.eq(1), s1_end.eq(1), s1_level.eq(g.pend - merge),
                                         # a close inside the reading is followed by the next entry: at once
                                         s1_eager.eq(~g.pend_final | (eager_mode & once))]
                        with m.If(advance):
                            g.advance(m, end_of_reading, fold)
            with m.Elif(rstate == ENTRIES):
                # ridx never passes rlen (it counts up only below it, and a full bank's length holds while it
                # is read): an equality, no carry chain in front of the reader's handshake
                with m.If(ridx != rlen):
                    m.d.comb += [s1_valid.eq(1), s1_entry.eq(1)]
                    with m.If(advance):
                        m.d.sync += ridx.eq(ridx + 1)
                with m.Else():   # end of one reading of the buffer
                    # eager also between repeated readings: the next reading follows, not an outer stop
                    m.d.comb += [s1_valid.eq(1), s1_end.eq(1), s1_level.eq(b),
                                 s1_eager.eq((eager_mode & once) | (repeat_mode & more))]
                    with m.If(advance):
                        reading_done()
            with m.Elif(rstate == ENDB1):   # end of the repeat dimension
                m.d.comb += [s1_valid.eq(1), s1_end.eq(1), s1_level.eq(inner + 1), s1_eager.eq(eager_mode)]
                with m.If(advance):
                    after_block()
            with m.Else():                 # the input's stop above the buffer
                m.d.comb += [s1_valid.eq(1), s1_level.eq(rclose - b + inner + mid)]
                with m.If(advance):
                    free_bank()

        if Dr and static:
            # the walk's step counters count down from count - 1: a cycle after a configuration write (its
            # decoded registers are then written) the walk goes back to its start, before any entry is there
            # to read
            cfg_seen = Signal()
            m.d.sync += cfg_seen.eq(self.cfg.valid)
            with m.If(cfg_seen):
                g.reset(m)
                m.d.sync += g.phase.eq(0)

        # ---- reader, stage 2: output register (SRAM data arrives here)
        with m.If(advance):
            m.d.sync += [s2_valid.eq(1), s2_entry.eq(s1_entry), s2_done.eq(s1_done), s2_end.eq(s1_end),
                         s2_eager.eq(s1_eager), s2_level.eq(s1_level), s2_tail.eq(s1_tail)]
        with m.Elif(s2_out):
            m.d.sync += s2_valid.eq(0)
        # the SRAM's read data (on the platform's blocks only in their output registers, below)
        word = pool.rdata if pooled else rd.data if ram is None else None
        if p.out_reg:
            s3 = [Signal.like(v, name=f"s3_{v.name[3:]}")
                  for v in (s2_valid, s2_entry, s2_done, s2_end, s2_eager, s2_level, s2_tail)]
            s3_valid = s3[0]
            # a skid register between the SRAM's data and the merger, whose ready decodes the entry's stop bits:
            # stage 3 moves while the skid is empty (a register), so the ready chain from the output no longer
            # runs through the SRAM's data and the stages into the walk's advance
            skid = [Signal.like(v, name=f"k_{v.name[3:]}") for v in s3]
            m.d.comb += s2_out.eq(~s3_valid | ~skid[0])
            with m.If(s2_out):
                m.d.sync += [d.eq(v) for d, v in zip(s3, (s2_valid, s2_entry, s2_done, s2_end, s2_eager,
                                                          s2_level, s2_tail))]
            if ram is not None:
                m.d.comb += ram.out_en.eq(s2_out)       # the blocks' output registers load as s3_word would
                s3_word = ram.data
            else:
                s3_word = Signal.like(word, name="s3_word")
                with m.If(s2_out):
                    m.d.sync += s3_word.eq(word)
            skid_word = Signal.like(s3_word, name="k_word")
            # (an empty skid copies stage 3 every cycle, so its registers' enable is its own empty flag, and only
            # whether it keeps the copy depends on the merger)
            with m.If(~skid[0]):
                m.d.sync += [d.eq(v) for d, v in zip(skid[1:], s3[1:])] + [skid_word.eq(s3_word),
                                                                           skid[0].eq(s3_valid & ~mg.i.ready)]
            with m.Elif(mg.i.ready):
                m.d.sync += skid[0].eq(0)
            s2_valid, s2_entry, s2_done, s2_end, s2_eager, s2_level, s2_tail = (
                Mux(skid[0], k, v) for k, v in zip(skid, s3))
            word = Mux(skid[0], skid_word, s3_word)
        else:
            m.d.comb += s2_out.eq(mg.i.ready)
        word_payload, word_stop = word[:pw], word[pw:]
        ev = mg.i.payload
        m.d.comb += [mg.i.valid.eq(s2_valid), ev.done.eq(s2_done), ev.end.eq(s2_end), ev.eager.eq(s2_eager)]
        with m.If(s2_entry):
            m.d.comb += [ev.stop.eq(word_stop), ev.tail.eq(s2_tail)]
            with m.If(word_stop == 0):
                m.d.comb += ev.payload.eq(word_payload)
        with m.Else():
            m.d.comb += ev.stop.eq(s2_level)
        return m
