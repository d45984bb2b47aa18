"""Shape units: Flatten, Promote, RepeatStatic, Reshape, Expand, Zip.

They only rewrite stop levels, repeat elements or pair them; payloads pass
through. Most move tokens of one tile format (:class:`~step_hdl.units.params.StreamParams`
or a subclass here adding register widths); Expand's ``i_ref`` may carry
another tile (:class:`ExpandParams`), and Zip pairs two tile formats
(:class:`ZipParams`) into a :class:`~step_hdl.units.layout.TupleFormat`.

Units that close sub-streams (RepeatStatic, Reshape at rank 0) feed an event
stream into :class:`~step_hdl.units.merger.StopMerger`, like the interpreter's
:class:`~step_hdl.process.Emitter`; their block ends are *eager* when the
driving input has rank 0 (register ``in_rank``, set by :meth:`configure`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring

from step_hdl.functions import round_bf16
from step_hdl.types import DTYPES

from .base import hw_port, not_elaborated, StepUnit
from .config import Reg
from .layout import TokenFormat, TupleFormat, payload_format, tile_format
from .merger import StopMerger
from .params import ParamError, StreamParams, Params, positive
from .stream import Broadcast


def tile_token_format(p: StreamParams) -> TokenFormat:
    return TokenFormat(tile_format(p.dtype, p.rows, p.cols), p.max_rank)


def index_token_format(max_rank: int) -> TokenFormat:
    """Tokens of ``[1, 1]`` int32 tiles (padding flags)."""
    return TokenFormat(tile_format("int32", 1, 1), max_rank)


# --------------------------------------------------------------------------- parameters

def _bits(owner: str, name: str, value) -> None:
    positive(owner, name, value)
    if value > 32:
        raise ParamError(f"{owner}: {name} must be <= 32 (a configuration register), got {value!r}")


@dataclass(frozen=True)
class RepeatParams(StreamParams):
    """RepeatStatic: the stream format plus the width of the ``count`` register."""

    count_bits: int = 16

    def validate(self):
        super().validate()
        _bits(self.owner, "count_bits", self.count_bits)


@dataclass(frozen=True)
class ReshapeParams(StreamParams):
    """Reshape: the stream format, the width of the ``chunk`` register, and whether the
    unit pads (rank 0 only), which gives it the second output ``o_pad``."""

    chunk_bits: int = 16
    pad: bool = False

    def validate(self):
        super().validate()
        _bits(self.owner, "chunk_bits", self.chunk_bits)
        if not isinstance(self.pad, bool):
            raise ParamError(f"{self.owner}: pad must be True or False, got {self.pad!r}")


@dataclass(frozen=True)
class ExpandParams(StreamParams):
    """Expand: the stream format of ``i``/``o``, and the tile of ``i_ref`` (whose payload is
    ignored); ``ref_rows``/``ref_cols``/``ref_dtype`` default to the input's tile."""

    ref_rows: int | None = None
    ref_cols: int | None = None
    ref_dtype: str | None = None

    def validate(self):
        super().validate()
        for name in ("ref_rows", "ref_cols"):
            if getattr(self, name) is not None:
                positive(self.owner, name, getattr(self, name))
        if self.ref_dtype is not None and self.ref_dtype not in DTYPES:
            raise ParamError(f"{self.owner}: unsupported ref element type {self.ref_dtype!r}; "
                             f"supported: {sorted(DTYPES)}")

    def ref_format(self) -> TokenFormat:
        return TokenFormat(tile_format(self.ref_dtype or self.dtype, self.ref_rows or self.rows,
                                       self.ref_cols or self.cols), self.max_rank)


@dataclass(frozen=True)
class ZipParams(Params):
    """Zip: the tiles of ``i0`` (``rows0 × cols0`` of ``dtype0``) and ``i1``, and ``max_rank``."""

    rows0: int = 4
    cols0: int = 4
    dtype0: str = "int16"
    rows1: int = 4
    cols1: int = 4
    dtype1: str = "int16"
    max_rank: int = 3

    def validate(self):
        for k in "01":
            positive(self.owner, f"rows{k}", getattr(self, f"rows{k}"))
            positive(self.owner, f"cols{k}", getattr(self, f"cols{k}"))
            if getattr(self, f"dtype{k}") not in DTYPES:
                raise ParamError(f"{self.owner}: unsupported element type dtype{k}="
                                 f"{getattr(self, f'dtype{k}')!r}; supported: {sorted(DTYPES)}")
        positive(self.owner, "max_rank", self.max_rank, minimum=0)
        if self.max_rank > 15:
            raise ParamError(f"{self.owner}: max_rank {self.max_rank} > 15 is not supported")

    def tile(self, k: int):
        return tile_format(getattr(self, f"dtype{k}"), getattr(self, f"rows{k}"), getattr(self, f"cols{k}"))


