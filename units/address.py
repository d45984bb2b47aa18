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

import functools
import operator

from amaranth.hdl import Cat, Const, Mux, Signal


def _stepping_above(inc_oh) -> list:
    """Per dimension, whether a dimension above it steps (its bits of the step's one-hot ``inc_oh`` above it):
    then it restarts."""
    return [Cat(*inc_oh[j + 1:]).any() if j + 1 < len(inc_oh) else Const(0) for j in range(len(inc_oh))]


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
        starts): each step counter then counts the steps left down to 0, with whether it is at its last
        step and at the one before as flags registered beside it, keeping the comparisons off the
        next-step logic. False (counts that change while the unit runs, such as a buffer's sizes): the
        counters count up and compare with ``counts[j] - 1`` combinationally.
    static_strides : bool
        ``strides`` do not change between a :meth:`reset` and the walk's end (the unit resets the walk
        after a write of a stride): each dimension's next offset is then a register beside its offset.
    count_flags : three lists of Value, optional
        With ``static_counts``: per dimension ``counts[j] - 1``, one bit wider than a count (negative below
        0), ``counts[j] == 1`` and ``counts[j] == 2``, registers decoded from the counts' writes
        (``ConfigRegs.decoded``; without them the walk forms them from ``counts``). The step's decisions
        (:attr:`complete`, :attr:`inc_oh`, :attr:`close_needed`) are then registers as well, formed from
        the flags' next values; they follow a write of ``n`` or a count a cycle after the expressions do
        (a unit starts its walk after the writes). :attr:`checks` pairs each register of the walk with
        the expression it stands for (for the tests).
    """

    _HOLD, _INC, _ZERO = 0, 1, 2

    def __init__(self, m, counts, strides, n, top, idx_shape, acc_shape, name: str, merge=None,
                 static_counts: bool = False, count_flags=None, static_strides: bool = False):
        D = len(counts)
        self.D, self.strides = D, strides
        # each register beside the expression it stands for (for the tests)
        self.checks = []
        # what each step counter does this cycle (step() and reset() say: hold, count, restart)
        self._op = [Signal(range(3), name=f"{name}idx_op{j}") for j in range(D)]
        at_last = [Signal(name=f"{name}at_last{j}") for j in range(D)]
        at_prev = [Signal(name=f"{name}at_prev{j}") for j in range(D)]
        if static_counts:
            # each counter counts the steps left down to 0, whether it is at its last step and at the one
            # before registered beside it: a step takes at_prev into at_last and compares the count with a
            # constant for at_prev, a restart takes count - 1 and whether the count is 1 or 2; what reads
            # the flags starts at flip-flops, and the handshake only selects an outcome
            less1, one, two = count_flags if count_flags is not None else (
                [c - 1 for c in counts], [c == 1 for c in counts], [c == 2 for c in counts])
            for j in range(D):
                rem, op = Signal(idx_shape, name=f"{name}rem{j}"), self._op[j]
                inc, zero = op == self._INC, op == self._ZERO
                m.d.sync += [rem.eq(Mux(inc, rem - 1, Mux(zero, less1[j], rem))),
                             at_last[j].eq(Mux(inc, at_prev[j], Mux(zero, one[j], at_last[j]))),
                             at_prev[j].eq(Mux(inc, rem == 2, Mux(zero, two[j], at_prev[j])))]
                self.checks += [(at_last[j], rem == 0), (at_prev[j], rem == 1)]
        else:
            for j in range(D):
                idx, op = Signal(idx_shape, name=f"{name}idx{j}"), self._op[j]
                m.d.sync += idx.eq(Mux(op == self._INC, idx + 1, Mux(op == self._ZERO, 0, idx)))
                m.d.comb += at_last[j].eq(idx == counts[j] - 1)
        self.acc = [Signal(acc_shape, name=f"{name}acc{j}") for j in range(D)]
        # each offset's next step: acc + stride, with static strides a register loaded with acc's new value
        # plus the stride wherever acc is loaded (step(), reset()), so a step's offset is not an adder's sum
        self._next = [Signal(acc_shape, name=f"{name}next{j}") for j in range(D)]
        self._static_strides = static_strides
        if not static_strides:
            m.d.comb += [nxt.eq(acc + stride) for nxt, acc, stride in zip(self._next, self.acc, strides)]
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
        # the rest of the structure as flags (registered with static counts, from the registers lo is formed
        # from, so they are as early as lo): per dimension whether it never steps (at or above n, or at or
        # below the outermost empty one), whether a close of its level is sent (above lo and merge), and
        # whether the close of level top is
        lo_gt = [Cat(*((n > k) & (counts[k] == 0) for k in range(j, D))).any() for j in range(D)]
        above = (lambda v: (v > lo) & (v > merge)) if merge is not None else (lambda v: v > lo)
        fixed, sent = Signal(D, name=f"{name}fixed"), Signal(D, name=f"{name}sent")
        top_sent = Signal(name=f"{name}top_sent")
        dom += [fixed.eq(Cat(*(lo_gt[j] | (n <= j) for j in range(D)))),
                sent.eq(Cat(*(above(Const(j)) for j in range(D)))), top_sent.eq(above(top))]

        # where the walk is
        def decisions(at):
            last = [fixed[j] | at[j] for j in range(D)]
            complete = Cat(*last).all()
            inc_oh = [~last[j] & (Cat(*last[:j]).all() if j else Const(1)) for j in range(D)]
            # the close of top, or of the stepping dimension j, selected by the one-hot
            needed = Mux(complete, top_sent, Cat(*(inc_oh[j] & sent[j] for j in range(D))).any())
            return complete, inc_oh, needed
        self.complete, self.inc_oh, self.close_needed = decisions(at_last)
        self._stepping = Signal(name=f"{name}stepping")     # step() / reset() in this cycle
        self._resetting = Signal(name=f"{name}resetting")
        if static_counts and count_flags is not None:
            # with the counts' decoded registers (pipelined) the step's decisions are registers too: their
            # next values for each way the walk can go (hold, step, back to the start) formed from registers,
            # the handshake selecting one, so what reads them (the unit's event logic, the walk's enables)
            # starts at flip-flops
            regs = [Signal(name=f"{name}complete"), Signal(D, name=f"{name}inc_oh"),
                    Signal(name=f"{name}close_needed")]
            self.checks += [(regs[0], self.complete), (regs[1], Cat(*self.inc_oh)), (regs[2], self.close_needed)]
            below = _stepping_above(list(regs[1]))
            ways = []
            for at in (count_flags[1],
                       [Mux(below[j], count_flags[1][j], Mux(regs[1][j], at_prev[j], at_last[j])) for j in range(D)],
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
        D, inc_oh = self.D, self.inc_oh
        # each counter's and offset's update from the one-hot's own bit and whether one above it steps, the new
        # offset an OR of the one-hot's selections: no chain of its cases after the handshake or the adders
        for j, below in enumerate(_stepping_above(inc_oh)):
            m.d.comb += self._op[j].eq(Mux(inc_oh[j], self._INC, Mux(below, self._ZERO, self._HOLD)))
            with m.If(inc_oh[j] | below):
                new = functools.reduce(operator.or_, (Mux(inc_oh[k], self._next[k], 0) for k in range(j, D)))
                self._load(m, j, new)

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

    def _load(self, m, j, value):
        """Sync: dimension ``j``'s offset becomes ``value`` (and, with static strides, its next step
        ``value + strides[j]``)."""
        m.d.sync += self.acc[j].eq(value)
        if self._static_strides:
            m.d.sync += self._next[j].eq(value + self.strides[j])

    def reset(self, m, value=0):
        """Sync: back to the first element, at offset ``value``."""
        m.d.comb += self._resetting.eq(1)
        for j in range(self.D):
            self._load(m, j, value)
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
                m.d.comb += nxt.eq(outcome(self._next[j]))
        m.d.sync += out.eq(nxt)
        return out
