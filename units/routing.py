"""Routing units: Partition, Reassemble, EagerMerge (data-dependent control flow), and the Broadcast fan-out.

They move tokens of one tile format between ``n`` streams, steered by selector
tokens (:class:`~step_hdl.units.layout.SelectorFormat`). Their structural
parameters are :class:`RoutingParams` (the physical tile, ``max_rank`` and the
number of routed streams ``n``); the chunk rank ``p`` and, for Reassemble, the
selector stream's rank are configuration registers set by ``configure``.

Reference semantics: :class:`step_hdl.ops.Partition`, :class:`step_hdl.ops.Reassemble`
and :class:`step_hdl.ops.EagerMerge`, with chunks read as
:meth:`step_hdl.process.Ports.read_chunk` reads them: for ``p >= 1`` a rank-``p``
chunk runs up to and including the first stop ``S_k`` with ``k >= p`` (an empty
chunk is that stop alone); for ``p == 0`` a chunk is one data token and stop
tokens between chunks are skipped.

All three units have latency 0 for chunk tokens (payload and valid pass
combinationally from the inputs to the outputs), sustain one token per cycle
when not stalled, and never make an output's ``valid`` depend on any output's
``ready``: ``valid`` is a function of input ``valid``/payload and registers
only. Input ``ready`` is combinational in the output readies. The class
docstrings give the details.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal

from .base import not_elaborated, reject, StepUnit
from .config import Reg
from .layout import SelectorFormat, TokenFormat, payload_format, tile_format
from .merger import StopMerger
from .params import ParamError, StreamParams, Params, positive
from .stream import Broadcast

#: largest number of routed streams (selector width) a routing unit may have
MAX_N = 64


@dataclass(frozen=True)
class RoutingParams(StreamParams):
    """A routing unit: the physical tile, ``max_rank`` and ``n`` routed streams (selector width)."""

    n: int = 2

    def validate(self):
        super().validate()
        positive(self.owner, "n", self.n)
        if self.n > MAX_N:
            raise ParamError(f"{self.owner}: n = {self.n} routed streams exceeds the maximum {MAX_N}")


# --------------------------------------------------------------------------- helpers


def _any(terms):
    out = Const(0, 1)
    for t in terms:
        out = out | t
    return out


def _all(terms):
    out = Const(1, 1)
    for t in terms:
        out = out & t
    return out


def _lowest(m: Module, bits: list, name: str):
    """(index of the lowest set bit, any bit set) of a list of 1-bit values; index 0 when none."""
    n = len(bits)
    idx = Signal(range(max(n, 2)), name=f"{name}_idx")
    expr = Const(0, idx.shape())
    for k in reversed(range(n)):
        expr = Mux(bits[k], k, expr)
    m.d.comb += idx.eq(expr)
    return idx, _any(bits)


def _select(m: Module, idx, ports, fmt: TokenFormat, name: str):
    """(valid, payload) of ``ports[idx]`` (a multiplexer)."""
    valid = Signal(name=f"{name}_valid")
    head = Signal(fmt.layout, name=f"{name}_head")
    with m.Switch(idx):
        for k, port in enumerate(ports):
            with m.Case(k):
                m.d.comb += [valid.eq(port.valid), head.eq(port.payload)]
    return valid, head


class _RoutingUnit(StepUnit):
    """Shared construction and configuration checks of the routing units."""

    def __init__(self, params):
        if not isinstance(params, RoutingParams):
            reject(self, f"{type(self).__name__}: parameters must be RoutingParams, got {params!r}")
        super().__init__(params)

    @property
    def n(self) -> int:
        return self.params.n

    def tile_fmt(self) -> TokenFormat:
        p = self.params
        return TokenFormat(tile_format(p.dtype, p.rows, p.cols), p.max_rank)

    def sel_fmt(self) -> TokenFormat:
        return TokenFormat(SelectorFormat(self.n), self.params.max_rank)

    def rank_reg(self) -> Reg:
        return Reg("rank", self.tile_fmt().stop_bits, 0, doc="chunk rank p")

    # ---- configuration checks (a node the unit cannot run is a ParamError)
    def _owner(self) -> str:
        return type(self).__name__

    def _check_n(self, op_params: dict) -> None:
        n = op_params.get("n")
        if n != self.n:
            raise ParamError(f"{self._owner()}: the node routes n={n!r} streams but the unit was built for "
                             f"n={self.n}")

    def _check_rank(self, op_params: dict) -> int:
        p = op_params.get("rank", 0)
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= self.params.max_rank:
            raise ParamError(f"{self._owner()}: rank must be an integer in 0..max_rank={self.params.max_rank}, "
                             f"got {p!r}")
        return p

    def _check_stream(self, port: str, st, fmt: TokenFormat) -> None:
        if st is None:
            return
        if st.rank > self.params.max_rank:
            raise ParamError(f"{self._owner()}: input '{port}' has rank {st.rank} > max_rank "
                             f"{self.params.max_rank}")
        try:
            pf = payload_format(st.dtype)
        except ParamError as exc:
            raise ParamError(f"{self._owner()}: input '{port}': {exc}") from None
        if pf != fmt.payload:
            raise ParamError(f"{self._owner()}: input '{port}' carries {st.dtype}, but the unit was built "
                             f"for {fmt.payload}")


def _closing(tok, p, p_zero):
    """The token closes a rank-``p`` chunk (it is not done): data when p == 0, a stop ``S_k >= S_p`` else."""
    return Mux(p_zero, tok.stop == 0, (tok.stop != 0) & (tok.stop >= p))


def _chunk_stop(tok, p, p_zero):
    """A chunk token's stop with the closing stop normalised to ``S_p``."""
    return Mux(~p_zero & (tok.stop >= p) & (tok.stop != 0), p, tok.stop)


