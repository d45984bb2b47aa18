"""The output-stationary matmul unit: ``Map(matmul) -> Reshape(0, k) -> Accum(add, rank 1)`` as one unit.

A lowered matmul multiplies one pair of physical tiles per cycle and sums
each output tile's ``k`` products. As three units (:class:`~step_hdl.units.compute.Map`,
:class:`~step_hdl.units.shape.Reshape`, :class:`~step_hdl.units.compute.Accum`)
the reduction is closed by a stop token after every ``k`` products, and a stop
is a transfer of its own: the multipliers idle one cycle in ``k + 1``. Here
the unit keeps the running sum in its output register and counts the products itself
(register ``k``), so its operand streams need no stop between output tiles
(the on-chip buffers that re-read the operands fuse the matching Flatten,
:class:`~step_hdl.units.onchip.OnChipBuffer` register ``merge``) and it
multiplies on every cycle an operand pair is there.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal

from step_hdl.types import Tile

from .compute import Map, MapParams, token_format
from .config import Reg
from .functions import TileVal, matmul_dims, update_elems
from .layout import has_short, tile_elems
from .params import ParamError, positive

__all__ = ["MatMulParams", "MatMul"]


@dataclass(frozen=True)
class MatMulParams(MapParams):
    """Structural parameters of a :class:`MatMul` unit: those of a Map built for ``matmul`` alone (operand
    tiles, ``matmul_rows`` folding, ``matmul_transpose_a``; float operands with ``matmul_groups``) and
    ``k_bits``, the width of the products-per-output register."""

    fns: tuple = ("matmul",)
    k_bits: int = 16

    def validate(self):
        if self.fns != ("matmul",):
            raise ParamError(f"{self.owner}: fns must be ('matmul',), got {self.fns!r}")
        positive(self.owner, "k_bits", self.k_bits)
        super().validate()
        if not self.in0_tile.dtype.is_int and not self.matmul_groups:
            raise ParamError(f"{self.owner}: a float MatMul sums its products' group sums (matmul_groups), "
                             f"got {self.dtype} operands without")

    @property
    def stages(self) -> int:
        """The Map's stages and, when it has any, one more: the products' tile sums are registered before
        they join the running sum (the adder tree and the sum's adder in one cycle were the critical path)."""
        s = super().stages
        return s + 1 if s else 0

    @property
    def sum_tile(self) -> Tile:
        """The running sum and output tile: the products' tile (int32), or for float operands the fp32 sum of
        the ``G`` group sums per element that each pair gives (``[M, N]`` of ``[M, N · G]``)."""
        out = self.out_tile
        if not self.matmul_groups:
            return out
        mode = self.hw("matmul").build_modes(self.in0_tile, self.in1_tile)[0]
        rows, _, cols = matmul_dims(self.in0_tile, self.in1_tile, *mode)
        return Tile(out.dtype, rows, cols)


class MatMul(Map):
    """``o`` = the sum of every ``k`` consecutive products ``i0 @ i1`` (int32, wrapping), one tile per ``k``.

    Token for token what ``Accum(Reshape(Map([i0, i1], matmul), 0, k), add, zeros, rank=1)`` gives: a data
    pair is multiplied (the :class:`~step_hdl.units.compute.Map` datapath, folding included) and added to
    the running sum; the ``k``-th leaves as an output tile with ``i0``'s valid rows and the sum restarts.
    A stop ``S_j`` or done on the inputs (taken from both, in lockstep) passes as it is: after a Flatten of
    the ``k`` dimension into the one above, the Reshape's new level and the Accum's reduction cancel. A stop
    that closes an empty run (no pair since the previous stop or the stream's start) first sends a zero
    tile, as the Accum does for the empty chunk the Reshape then closes (a cycle more). The
    mapper runs it where a lowered graph has that chain; the inputs' runs must be multiples of ``k`` (the
    interpreter's Reshape checks that; a stop inside a run restarts the sum, the hardware reports nothing).

    Registers: those of the Map (``fn``, ``transpose``, ``transpose_a``) and ``k`` (products per output,
    >= 1).

    Latency ``1 + params.stages`` from the ``k``-th pair to its output tile: integer operands pass the
    matmul's four pipeline stages (operands, products, the adder tree's first half, tile sums;
    ``units.pipeline``) before the sum (``M/g`` for a folded matmul, which has no stages). II 1 per input
    token (pair or stop) while the output is taken: the running sum is the output register's tile, so every
    token waits while a finished tile there is not taken (no second bank of ``M·N`` int32 registers), and
    the pipeline moves while its last stage is empty or taken. Combinational:
    ``i0.ready``/``i1.ready`` from the other input's valid and ``o.ready`` (through the stages' advance,
    itself one gate from two registers and ``o.ready``; unpipelined also ``i0``'s stop level and the
    product counter); data and valid are registered.
    """

    kind = "MatMul"
    params_cls = MatMulParams

    @classmethod
    def latency_of(cls, node, pipeline: bool = False) -> int:
        base = super().latency_of(node, pipeline)
        return base + 1 if base > 1 else base

    def formats(self):
        out = super().formats()
        out["o"] = (True, token_format(self.params.sum_tile, self.params.max_rank))
        return out

    def registers(self):
        return super().registers() + [Reg("k", self.params.k_bits, 1, doc="products summed per output tile")]

    def configure(self, op_params, in_types):
        """``op_params``: the Map node's ``fn`` and ``n``, and ``k``, the Reshape's chunk."""
        k = op_params.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < 1 << self.params.k_bits:
            raise ParamError(f"MatMul: k (products per output tile) must be an integer in 1..."
                             f"{(1 << self.params.k_bits) - 1} (k_bits {self.params.k_bits}), got {k!r}")
        values = self._config_values(op_params, in_types)
        return self.config_image(k=k, **values)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        self.regs.elaborate(m, self.cfg)
        i0, i1, o = self.i0, self.i1, self.o
        out = p.sum_tile
        if p.stages:
            # the products' pipeline (``Map._front``) in front of the sum: its last stage is the token
            advance = Signal(name="advance")
            res, tok_valid, tok_stop, tok_done, is_data, before = self._front(m, advance, platform,
                                                                              before_last=True)
            phase = None
        else:
            res, _, phase = self._result(m)
            tok_valid, tok_stop, tok_done = i0.valid & i1.valid, i0.payload.stop, i0.payload.done
            is_data = ~tok_done & (tok_stop == 0)

        # the products still to come before the k-th of this output tile (counting down from k - 1) and,
        # registered beside it, whether one is left: the k-th pair's flag (``last_pair``) then takes that
        # flag or, when the tile restarts, whether k is 1, so no comparison is in front of it; k - 1 and
        # whether k is 1 or 2 are registers decoded from k's write
        left = Signal(p.k_bits, name="products_left")
        one_left = Signal(name="one_left")
        k_less1, k_one, k_two = (v[0] for v in self.regs.count_flags(m, self.cfg, ["k"]))
        # the running sum is the output register's tile: ``fresh`` (no product summed yet in this tile) says
        # it holds a finished tile or nothing; it feeds every sum's adder
        fresh = Signal(init=1, name="fresh")
        prev = TileVal.of(out, o.payload.payload)
        zero_or_prev = TileVal(out, [Mux(fresh, 0, e) for e in prev.elems])
        total = Signal(o.payload.payload.shape(), name="total")
        update = "add_groups" if p.matmul_groups else "add"
        m.d.comb += [tile_elems(total)[j].eq(v)
                     for j, v in enumerate(update_elems(m, update, zero_or_prev, TileVal.of(p.out_tile, res)))]
        if has_short(total):
            m.d.comb += total.short.eq(res.short)

        run_open = Signal()             # a pair was taken since the last stop (or the start)
        empty = ~is_data & ~tok_done & ~run_open     # a stop closing an empty run: a zero tile first
        # registered: the next pair is the k-th (one_left or k == 1), kept off the handshake's logic depth
        last = Signal(name="last_pair")
        # every token writes the output register (a pair its running sum), so it waits for a finished tile
        # there to be taken
        free = ~o.valid | o.ready
        if phase is not None:
            # a folded matmul holds its operands for its passes; the sum takes the finished product
            folding = is_data & (phase != p.matmul_passes - 1)
            with m.If(folding & i0.valid & i1.valid):
                m.d.sync += phase.eq(phase + 1)
            free = free & ~folding
        step = free & tok_valid
        fire = step & ~empty
        if not p.stages:
            m.d.comb += [i0.ready.eq(free & i1.valid & ~empty), i1.ready.eq(free & i0.valid & ~empty)]
        if phase is not None:
            with m.If(fire):
                m.d.sync += phase.eq(0)
        # the next values of the output's valid, run_open and last_pair (the pipelined unit's advance is
        # formed from the first two, below)
        valid_next, open_next, last_next = Signal(), Signal(), Signal()
        m.d.comb += [valid_next.eq(o.valid & ~o.ready), open_next.eq(run_open), last_next.eq(last)]
        m.d.sync += [o.valid.eq(valid_next), run_open.eq(open_next), last.eq(last_next)]
        with m.If(step & empty):
            m.d.comb += [valid_next.eq(1), open_next.eq(1)]
            m.d.sync += [o.payload.stop.eq(0), o.payload.done.eq(0), o.payload.payload.eq(0)]
        with m.If(fire):
            m.d.sync += o.payload.payload.eq(Mux(is_data, total.as_value(), 0))
            with m.If(is_data & ~last):
                m.d.sync += [left.eq(left - 1), one_left.eq(left == 2), fresh.eq(0)]
                m.d.comb += last_next.eq(one_left)
            with m.Else():
                m.d.comb += [last_next.eq(k_one), valid_next.eq(1)]
                m.d.sync += [left.eq(k_less1), one_left.eq(k_two), fresh.eq(1), o.payload.stop.eq(tok_stop),
                             o.payload.done.eq(tok_done)]
            m.d.comb += open_next.eq(is_data)
        with m.Elif(fresh):
            # (k is programmed before the operands come)
            m.d.comb += last_next.eq(k_one)
            m.d.sync += [left.eq(k_less1), one_left.eq(k_two)]
        if p.stages:
            self._advance(m, advance, o, (tok_valid, tok_done, is_data), before, (valid_next, open_next))
            # (for the tests: the advance and the expression it stands for, equal in every cycle)
            self.advance_check = (advance, ~tok_valid | (free & ~empty))
        return m

    def _advance(self, m, advance, o, now, before, nxt):
        """The pipeline's advance, ``~tok_valid | (free & ~empty)`` of the last stage's token, as
        ``adv_free | (o.ready & adv_data)`` of two registers formed from the next values of what it reads:
        it loads every stage's registers and the multiplier blocks' clock enables, so its fanout is the
        unit's; from two flip-flops and the output's ready it is one level of logic in front of it (three
        from the token's registers)."""
        tok_valid, tok_done, is_data = now
        b_valid, _b_stop, b_done, b_data = before
        valid_next, open_next = nxt
        free_reg = Signal(init=1, name="adv_free")     # ~tok_valid | (~empty & ~o.valid)
        data_reg = Signal(init=0, name="adv_data")     # ~empty
        m.d.comb += advance.eq(free_reg | (o.ready & data_reg))
        v_n, d_n, data_n = (Mux(advance, b, t) for b, t in ((b_valid, tok_valid), (b_done, tok_done),
                                                             (b_data, is_data)))
        not_empty_n = data_n | d_n | open_next
        m.d.sync += [free_reg.eq(~v_n | (not_empty_n & ~valid_next)), data_reg.eq(not_empty_n)]
