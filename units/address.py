"""The multi-dimensional affine walk shared by the off-chip load and the on-chip buffer's reader.

A walk iterates ``D`` dimensions, innermost first: dimension ``j`` counts
``counts[j]`` steps of ``strides[j]``; only the lowest ``n`` dimensions are
used (``n`` a configuration register). Its offset is ``acc[0]`` (each
dimension keeps its running offset, so a carry needs no multiplier). After the
last step of dimension ``j`` the walk closes level ``j + 1``: the unit sends
the stop ``S_close`` after the element, one event later (``phase`` 1), or, for
the walk's final close, with the element (``fold`` in :meth:`AffineWalk.advance`). A
dimension with count 0 makes the block empty above it (``has_zero``, ``lo``).
A walk may ``merge`` its innermost levels (a Flatten of its lowest dimensions
fused into the unit): closes of level ``merge`` or below are not sent, so the
walk takes no event for them; the unit renumbers the levels it sends above
them down by ``merge``.

Everything here is combinational from the registers and the walk's own
state, except :meth:`AffineWalk.advance` and :meth:`AffineWalk.reset`, which
the unit calls where an element or a closing stop is accepted.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal


def _less(k: int):
    """The decoding of a count register into ``count - k``, a bit wider than the count (negative below
    ``k``), named ``less{k}`` (the register's name ends so)."""
    def less(count):
        return Cat(count, Const(0, 1)).as_signed() - k
    less.__name__ = f"less{k}"
    return less


def _is_one(count):
    return count == 1


def count_less(m, regs, cfg, names: list) -> list:
    """:class:`AffineWalk`'s ``count_less`` for count registers ``names`` (innermost first) of a unit's
    :class:`~step_hdl.units.config.ConfigRegs` ``regs`` written through ``cfg``: ``count - 1`` and
    ``count - 2`` of each, and whether it is 1, registers decoded from its writes."""
    out = []
    for k in (1, 2):
        row = []
        for name in names:
            r = regs.regs[regs.index[name]]
            row.append(regs.decoded(m, cfg, name, _less(k), (r.init - k) & ((1 << (r.width + 1)) - 1), r.width + 1))
        out.append(row)
    out.append([regs.decoded(m, cfg, name, _is_one, int(regs.regs[regs.index[name]].init == 1)) for name in names])
    return out


class AffineWalk:
    """State and next-step logic of one affine walk (see the module docstring).

    Parameters
    ----------
    m : Module
        Where the combinational logic goes.
    counts, strides : list of Value
        Per dimension, innermost first (``D = len(counts)``).
    n : Value
        Dimensions in use.
    top : Value
        The level closed after the walk's last element (the highest stop it sends).
    idx_shape, acc_shape : Shape
        Of the per-dimension step counters and running offsets.
    name : str
        Prefix of the signal names.
    merge : Value, optional
        Closes of this level or below are not sent (``close_needed`` is 0 for them); no dimension may
        be empty when it is set (the unit checks that its counts are not 0).
    static_counts : bool
        ``counts`` are configuration registers (a change reaches the walk a cycle later, before it
        starts): whether each step counter is at its last step is then a flag registered with the
        counter, keeping the comparisons off the next-step logic. False (counts that change while the
        unit runs, such as a buffer's sizes): the comparisons are combinational.
    count_less : three lists of Value, optional
        With ``static_counts``: per dimension ``counts[j] - 1`` and ``counts[j] - 2``, one bit wider than
        a count (negative below 0), and ``counts[j] == 1``, registers decoded from the counts' writes
        (``ConfigRegs.decoded``), so the flags compare the counter with a register instead of adding to
        it first. The step's decisions (:attr:`complete`, :attr:`inc_oh`, :attr:`close_needed`) are then
        registers as well, formed from the flags' next values; they follow a write of ``n`` or a count a
        cycle after the expressions do (a unit starts its walk after the writes), and :attr:`checks` pairs
        each with the expression it stands for (for the tests).
    """

    _HOLD, _INC, _ZERO = 0, 1, 2

    def __init__(self, m, counts, strides, n, top, idx_shape, acc_shape, name: str, merge=None,
                 static_counts: bool = False, count_less=None):
        D = len(counts)
        self.D, self.strides = D, strides
        self.idx = [Signal(idx_shape, name=f"{name}idx{j}") for j in range(D)]
        # what each step counter does this cycle (step() and reset() say: hold, count, restart) and, with
        # static counts, whether it is then at its dimension's last step, registered beside it: each of the
        # three outcomes is compared from registers, the handshake only selects one
        self._op = [Signal(range(3), name=f"{name}idx_op{j}") for j in range(D)]
        at_last = [Signal(name=f"{name}at_last{j}") for j in range(D)]
        for j in range(D):
            idx, op = self.idx[j], self._op[j]
            m.d.sync += idx.eq(Mux(op == self._INC, idx + 1, Mux(op == self._ZERO, 0, idx)))
            if static_counts and count_less is not None:
                less1, less2, one = count_less[0][j], count_less[1][j], count_less[2][j]
                m.d.sync += at_last[j].eq(Mux(op == self._INC, idx == less2, Mux(op == self._ZERO, one, idx == less1)))
            elif static_counts:
                m.d.sync += at_last[j].eq(Mux(op == self._INC, idx + 2 == counts[j],
                                              Mux(op == self._ZERO, counts[j] == 1, idx + 1 == counts[j])))
            else:
                m.d.comb += at_last[j].eq(idx == counts[j] - 1)
        self.acc = [Signal(acc_shape, name=f"{name}acc{j}") for j in range(D)]
        # static (per program) structure: the lowest iterated dim is above the outermost empty one
        # (registered with static counts, like the flags above)
        dom = m.d.sync if static_counts else m.d.comb
        zero = Signal(D, name=f"{name}zero")
        dom += zero.eq(Cat(*((n > j) & (counts[j] == 0) for j in range(D))))
        self.has_zero = zero.any()
        self.lo = Signal(range(D + 1), name=f"{name}lo")
        lo = 0
        for j in range(D):
            lo = Mux((n > j) & (counts[j] == 0), j + 1, lo)
        dom += self.lo.eq(lo)
        # where the walk is
        def decisions(at):
            last = [(self.lo > j) | (n <= j) | at[j] for j in range(D)]
            complete = Cat(*last).all()
            inc_oh = [~last[j] & (Cat(*last[:j]).all() if j else Const(1)) for j in range(D)]
            # close > lo (and > merge) for close = top, or the stepping dimension j: per j a comparison of
            # registers with a constant, selected by the one-hot (no encoder in front of a comparison)
            above = (lambda v: (v > self.lo) & (v > merge)) if merge is not None else (lambda v: v > self.lo)
            needed = Mux(complete, above(top), Cat(*(inc_oh[j] & above(Const(j)) for j in range(D))).any())
            return complete, inc_oh, needed
        self.complete, self.inc_oh, self.close_needed = decisions(at_last)
        self.checks = []
        self._stepping = Signal(name=f"{name}stepping")     # step() / reset() in this cycle
        self._resetting = Signal(name=f"{name}resetting")
        if static_counts and count_less is not None:
            # with the counts' decoded registers (pipelined) the step's decisions are registers too: their
            # next values for each way the walk can go (hold, step, back to the start) formed from registers,
            # the handshake selecting one, so what reads them (the unit's event logic, the walk's enables)
            # starts at flip-flops. ``checks``: each register beside the expression it stands for
            regs = [Signal(name=f"{name}complete"), Signal(D, name=f"{name}inc_oh"),
                    Signal(name=f"{name}close_needed")]
            self.checks = [(regs[0], self.complete), (regs[1], Cat(*self.inc_oh)), (regs[2], self.close_needed)]
            below = [Cat(*regs[1][j + 1:]).any() if j + 1 < D else Const(0) for j in range(D)]
            ways = []
            for at in (count_less[2],
                       [Mux(below[j], count_less[2][j], Mux(regs[1][j], self.idx[j] == count_less[1][j],
                                                                 at_last[j])) for j in range(D)],
                       at_last):
                complete, inc_oh, needed = decisions(at)
                ways.append(Cat(complete, *inc_oh, needed))
            m.d.sync += Cat(*regs).eq(Mux(self._resetting, ways[0], Mux(self._stepping, ways[1], ways[2])))
            self.complete, self.inc_oh, self.close_needed = regs[0], list(regs[1]), regs[2]
        inc = Signal(range(D + 1), name=f"{name}inc")
        for j in range(D):
            with m.If(self.inc_oh[j]):
                m.d.comb += inc.eq(j)
        self.close = Signal(range(D + 1), name=f"{name}close")
        m.d.comb += self.close.eq(Mux(self.complete, top, inc))
        self._m, self._name, self._acc_shape = m, name, acc_shape
        self._restart = None    # (below()) the offset reset() goes back to this cycle
        self._resets = 0
        # 0: an element, 1: the closing stop after it (level ``pend``; ``pend_final``: it ends the walk)
        self.phase = Signal(name=f"{name}phase")
        self.pend = Signal(range(D + 1), name=f"{name}pend")
        self.pend_final = Signal(name=f"{name}pend_final")

    def step(self, m):
        """Sync: the next element (the lowest dimension not at its last step counts, the ones below restart
        at the new offset)."""
        m.d.comb += self._stepping.eq(1)
        for j in range(self.D):
            with m.If(self.inc_oh[j]):
                nxt = self.acc[j] + self.strides[j]
                m.d.comb += self._op[j].eq(self._INC)
                m.d.sync += self.acc[j].eq(nxt)
                for i in range(j):
                    m.d.comb += self._op[i].eq(self._ZERO)
                    m.d.sync += self.acc[i].eq(nxt)

    def advance(self, m, finish, fold=None):
        """Sync updates when the walk's current event (an element, or in phase 1 its closing stop) is accepted;
        ``finish()`` runs when that event ends the walk. ``fold`` (a Value, optional): the last element
        carries the walk's final close itself (the unit sends it as the element's ``tail``), so no phase 1
        follows it."""
        fold = self.complete & fold if fold is not None else Const(0)
        with m.If(self.phase == 0):
            with m.If(~self.complete):
                self.step(m)
            with m.If(self.close_needed & ~fold):
                m.d.sync += [self.phase.eq(1), self.pend.eq(self.close), self.pend_final.eq(self.complete)]
            with m.Elif(self.complete):
                finish()
        with m.Else():
            m.d.sync += self.phase.eq(0)
            with m.If(self.pend_final):
                finish()

    def reset(self, m, value=0):
        """Sync: back to the first element, at offset ``value``."""
        m.d.comb += self._resetting.eq(1)
        m.d.sync += [a.eq(value) for a in self.acc]
        m.d.comb += [op.eq(self._ZERO) for op in self._op]
        self._resets += 1
        if self._restart is not None:
            m.d.comb += self._restart.eq(value)

    def below(self, limit, inc, clear) -> Signal:
        """A register that is ``acc[0] < limit`` in every cycle, for a register ``limit`` that this cycle
        counts up (``inc``), goes back to 0 (``clear``) or holds. Each way the walk can go (hold, a step of
        dimension ``j``, back to the start) has its difference with ``limit`` formed from registers, and
        each of its three outcomes (``< limit + 1``, ``< 0``, ``< limit``) decoded from it; what the walk
        and the limit do this cycle only select one. So neither the handshake that steps the walk nor the
        one that moves the limit is on a path into a comparison."""
        m, D = self._m, self.D
        if self._resets:
            raise ValueError("AffineWalk.below must be called before the walk's first reset(): it follows "
                             "the offsets reset() goes back to")
        self._restart = Signal(self._acc_shape, name=f"{self._name}restart")
        out = Signal(name=f"{self._name}below")
        nxt = Signal(name=f"{self._name}below_next")

        def outcome(x):
            diff = x - limit            # signed, a bit wider than both: no overflow
            return Mux(clear, x < 0, Mux(inc, diff <= 0, diff < 0))
        m.d.comb += nxt.eq(outcome(self.acc[0]))
        with m.If(self._op[0] == self._ZERO):               # back to the start (or a step above 0: below)
            m.d.comb += nxt.eq(outcome(self._restart))
        for j in range(D):
            with m.If(self._op[j] == self._INC):
                m.d.comb += nxt.eq(outcome(self.acc[j] + self.strides[j]))
        m.d.sync += out.eq(nxt)
        return out