# --------------------------------------------------------------------------- Partition

class Partition(_RoutingUnit):
    """Send each rank-``p`` chunk of ``i`` to every output whose bit is set in the next selector token.

    Ports: ``i`` (tiles), ``i_sel`` (selector tokens, ``SelectorFormat(n)``),
    outputs ``o0`` .. ``o{n-1}``. Register ``rank`` (= ``p``).

    * A multi-hot selector copies the chunk; each output takes each token when
      it is ready (independent ready, as :class:`~step_hdl.units.stream.Broadcast`);
      the input token is released when every selected output has it. A zero
      selector drops the chunk (one token per cycle).
    * For ``p >= 1``, stops of ``i`` at or above ``p`` close a chunk and leave
      as ``S_p``; stops below ``p`` pass. For ``p == 0`` a chunk is one data
      token and the stop tokens of ``i`` are dropped.
    * Stop tokens of ``i_sel`` are skipped. The selector is used combinationally
      for a chunk's first token and held in a register for the rest of the chunk.
    * When ``i`` ends, ``done`` goes to every output (independent ready), then
      the remaining selector tokens are drained up to and including their
      ``done`` (credits in a feedback loop), as the interpreter does.

    Latency 0, II 1 (one input token per cycle when the selected outputs are
    ready). Combinational: payload and valid from ``i``/``i_sel`` to the
    outputs; ``i.ready``/``i_sel.ready`` from the outputs' ready. ``o_k.valid``
    depends only on input valid/payload and registers.
    """

    kind = "Partition"

    def formats(self):
        t = self.tile_fmt()
        out = {"i": (False, t), "i_sel": (False, self.sel_fmt())}
        out.update({f"o{k}": (True, t) for k in range(self.n)})
        return out

    def registers(self):
        return [self.rank_reg()]

    def configure(self, op_params, in_types):
        self._check_n(op_params)
        p = self._check_rank(op_params)
        self._check_stream("in", in_types.get("in"), self.tile_fmt())
        self._check_stream("sel", in_types.get("sel"), self.sel_fmt())
        st = in_types.get("in")
        if st is not None and p > st.rank:
            raise ParamError(f"Partition: rank {p} > the rank {st.rank} of input 'in'")
        return self.config_image(rank=p)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        n, i, s = self.n, self.i, self.i_sel
        outs = [getattr(self, f"o{k}") for k in range(n)]
        p = self.regs["rank"]
        p_zero = p == 0

        sel_reg = Signal(n)        # the current chunk's selector, once its first token has gone
        sel_held = Signal()        # sel_reg is valid (inside a chunk)
        taken = Signal(n)          # outputs that already took the current input token
        drain = Signal()           # i has ended: drain the selector stream up to its done

        tok = i.payload
        sel_is_data = s.valid & ~s.payload.done & (s.payload.stop == 0)
        have_sel = sel_held | sel_is_data
        cur_sel = Mux(sel_held, sel_reg, s.payload.payload)
        skip_in = i.valid & ~tok.done & p_zero & (tok.stop != 0) & ~drain
        is_chunk = i.valid & ~tok.done & ~(p_zero & (tok.stop != 0)) & ~drain
        is_done = i.valid & tok.done & ~drain
        closing = _closing(tok, p, p_zero)

        # every selected output (or every output, for done) must take the token
        want = Mux(is_done, Const((1 << n) - 1, n), Mux(is_chunk & have_sel, cur_sel, 0))
        active = is_done | (is_chunk & have_sel)
        got = [taken[k] | ~want[k] | outs[k].ready for k in range(n)]
        release = active & _all(got)

        for k, o in enumerate(outs):
            m.d.comb += [
                o.valid.eq(active & want[k] & ~taken[k]),
                o.payload.payload.eq(Mux(tok.done | (tok.stop != 0), 0, tok.payload)),
                o.payload.stop.eq(Mux(tok.done, 0, _chunk_stop(tok, p, p_zero))),
                o.payload.done.eq(tok.done),
            ]
        m.d.comb += i.ready.eq(release | skip_in)

        # the selector is consumed with the first token of its chunk; its stop tokens are skipped
        first = is_chunk & ~sel_held
        m.d.comb += s.ready.eq(drain | (s.valid & ~s.payload.done & (s.payload.stop != 0))
                               | (release & first))

        with m.If(release):
            m.d.sync += taken.eq(0)
            with m.If(is_done):
                m.d.sync += drain.eq(1)
            with m.Elif(closing):
                m.d.sync += sel_held.eq(0)
            with m.Elif(first):
                m.d.sync += [sel_held.eq(1), sel_reg.eq(s.payload.payload)]
        with m.Elif(active):
            m.d.sync += taken.eq(taken | Cat(*[o.valid & o.ready for o in outs]))
        with m.If(drain & s.valid & s.payload.done):
            m.d.sync += drain.eq(0)
        return m