# --------------------------------------------------------------------------- helpers

class _ShapeUnit(StepUnit):
    params_class = StreamParams

    def __init__(self, params):
        if not isinstance(params, self.params_class):
            not_elaborated(self)  # no "created but never used" warning for a rejected unit
            raise ParamError(f"{type(self).__name__}: parameters must be {self.params_class.__name__}, "
                             f"got {type(params).__name__}")
        super().__init__(params)

    def _fail(self, message: str):
        raise ParamError(f"{type(self).__name__}: {message}")

    def _check_types(self, in_types: dict) -> None:
        """Each input's element type must be the tile its port was built for."""
        for port, st in in_types.items():
            hp = hw_port(port, output=False)
            if hp not in self.fmts:
                self._fail(f"no input port {port!r}; ports are {[p for p, (o, _) in self.fmts.items() if not o]}")
            try:
                pf = payload_format(st.dtype)
            except ParamError as exc:
                pf, why = None, str(exc)
            if pf is None:
                self._fail(f"input {port!r}: {why}")
            if pf != self.fmt(hp).payload:
                self._fail(f"input {port!r} carries {st.dtype} but the unit was built for {self.fmt(hp).payload}")

    def _check_rank(self, what: str, rank: int) -> None:
        if rank > self.params.max_rank:
            self._fail(f"{what} {rank} exceeds max_rank {self.params.max_rank}")

    def _int(self, op_params: dict, key: str, default=None) -> int:
        v = op_params.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            self._fail(f"parameter {key!r} must be an integer, got {v!r}")
        return v


def _kind(tok):
    """(is_data, is_stop) of a token view."""
    return ~tok.done & (tok.stop == 0), ~tok.done & (tok.stop != 0)


# --------------------------------------------------------------------------- Flatten

class Flatten(StepUnit):
    """Merge dimensions ``lo..hi`` into one (STeP Flatten).

    Registers: ``lo``, ``hi`` (ranks, ``0 <= lo < hi <= max_rank``).
    Stops ``S_k`` with ``lo < k <= hi`` vanish (become ``S_lo`` if ``lo >= 1``);
    higher ones are renumbered down by ``hi - lo``.

    Latency 0, II 1. Combinational: payload and valid (input to output), ready
    (output to input). A dropped stop is consumed without an output transfer.
    """

    kind = "Flatten"

    def formats(self):
        f = tile_token_format(self.params)
        return {"i": (False, f), "o": (True, f)}

    def registers(self):
        bits = tile_token_format(self.params).stop_bits
        return [Reg("lo", bits, 0, doc="lowest merged rank"), Reg("hi", bits, 1, doc="highest merged rank")]

    def configure(self, op_params, in_types):
        return self.config_image(lo=op_params["lo"], hi=op_params["hi"])

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        lo, hi = self.regs["lo"], self.regs["hi"]
        k = self.i.payload.stop
        inside = ~self.i.payload.done & (k > lo) & (k <= hi)
        drop = inside & (lo == 0)
        m.d.comb += [
            self.o.payload.payload.eq(self.i.payload.payload),
            self.o.payload.done.eq(self.i.payload.done),
            self.o.payload.stop.eq(Mux(k > hi, k - (hi - lo), Mux(inside, lo, k))),
            self.o.valid.eq(self.i.valid & ~drop),
            self.i.ready.eq(self.o.ready | drop),
        ]
        return m


# --------------------------------------------------------------------------- Promote