# --------------------------------------------------------------------------- Reassemble

class Reassemble(_RoutingUnit):
    """For each selector token, take one rank-``p`` chunk from each selected input, in index order.

    Ports: ``i0`` .. ``i{n-1}`` (rank-``p`` tile streams), ``i_sel`` (selector
    tokens), output ``o`` (rank = selector rank + ``p`` + 1). Registers:
    ``rank`` (= ``p``) and ``sel_rank`` (the selector stream's rank; 0 makes
    the per-selector block end eager, see :class:`~step_hdl.units.merger.StopMerger`).

    The chosen chunks form a new dimension: each chunk's closing stop is a
    block end ``S_p`` and each selector token's element a block end
    ``S_(p+1)``; a selector stop ``S_k`` becomes ``S_(k+p+1)``. Events go
    through a :class:`StopMerger`, so stops that close together merge exactly
    like the interpreter's ``Emitter``. A zero selector gives an empty element.
    The selector's ``done`` waits for ``done`` on every input. The declared
    ``k`` of the node is checked by the interpreter only.

    The core sends one event per cycle. Two shortcuts keep it at one token per
    cycle: a chunk followed by another chosen chunk closes with a plain
    ``S_p`` (the next event is data, a lower stop or another ``S_p``, so the
    Emitter would flush it unchanged), and the last chosen chunk's closing
    stop *is* the element's block end ``S_(p+1)`` (``S_p`` pending would merge
    into it), consuming the selector token in the same cycle.

    Latency 0 (nothing pending in the merger). II 1: one output token per
    cycle when ``sel_rank == 0`` (eager block ends; for ``p == 0`` the
    element's ``S_1`` is its own event after the last data token). With
    ``sel_rank >= 1`` the merger spends one cycle per selector element
    absorbing the pending ``S_(p+1)`` without output (it leaves later, merged
    with a selector stop or flushed before the next data).
    Combinational: payload and valid from the inputs and ``i_sel`` through the
    selector's priority encoder and the merger to ``o``; input ready from
    ``o.ready``. ``o.valid`` does not depend on ``o.ready``.
    """

    kind = "Reassemble"

    def __init__(self, params):
        if isinstance(params, RoutingParams) and params.max_rank < 1:
            reject(self, f"Reassemble: max_rank must be >= 1 (the output adds a dimension), "
                          f"got {params.max_rank}")
        super().__init__(params)

    def formats(self):
        t = self.tile_fmt()
        out = {f"i{k}": (False, t) for k in range(self.n)}
        out.update({"i_sel": (False, self.sel_fmt()), "o": (True, t)})
        return out

    def registers(self):
        bits = self.tile_fmt().stop_bits
        return [self.rank_reg(), Reg("sel_rank", bits, 0, doc="rank of the selector stream (0: eager block ends)")]

    def configure(self, op_params, in_types):
        self._check_n(op_params)
        p = self._check_rank(op_params)
        for k in range(self.n):
            st = in_types.get(f"in{k}")
            self._check_stream(f"in{k}", st, self.tile_fmt())
            if st is not None and st.rank != p:
                raise ParamError(f"Reassemble: input 'in{k}' has rank {st.rank}, expected rank {p}")
        sel = in_types.get("sel")
        self._check_stream("sel", sel, self.sel_fmt())
        sel_rank = sel.rank if sel is not None else 0
        if sel_rank + p + 1 > self.params.max_rank:
            raise ParamError(f"Reassemble: output rank {sel_rank + p + 1} (selector rank {sel_rank} + rank {p} + 1) "
                             f"exceeds max_rank {self.params.max_rank}")
        return self.config_image(rank=p, sel_rank=sel_rank)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        n, s = self.n, self.i_sel
        fmt = self.tile_fmt()
        ins = [getattr(self, f"i{k}") for k in range(n)]
        p = self.regs["rank"]
        p_zero = p == 0
        eager = self.regs["sel_rank"] == 0

        m.submodules.merger = merger = StopMerger(fmt)
        ev = merger.i
        m.d.comb += self.o.payload.eq(merger.o.payload)
        m.d.comb += [self.o.valid.eq(merger.o.valid), merger.o.ready.eq(self.o.ready)]

        served = Signal(n)      # selected inputs whose chunk is complete (for the current selector token)
        got_done = Signal(n)    # inputs whose done token was taken (after the selector's done)

        sel = s.payload
        sel_done = s.valid & sel.done
        sel_stop = s.valid & ~sel.done & (sel.stop != 0)
        sel_data = s.valid & ~sel.done & (sel.stop == 0)
        left = Signal(n)
        m.d.comb += left.eq(sel.payload & ~served)
        idx, any_left = _lowest(m, [left[k] for k in range(n)], "next")
        more = (left & ~(Const(1, n) << idx)) != 0      # chosen inputs after the current one
        hv, head = _select(m, idx, ins, fmt, "in")

        h_data = hv & ~head.done & (head.stop == 0)
        h_stop = hv & ~head.done & (head.stop != 0)
        serve = Signal()        # the current input's token is taken (as an event or skipped)
        here = [ins[k].valid & ins[k].payload.done & ~got_done[k] for k in range(n)]

        with m.If(sel_done):
            # done: wait for (and take) done on every input, then send done
            all_in = _all([got_done[k] | here[k] for k in range(n)])
            m.d.comb += [ev.valid.eq(all_in), ev.payload.done.eq(1)]
            with m.If(all_in & ev.ready):
                m.d.comb += s.ready.eq(1)
                m.d.sync += got_done.eq(0)
            with m.Else():
                m.d.sync += got_done.eq(got_done | Cat(*here))
        with m.Elif(sel_stop):
            m.d.comb += [ev.valid.eq(1), ev.payload.stop.eq(sel.stop + p + 1), s.ready.eq(ev.ready)]
        with m.Elif(sel_data & ~any_left):
            # every chosen chunk is out: the element's block end S_(p+1)
            m.d.comb += [ev.valid.eq(1), ev.payload.end.eq(1), ev.payload.stop.eq(p + 1),
                         ev.payload.eager.eq(eager), s.ready.eq(ev.ready)]
            with m.If(ev.ready):
                m.d.sync += served.eq(0)
        with m.Elif(sel_data):
            with m.If(p_zero):
                with m.If(h_stop):          # stops between rank-0 chunks are skipped
                    m.d.comb += serve.eq(1)
                with m.Elif(h_data):
                    m.d.comb += [ev.valid.eq(1), ev.payload.payload.eq(head.payload), serve.eq(ev.ready)]
                    with m.If(ev.ready):
                        m.d.sync += served.eq(served | (Const(1, n) << idx))
            with m.Else():
                with m.If(h_data):
                    m.d.comb += [ev.valid.eq(1), ev.payload.payload.eq(head.payload), serve.eq(ev.ready)]
                with m.Elif(h_stop & (head.stop < p)):   # an inner stop of the chunk
                    m.d.comb += [ev.valid.eq(1), ev.payload.stop.eq(head.stop), serve.eq(ev.ready)]
                with m.Elif(h_stop & more):              # closing stop, another chunk follows: S_p
                    m.d.comb += [ev.valid.eq(1), ev.payload.stop.eq(p), serve.eq(ev.ready)]
                    with m.If(ev.ready):
                        m.d.sync += served.eq(served | (Const(1, n) << idx))
                with m.Elif(h_stop):                     # closing stop of the last chunk: S_(p+1)
                    m.d.comb += [ev.valid.eq(1), ev.payload.end.eq(1), ev.payload.stop.eq(p + 1),
                                 ev.payload.eager.eq(eager), serve.eq(ev.ready), s.ready.eq(ev.ready)]
                    with m.If(ev.ready):
                        m.d.sync += served.eq(0)
        for k in range(n):
            m.d.comb += ins[k].ready.eq((sel_done & here[k]) | (serve & (idx == k)))
        return m


# --------------------------------------------------------------------------- EagerMerge

class EagerMerge(_RoutingUnit):
    """Forward whole rank-``p`` chunks from whichever input has a token first; ``o_sel`` names the input.

    Ports: ``i0`` .. ``i{n-1}`` (tile streams), outputs ``o`` (chunks) and
    ``o_sel`` (one one-hot ``SelectorFormat(n)`` token per chunk). Register
    ``rank`` (= ``p``).

    * Arbitration: when no chunk is in progress, the lowest-index input with a
      valid chunk token wins and stays locked until the chunk's closing stop
      has gone (chunks never interleave). The choice is also locked while the
      first token waits for ``o.ready``, so a later-arriving lower index cannot
      change it.
    * ``p >= 1``: stops at or above ``p`` close the chunk and leave as ``S_p``.
      ``p == 0``: a chunk is one data token; stop tokens of the inputs are skipped.
    * ``o_sel`` gets the chunk's one-hot selector with the chunk's first
      token, straight through when ``o_sel`` is ready, otherwise into a
      one-token skid register; so a chunk waits for ``o_sel`` only while the
      previous chunk's selector is still held (a consumer may take the
      selector after the chunk, as Reassemble does).
    * ``done`` tokens of the inputs are taken whenever they appear; once every
      input is done (and the held selector has gone), ``done`` goes out on
      ``o`` and ``o_sel``. An input that has ended is not read again until
      then (its next tokens belong to the next program).

    Latency 0 for chunk tokens and their selector (1 for the final ``done``),
    II 1 (one token per cycle; a new chunk may start in the cycle after the
    previous one closed). Combinational: payload and valid from the inputs
    through the arbiter to ``o``/``o_sel``; input ready from
    ``o.ready``/``o_sel.ready``. Neither output's valid depends on any ready.
    Whether ``rank`` is 0 (stops are not chunk tokens then) is a flag decoded from
    the configuration write itself (:meth:`~step_hdl.units.config.ConfigRegs.decoded`), so the arbiter
    starts at a flip-flop and a token may still follow the last write by a cycle.
    """

    kind = "EagerMerge"

    def formats(self):
        t = self.tile_fmt()
        out = {f"i{k}": (False, t) for k in range(self.n)}
        out.update({"o": (True, t), "o_sel": (True, self.sel_fmt())})
        return out

    def registers(self):
        return [self.rank_reg()]

    def configure(self, op_params, in_types):
        self._check_n(op_params)
        p = self._check_rank(op_params)
        for k in range(self.n):
            st = in_types.get(f"in{k}")
            self._check_stream(f"in{k}", st, self.tile_fmt())
            if st is not None and p > st.rank:
                raise ParamError(f"EagerMerge: rank {p} > the rank {st.rank} of input 'in{k}'")
        return self.config_image(rank=p)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        n, o, os_ = self.n, self.o, self.o_sel
        fmt = self.tile_fmt()
        ins = [getattr(self, f"i{k}") for k in range(n)]
        p = self.regs["rank"]

        def is_zero(v):
            return v == 0
        p_zero = self.regs.decoded(m, self.cfg, "rank", is_zero, init=1)

        locked = Signal()           # an input is chosen (chunk in progress, or its first token waiting)
        cur = Signal(range(max(n, 2)))
        mid = Signal()              # past the chunk's first token
        taken_o = Signal()          # o took the current token (the input waits for o_sel)
        taken_s = Signal()          # the current first token's selector (or the done) was handed to o_sel
        held = Signal()             # skid register: a selector o_sel has not taken yet
        held_sel = Signal(n)
        fin = Signal(n)             # inputs that have ended
        all_fin = fin == (1 << n) - 1

        # chunk tokens: data, or (p >= 1) stops; an input that has ended waits for the next program
        cand = [ins[k].valid & ~ins[k].payload.done & (~p_zero | (ins[k].payload.stop == 0)) & ~fin[k]
                for k in range(n)]
        low, any_cand = _lowest(m, cand, "arb")
        idx = Signal.like(cur)
        m.d.comb += idx.eq(Mux(locked, cur, low))
        hv, head = _select(m, idx, ins, fmt, "in")
        head_ok = hv & ~head.done & (~p_zero | (head.stop == 0))
        have = Mux(locked, head_ok, any_cand)
        first = ~mid
        closing = _closing(head, p, p_zero)
        onehot = Signal(n)
        m.d.comb += onehot.eq(Const(1, n) << idx)

        fin_send = all_fin & ~locked        # every input has ended: send done
        offer = have & first & ~taken_s     # this chunk's selector, not yet handed to o_sel
        m.d.comb += [
            o.valid.eq((have | fin_send) & ~taken_o),
            o.payload.payload.eq(Mux(fin_send | (head.stop != 0), 0, head.payload)),
            o.payload.stop.eq(Mux(fin_send, 0, _chunk_stop(head, p, p_zero))),
            o.payload.done.eq(fin_send),
            os_.valid.eq(held | offer | (fin_send & ~taken_s)),
            os_.payload.payload.eq(Mux(held, held_sel, Mux(offer, onehot, 0))),
            os_.payload.stop.eq(0),
            os_.payload.done.eq(~held & fin_send),
        ]
        handed = ~held | os_.ready          # o_sel takes (or the skid register holds) a new selector
        done_o = taken_o | o.ready
        chunk_go = have & done_o & (~first | taken_s | handed)
        done_s = taken_s | (~held & os_.ready)
        done_go = fin_send & done_o & done_s

        for k in range(n):
            h = ins[k].payload
            skip = ins[k].valid & ~h.done & p_zero & (h.stop != 0) & ~fin[k]
            end = ins[k].valid & h.done & ~fin[k]
            m.d.comb += ins[k].ready.eq((chunk_go & (idx == k)) | skip | end)
        m.d.sync += fin.eq(fin | Cat(*[ins[k].valid & ins[k].payload.done for k in range(n)]))

        # the skid register of o_sel
        with m.If(offer & ~held & ~os_.ready):
            m.d.sync += [held.eq(1), held_sel.eq(onehot)]
        with m.Elif(offer & held & os_.ready):
            m.d.sync += held_sel.eq(onehot)
        with m.Elif(held & os_.ready):
            m.d.sync += held.eq(0)

        with m.If(chunk_go):
            m.d.sync += [taken_o.eq(0), taken_s.eq(0)]
            with m.If(closing):
                m.d.sync += [locked.eq(0), mid.eq(0)]
            with m.Else():
                m.d.sync += [locked.eq(1), cur.eq(idx), mid.eq(1)]
        with m.Elif(have):
            m.d.sync += [locked.eq(1), cur.eq(idx), taken_o.eq(done_o)]
            with m.If(offer & handed):
                m.d.sync += taken_s.eq(1)
        with m.Elif(done_go):
            m.d.sync += [fin.eq(0), taken_o.eq(0), taken_s.eq(0)]
        with m.Elif(fin_send):
            m.d.sync += [taken_o.eq(done_o), taken_s.eq(done_s)]
        return m