class Promote(_ShapeUnit):
    """Add a new outermost dimension of size 1, 0 for an empty stream (STeP Promote).

    Register: ``in_rank`` (the input's rank ``r``; the output has rank ``r + 1``).
    Rank 0: tokens pass through; the done token of a non-empty stream is
    preceded by ``S1``. Rank ``r >= 1``: ``S_r`` is held in a one-token buffer
    until the next token shows whether the stream ends (then it becomes
    ``S_(r+1)``); everything else passes through.

    Latency 0 while the buffer is empty; after the first held ``S_r`` the unit
    runs one token behind (the buffer refills as it drains) until the input
    pauses. II 1 per output token. Combinational: valid and payload (input to
    output) while the buffer is empty or holds ``S_r``; ready (output to input).
    ``o.valid`` never depends on ``o.ready``.
    """

    kind = "Promote"

    def formats(self):
        f = tile_token_format(self.params)
        return {"i": (False, f), "o": (True, f)}

    def registers(self):
        return [Reg("in_rank", self.fmt("i").stop_bits, 0, doc="rank of the input stream")]

    def configure(self, op_params, in_types):
        self._check_types(in_types)
        if op_params:
            self._fail(f"takes no parameters, got {sorted(op_params)}")
        r = in_types["in"].rank
        self._check_rank("output rank", r + 1)
        return self.config_image(in_rank=r)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        r = self.regs["in_rank"]
        i, o = self.i, self.o
        tok = i.payload
        hv = Signal()                                   # the one-token buffer is full
        hold = Signal(self.fmt("i").layout)
        seen = Signal()                                 # rank 0: a token has passed (S1 due before done)
        i_is_sr = (r != 0) & ~tok.done & (tok.stop == r)
        h_is_sr = (r != 0) & ~hold.done & (hold.stop == r)
        o_fire = o.valid & o.ready

        with m.If(hv):
            m.d.comb += i.ready.eq(o.ready)             # refill the buffer as it drains
            with m.If(h_is_sr):
                # the held S_r closes the new outer element iff the stream ends next
                m.d.comb += [o.valid.eq(i.valid), o.payload.stop.eq(Mux(tok.done, r + 1, r))]
            with m.Else():
                m.d.comb += [o.valid.eq(1), o.payload.eq(hold)]
            with m.If(o_fire):
                m.d.sync += [hv.eq(i.valid), hold.eq(tok)]
        with m.Else():
            with m.If(i_is_sr):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid):
                    m.d.sync += [hv.eq(1), hold.eq(tok)]
            with m.Elif(tok.done & seen):
                # rank 0: close the single outer element before the done token
                m.d.comb += [o.valid.eq(i.valid), o.payload.stop.eq(1)]
                with m.If(o_fire):
                    m.d.sync += seen.eq(0)
            with m.Else():
                m.d.comb += [o.valid.eq(i.valid), o.payload.eq(tok), i.ready.eq(o.ready)]
                with m.If(o_fire & ~tok.done & (r == 0)):
                    m.d.sync += seen.eq(1)
        return m


# --------------------------------------------------------------------------- RepeatStatic

class RepeatStatic(_ShapeUnit):
    """Repeat each element ``count`` times: a new innermost dimension (STeP RepeatStatic).

    Registers: ``count`` (>= 1), ``in_rank`` (rank 0 makes block ends eager).
    A data token is held on the input (not copied) while its ``count`` copies
    go out, then a block end ``S1`` goes to the :class:`StopMerger`; input
    stops ``S_k`` become ``S_(k+1)`` and merge with the pending ``S1``.

    Latency 0 (data, valid combinational from input to output through the
    merger). II 1 per output token: ``count`` copies plus the ``S1`` (or the
    outer stop it merges into), ``count + 1`` cycles per element. With a rank
    >= 1 input the last copy carries the block end as its ``tail`` (it goes
    pending as the copy leaves: no cycle of its own); a rank-0 input's is
    eager, an event after the copies. ``i.ready`` is combinational in
    ``o.ready``; ``o.valid`` never depends on ``o.ready``.
    """

    kind = "RepeatStatic"
    params_class = RepeatParams

    def formats(self):
        f = tile_token_format(self.params)
        return {"i": (False, f), "o": (True, f)}

    def registers(self):
        return [Reg("count", self.params.count_bits, 1, doc="copies per element (>= 1)"),
                Reg("in_rank", self.fmt("i").stop_bits, 0, doc="rank of the input stream")]

    def configure(self, op_params, in_types):
        self._check_types(in_types)
        count = self._int(op_params, "count")
        if not 1 <= count < 1 << self.params.count_bits:
            self._fail(f"count must be in 1..{(1 << self.params.count_bits) - 1}, got {count}")
        r = in_types["in"].rank
        self._check_rank("output rank", r + 1)
        return self.config_image(count=count, in_rank=r)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        m.submodules.merge = mg = StopMerger(self.fmt("o"))
        wiring.connect(m, mg.o, wiring.flipped(self.o))
        count, eager = self.regs["count"], self.regs["in_rank"] == 0
        i, ev = self.i, mg.i.payload
        tok = i.payload
        is_data, _ = _kind(tok)
        n = Signal(self.params.count_bits)              # copies sent of the current element
        ending = Signal()                               # all copies sent: the block end is next
        ev_fire = mg.i.valid & mg.i.ready

        m.d.comb += mg.i.valid.eq(i.valid)
        with m.If(ending):
            m.d.comb += [ev.end.eq(1), ev.stop.eq(1), ev.eager.eq(eager), i.ready.eq(mg.i.ready)]
            with m.If(ev_fire):
                m.d.sync += ending.eq(0)
        with m.Elif(is_data):
            last = n + 1 >= count
            m.d.comb += ev.payload.eq(tok.payload)
            with m.If(last & ~eager):       # the block end leaves with the last copy
                m.d.comb += [ev.tail.eq(1), i.ready.eq(mg.i.ready)]
            with m.If(ev_fire):
                with m.If(last):
                    m.d.sync += [n.eq(0), ending.eq(eager)]
                with m.Else():
                    m.d.sync += n.eq(n + 1)
        with m.Else():                                  # an outer stop (one level deeper) or done
            m.d.comb += [ev.stop.eq(Mux(tok.done, 0, tok.stop + 1)), ev.done.eq(tok.done),
                         i.ready.eq(mg.i.ready)]
        return m


# --------------------------------------------------------------------------- Reshape

class Reshape(_ShapeUnit):
    """Split dimension ``rank`` into ``[ceil(D/chunk), chunk]`` (STeP Reshape).

    Registers: ``rank`` (b), ``chunk`` (s >= 1), ``in_rank``, and with
    ``ReshapeParams.pad`` the pad element ``pad`` (raw bits of one tile element).

    * b = 0: every ``s`` data tokens end a block ``S1`` (a StopMerger event,
      eager for a rank-0 input); input stops ``S_k`` become ``S_(k+1)``. With
      padding, a partial last run (closed by a stop, or by done at rank 0) is
      filled with pad tiles, and ``o_pad`` carries a ``[1, 1]`` int32 flag per
      data token (1 = padded) with the same stops.
    * b >= 1: a counter of rank-b elements relabels stops: ``S_b`` becomes
      ``S_(b+1)`` every ``s``-th time, ``S_k`` (k > b) becomes ``S_(k+1)``.

    Latency 0 (data, valid combinational from input to output through the
    merger, and through a fork to ``o``/``o_pad``). The chunk counter's
    "last element" flag is a register that follows ``chunk`` a cycle after it
    is written: the first token may come the cycle after the last
    configuration write (``in_rank`` is written after ``chunk``), not sooner. II 1 per output token; at
    b = 0 with a rank >= 1 input a chunk's last element (or pad tile) carries
    its block end as its ``tail``, so the block end costs no cycle of its own
    (a rank-0 input's is eager: an event after the element). ``i.ready`` is combinational in the
    outputs' ready; ``o.valid`` never depends on ``o.ready``. The two outputs
    take each token independently (a :class:`Broadcast` fork).
    """

    kind = "Reshape"
    params_class = ReshapeParams

    def formats(self):
        f = tile_token_format(self.params)
        out = {"i": (False, f), "o": (True, f)}
        if self.params.pad:
            out["o_pad"] = (True, index_token_format(self.params.max_rank))
        return out

    def registers(self):
        sb = self.fmt("i").stop_bits
        regs = [Reg("rank", sb, 0, doc="the split dimension b"),
                Reg("chunk", self.params.chunk_bits, 1, doc="chunk size s (>= 1)"),
                Reg("in_rank", sb, 0, doc="rank of the input stream")]
        if self.params.pad:
            regs.append(Reg("pad", self.params.dt.bits, 0, doc="pad element (raw bits)"))
        return regs

    def configure(self, op_params, in_types):
        self._check_types(in_types)
        b, s = self._int(op_params, "rank"), self._int(op_params, "chunk")
        pad = op_params.get("pad")
        r = in_types["in"].rank
        if not 0 <= b <= r:
            self._fail(f"rank must be in 0..{r} (the input rank), got {b}")
        if not 1 <= s < 1 << self.params.chunk_bits:
            self._fail(f"chunk must be in 1..{(1 << self.params.chunk_bits) - 1}, got {s}")
        self._check_rank("output rank", r + 1)
        if (pad is not None) != self.params.pad:
            self._fail("the node pads but the unit was built without o_pad (ReshapeParams(pad=True))"
                       if pad is not None else "the unit has o_pad (ReshapeParams(pad=True)) but the node "
                       "gives no pad value")
        values = dict(rank=b, chunk=s, in_rank=r)
        if op_params.get("partial") and not 1 <= b < r:
            # a short last chunk ends where its run's closing stop S_(b+1) (or higher) is relabelled; the
            # stream's own end sends none, and at rank 0 the chunks are counted, not closed by stops
            self._fail(f"a partial last chunk needs a run closed by a stop: rank in 1..{r - 1} for a rank-{r} "
                       f"input, got rank {b}")
        if pad is not None:
            if b != 0:
                self._fail(f"padding only applies at rank 0, got rank {b}")
            dt = self.params.dt
            fmt1 = tile_format(dt.name, 1, 1)
            try:
                tile = np.full((1, 1), pad, dtype=dt.numpy)
                if dt.name == "bf16":      # the language rounds bf16 to nearest even (pack truncates)
                    tile = round_bf16(tile)
                values["pad"] = fmt1.pack(tile)
            except (TypeError, ValueError, OverflowError) as exc:
                self._fail(f"pad {pad!r} is not a {dt.name} value ({exc})")
        return self.config_image(**values)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        p = self.params
        tile, flag_fmt = self.fmt("o"), index_token_format(p.max_rank)
        if p.pad:   # the merger carries (tile, flag); a fork splits them
            efmt = TokenFormat(TupleFormat((tile.payload, flag_fmt.payload)), p.max_rank)
        else:
            efmt = tile
        m.submodules.merge = mg = StopMerger(efmt)
        if p.pad:
            m.submodules.fork = fork = Broadcast(efmt.layout, 2)
            wiring.connect(m, mg.o, fork.i)
            for src, dst, field in ((fork.o0, self.o, "f0"), (fork.o1, self.o_pad, "f1")):
                m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready),
                             dst.payload.payload.eq(getattr(src.payload.payload, field)),
                             dst.payload.stop.eq(src.payload.stop), dst.payload.done.eq(src.payload.done)]
        else:
            wiring.connect(m, mg.o, wiring.flipped(self.o))

        b, s, in0 = self.regs["rank"], self.regs["chunk"], self.regs["in_rank"] == 0
        i, ev = self.i, mg.i.payload
        tok = i.payload
        is_data, is_stop = _kind(tok)
        c = Signal(p.chunk_bits)                        # elements in the current chunk
        left = Signal(p.chunk_bits)                     # s - c: the chunk's elements from this one on
        # what c does this cycle (hold, count, restart) and, registered beside it, whether it is then a
        # chunk's last element (`full`: c + 1 >= s, that is left <= 1): each outcome is a comparison of a
        # register with a constant and the handshake only selects one, so no adder or carry chain is on
        # it. Between chunks (c == 0) `left` follows s, programmed before the tokens come, a cycle later.
        HOLD, INC, ZERO = 0, 1, 2
        c_op = Signal(range(3))
        full = Signal()
        idle = c == 0
        m.d.sync += [c.eq(Mux(c_op == INC, c + 1, Mux(c_op == ZERO, 0, c))),
                     left.eq(Mux(c_op == INC, Mux(idle, s, left) - 1, Mux((c_op == ZERO) | idle, s, left))),
                     full.eq(Mux(c_op == INC, Mux(idle, s <= 2, left <= 2),
                                 Mux((c_op == ZERO) | idle, s <= 1, left <= 1)))]
        padding = Signal()                              # filling a partial run with pad tiles
        ending = Signal()                               # the block end S1 is the next event
        end_eager = Signal()
        ev_fire = mg.i.valid & mg.i.ready

        def put_data(value, flag):
            if p.pad:
                m.d.comb += [ev.payload.f0.eq(value), ev.payload.f1.eq(flag)]
            else:
                m.d.comb += ev.payload.eq(value)

        def put_pad():
            """One pad tile; the last one of the run carries the (non-eager) block end."""
            put_data(self.regs["pad"].replicate(tile.payload.elements), 1)
            with m.If(full):
                m.d.comb += ev.tail.eq(1)
            with m.If(ev_fire):
                with m.If(full):
                    m.d.sync += padding.eq(0)
                    m.d.comb += c_op.eq(ZERO)
                with m.Else():
                    m.d.sync += padding.eq(1)
                    m.d.comb += c_op.eq(INC)

        def put_token():
            m.d.comb += [ev.stop.eq(tok.stop), ev.done.eq(tok.done), i.ready.eq(mg.i.ready)]
            with m.If(ev_fire & tok.done):
                m.d.comb += c_op.eq(ZERO)                     # ready for the next program

        with m.If(ending):
            m.d.comb += [mg.i.valid.eq(1), ev.end.eq(1), ev.stop.eq(1), ev.eager.eq(end_eager)]
            with m.If(ev_fire):
                m.d.sync += ending.eq(0)
        with m.Elif(padding):
            m.d.comb += mg.i.valid.eq(1)
            if p.pad:
                put_pad()
        with m.Elif(b == 0):
            m.d.comb += mg.i.valid.eq(i.valid)
            with m.If(is_data):
                put_data(tok.payload, 0)
                m.d.comb += i.ready.eq(mg.i.ready)
                with m.If(full & ~in0):         # the chunk's last element carries its block end
                    m.d.comb += ev.tail.eq(1)
                with m.If(ev_fire):
                    with m.If(full):
                        m.d.sync += [ending.eq(in0), end_eager.eq(in0)]
                        m.d.comb += c_op.eq(ZERO)
                    with m.Else():
                        m.d.comb += c_op.eq(INC)
            with m.Elif((c != 0) & (is_stop | (tok.done & in0))):
                # a partial run ends: pad it (or, without padding, just close it); the stop waits
                if p.pad:
                    put_pad()
                else:
                    m.d.comb += [ev.end.eq(1), ev.stop.eq(1)]
                    with m.If(ev_fire):
                        m.d.comb += c_op.eq(ZERO)
            with m.Else():
                put_token()
                m.d.comb += ev.stop.eq(Mux(tok.done, 0, tok.stop + 1))
        with m.Else():                                  # b >= 1: relabel the stops
            m.d.comb += mg.i.valid.eq(i.valid)
            put_token()
            m.d.comb += ev.payload.eq(tok.payload) if not p.pad else ev.payload.f0.eq(tok.payload)
            with m.If(is_stop & (tok.stop == b)):
                m.d.comb += ev.stop.eq(Mux(full, b + 1, b))
                with m.If(ev_fire):
                    m.d.comb += c_op.eq(Mux(full, ZERO, INC))
            with m.Elif(is_stop & (tok.stop > b)):
                m.d.comb += ev.stop.eq(tok.stop + 1)
                with m.If(ev_fire):
                    m.d.comb += c_op.eq(ZERO)
        return m