__all__ = ["RoutingParams", "Partition", "Reassemble", "EagerMerge", "MAX_N"]


# ----------------------------------------------------------------------------- selector <-> index

@dataclass(frozen=True)
class SelIndexParams(Params):
    """A :class:`SelIndex` or :class:`KeepIfZero`: selectors of ``n`` choices (``n = 1`` for
    KeepIfZero's), tokens up to ``max_rank``."""

    n: int = 2
    max_rank: int = 3

    def validate(self):
        positive(self.owner, "n", self.n)
        positive(self.owner, "max_rank", self.max_rank, minimum=0)


class _IndexFunction(StepUnit):
    """A Map of one selector/index function: one output register; stops and done pass through.

    Latency 1, II 1. Combinational: ``i0.ready`` from ``o.ready`` and the register's state;
    ``o.valid`` and the payload are registers.
    """

    kind = "Map"
    latency = 1
    function = ""

    def __init__(self, params: SelIndexParams):
        if not isinstance(params, SelIndexParams):
            not_elaborated(self)
            raise ParamError(f"{type(self).__name__}: parameters must be SelIndexParams, got {params!r}")
        super().__init__(params)

    def configure(self, op_params, in_types):
        f = op_params.get("fn")
        if getattr(f, "name", f) != self.function:
            raise ParamError(f"{type(self).__name__}: runs the function {self.function}, the node uses {f!r}")
        return []

    def value(self, payload):
        """The output payload (an Amaranth value) of an input payload."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)            # (no registers: takes and ignores configuration writes)
        i, o = self.i0, self.o
        # one output register, refilled whenever it is empty or being taken
        m.d.comb += i.ready.eq(o.ready | ~o.valid)
        with m.If(i.ready):
            m.d.sync += [o.valid.eq(i.valid), o.payload.stop.eq(i.payload.stop),
                         o.payload.done.eq(i.payload.done), o.payload.payload.eq(self.value(i.payload.payload))]
        return m


class SelIndex(_IndexFunction):
    """The function ``sel_index`` as a unit: each selector becomes the ``[1, 1]`` int32 index of its
    lowest set bit (-1 if none). Timing as :class:`_IndexFunction` (latency 1, II 1)."""

    function = "sel_index"

    def formats(self):
        from .offchip import INDEX
        p = self.params
        return {"i0": (False, TokenFormat(SelectorFormat(p.n), p.max_rank)),     # Map's port names
                "o": (True, TokenFormat(INDEX, p.max_rank))}

    def value(self, mask):
        index = Const(-1, 32)
        for k in reversed(range(self.params.n)):       # the lowest set bit wins
            index = Mux(mask[k], k, index)
        return index


class KeepIfZero(_IndexFunction):
    """The function ``keep_if_zero`` as a unit: each ``[1, 1]`` int32 flag becomes a 1-way selector, set
    where the flag is 0 (a Partition with it drops padded elements). Timing as :class:`_IndexFunction`
    (latency 1, II 1)."""

    function = "keep_if_zero"

    def formats(self):
        from .offchip import INDEX
        p = self.params
        return {"i0": (False, TokenFormat(INDEX, p.max_rank)),
                "o": (True, TokenFormat(SelectorFormat(1), p.max_rank))}

    def value(self, flag):
        return flag.as_value() == 0


# --------------------------------------------------------------------------- Broadcast

@dataclass(frozen=True)
class BroadcastParams(Params):
    """A fan-out of ``n`` copies of one stream: tiles (``rows``, ``cols``, ``dtype``) or ``selector``-wide
    selectors, with ``max_rank``."""

    n: int = 2
    max_rank: int = 3
    rows: int | None = None
    cols: int | None = None
    dtype: str | None = None
    selector: int | None = None

    def validate(self):
        positive(self.owner, "n", self.n)
        positive(self.owner, "max_rank", self.max_rank, minimum=0)
        if (self.selector is None) == (self.rows is None):
            raise ParamError(f"{self.owner}: give a tile (rows, cols, dtype) or a selector width, not both")
        if self.selector is not None:
            positive(self.owner, "selector", self.selector)
        else:
            positive(self.owner, "rows", self.rows)
            positive(self.owner, "cols", self.cols)

    def token_format(self) -> TokenFormat:
        payload = SelectorFormat(self.selector) if self.selector is not None else \
            tile_format(self.dtype, self.rows, self.cols)
        return TokenFormat(payload, self.max_rank)

    def to_json(self) -> dict:
        return {k: v for k, v in super().to_json().items() if v is not None}


class BroadcastUnit(StepUnit):
    """The language's Broadcast: ``i`` copied to ``o0 .. o{n-1}``, each output taking the token when it is
    ready (:class:`~step_hdl.units.stream.Broadcast`). No registers (configuration writes are taken and
    ignored).

    Latency 0, II 1 when every output is ready. Combinational: ``o_k.valid`` from ``i.valid`` and a register,
    ``i.ready`` from the ``o_k.ready`` (never the other way round).
    """

    kind = "Broadcast"

    def __init__(self, params: BroadcastParams):
        if not isinstance(params, BroadcastParams):
            reject(self, f"BroadcastUnit: parameters must be BroadcastParams, got {params!r}")
        super().__init__(params)

    def formats(self):
        fmt = self.params.token_format()
        return {"i": (False, fmt), **{f"o{k}": (True, fmt) for k in range(self.params.n)}}

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        m.submodules.fork = fork = Broadcast(self.fmt("i").layout, self.params.n)
        m.d.comb += [fork.i.valid.eq(self.i.valid), fork.i.payload.eq(self.i.payload), self.i.ready.eq(fork.i.ready)]
        for k in range(self.params.n):
            o, f = getattr(self, f"o{k}"), getattr(fork, f"o{k}")
            m.d.comb += [o.valid.eq(f.valid), o.payload.eq(f.payload), f.ready.eq(o.ready)]
        return m