# --------------------------------------------------------------------------- Expand

class Expand(_ShapeUnit):
    """Repeat each element of ``i`` over the matching rank-b chunk of ``i_ref`` (STeP Expand).

    Register: ``rank`` (b >= 1). ``i``'s inner b dimensions have size 1, so each
    of its chunks is one data token ``x`` and a closing stop. The output follows
    ``i_ref`` token for token: ref data become ``x``, ref stops pass through.
    ``x`` is captured in a register (and bypassed on the cycle it arrives), and
    ``i``'s closing stop is absorbed while the ref chunk streams, so neither
    costs an output cycle.

    Latency 0 (valid and payload combinational from ``i``/``i_ref`` to ``o``).
    II 1 per output token (per ``i_ref`` token). ``i_ref.ready`` is
    combinational in ``o.ready`` (``i.ready`` too for the done token);
    ``o.valid`` never depends on ``o.ready``.
    """

    kind = "Expand"
    params_class = ExpandParams

    def formats(self):
        f = tile_token_format(self.params)
        return {"i": (False, f), "i_ref": (False, self.params.ref_format()), "o": (True, f)}

    def registers(self):
        return [Reg("rank", self.fmt("i").stop_bits, 1, doc="rank b of the repeated chunk (>= 1)")]

    def configure(self, op_params, in_types):
        self._check_types(in_types)
        b = self._int(op_params, "rank", 1)
        r = in_types["in"].rank
        if not 1 <= b <= r:
            self._fail(f"rank must be in 1..{r} (the input rank), got {b}")
        self._check_rank("input rank", max(r, in_types["ref"].rank))
        return self.config_image(rank=b)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        b = self.regs["rank"]
        i, ref, o = self.i, self.i_ref, self.o
        tok, rt = i.payload, ref.payload
        i_data, i_stop = _kind(tok)
        r_data, r_stop = _kind(rt)
        x = Signal(self.fmt("i").payload.token_layout())
        have = Signal()                                 # x holds the current chunk's element
        closed = Signal()                               # i's closing stop of the chunk was consumed
        x_ok = have | (~closed & i.valid & i_data)
        closed_now = closed | (i.valid & i_stop)
        o_fire = o.valid & o.ready

        # the input side: capture x, then absorb i's closing stop (a chunk may have no data
        # when an inner dimension of both streams is empty: then only the stop is absorbed)
        with m.If(~have & ~closed & i_data):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += [x.eq(tok.payload), have.eq(1)]
        with m.Elif(~closed & i_stop):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += closed.eq(1)
        with m.Elif(~have & ~closed & tok.done):
            m.d.comb += i.ready.eq(o.ready & ref.valid & rt.done)

        # the output side follows the ref stream
        with m.If(r_data):
            m.d.comb += [o.valid.eq(ref.valid & x_ok), ref.ready.eq(o.ready & x_ok),
                         o.payload.payload.eq(Mux(have, x.as_value(), tok.payload.as_value()))]
        with m.Elif(r_stop & (rt.stop < b)):
            m.d.comb += [o.valid.eq(ref.valid), ref.ready.eq(o.ready), o.payload.stop.eq(rt.stop)]
        with m.Elif(r_stop):                            # the chunk's closing stop
            m.d.comb += [o.valid.eq(ref.valid & closed_now), ref.ready.eq(o.ready & closed_now),
                         o.payload.stop.eq(rt.stop)]
            with m.If(o_fire):
                m.d.sync += [have.eq(0), closed.eq(0)]
        with m.Else():                                  # done: both streams end together
            both = ~have & ~closed & i.valid & tok.done
            m.d.comb += [o.valid.eq(ref.valid & both), ref.ready.eq(o.ready & both), o.payload.done.eq(1)]
        return m


# --------------------------------------------------------------------------- Zip

class Zip(_ShapeUnit):
    """Pair two streams of equal shape into a stream of tuples (STeP Zip).

    The output payload is ``TupleFormat((tile0, tile1))`` (``i0``'s tile in the
    low bits); stops and done come from ``i0`` (the streams must agree). No
    registers.

    Latency 0, II 1. Combinational: valid (``o.valid = i0.valid & i1.valid``)
    and payload (inputs to output), ready (``o.ready`` and the other input's
    valid to each input). ``o.valid`` never depends on ``o.ready``.
    """

    kind = "Zip"
    params_class = ZipParams

    def formats(self):
        p = self.params
        f0, f1 = TokenFormat(p.tile(0), p.max_rank), TokenFormat(p.tile(1), p.max_rank)
        return {"i0": (False, f0), "i1": (False, f1),
                "o": (True, TokenFormat(TupleFormat((p.tile(0), p.tile(1))), p.max_rank))}

    def configure(self, op_params, in_types):
        self._check_types(in_types)
        if op_params:
            self._fail(f"takes no parameters, got {sorted(op_params)}")
        self._check_rank("input rank", in_types["in0"].rank)
        return self.config_image()

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        a, b, o = self.i0, self.i1, self.o
        # Zip has no state, but every unit has clk/rst ports (simulators drive them): keep the
        # sync domain alive with a flag that says whether a stream is in progress
        busy = Signal()
        with m.If(o.valid & o.ready):
            m.d.sync += busy.eq(~o.payload.done)
        m.d.comb += [
            o.valid.eq(a.valid & b.valid),
            o.payload.payload.f0.eq(a.payload.payload), o.payload.payload.f1.eq(b.payload.payload),
            o.payload.stop.eq(a.payload.stop), o.payload.done.eq(a.payload.done),
            a.ready.eq(o.ready & b.valid), b.ready.eq(o.ready & a.valid),
        ]
        return m
