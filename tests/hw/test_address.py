"""The affine walk's registered comparison (``AffineWalk.below``) against the comparison itself, every cycle."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from step_hdl.units.address import AffineWalk
from step_hdl.units.base import not_elaborated


@pytest.mark.parametrize("static_strides", [False, True])
def test_below_is_the_comparison_of_every_cycle(static_strides):
    """Under random steps, restarts (at 0 and elsewhere) and a limit that counts up, goes back to 0 or holds at
    random, ``below`` is ``acc[0] < limit`` in every cycle, for a walk of three dimensions with negative and
    zero strides; with static strides each dimension's next offset (a register then) is its offset plus its
    stride in every cycle too."""
    m = Module()
    counts = [Signal(8, name=f"count{j}") for j in range(3)]
    strides = [Signal(signed(8), name=f"stride{j}") for j in range(3)]
    n = Signal(2)
    walk = AffineWalk(m, counts, strides, n, n, 8, signed(16), "w", static_strides=static_strides)
    step, restart, restart_at = Signal(), Signal(), Signal(signed(16))
    limit, inc, clear = Signal(12), Signal(), Signal()
    below = walk.below(limit, inc, clear)
    with m.If(restart):
        walk.reset(m, restart_at)
    with m.Elif(step & ~walk.complete):
        walk.step(m)
    with m.If(clear):
        m.d.sync += limit.eq(0)
    with m.Elif(inc):
        m.d.sync += limit.eq(limit + 1)
    rng = np.random.default_rng(1)
    bad = []

    async def bench(ctx):
        ctx.set(n, 3)
        for j, (c, s) in enumerate(((5, 3), (4, -7), (3, 0))):
            ctx.set(counts[j], c)
            ctx.set(strides[j], s)
        ctx.set(restart, 1)
        await ctx.tick()
        for cycle in range(600):
            ctx.set(restart, int(rng.random() < 0.05))
            ctx.set(restart_at, int(rng.choice([0, 0, int(rng.integers(-40, 200))])))
            ctx.set(step, int(rng.random() < 0.7))
            move = rng.random()
            ctx.set(clear, int(move < 0.05))
            ctx.set(inc, int(0.05 <= move < 0.6))
            await ctx.tick()
            if ctx.get(below) != int(ctx.get(walk.acc[0]) < ctx.get(limit)):
                bad.append((cycle, ctx.get(walk.acc[0]), ctx.get(limit), ctx.get(below)))
            for j in range(3):
                if ctx.get(walk._next[j]) != ctx.get(walk.acc[j]) + ctx.get(strides[j]):
                    bad.append((cycle, f"next{j}", ctx.get(walk._next[j]), ctx.get(walk.acc[j])))
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]


def test_below_after_a_reset_is_refused():
    """``below`` follows the offsets ``reset`` goes back to, so it must see every reset: called after one,
    it says so."""
    m = Module()
    not_elaborated(m)  # built only to be refused: never elaborated
    walk = AffineWalk(m, [Signal(4)], [Signal(4)], Signal(1), Signal(1), 4, signed(8), "w")
    walk.reset(m, 3)
    with pytest.raises(ValueError, match=r"AffineWalk.below must be called before the walk's first reset\(\)"):
        walk.below(Signal(4), Signal(), Signal())


def test_registered_decisions_are_the_expressions_of_every_cycle():
    """With the counts' decoded registers (a pipelined unit's walk), ``complete``, ``inc_oh`` and
    ``close_needed`` are registers, and so are each step counter's flags (at its last step, at the one before):
    under random steps, closes and restarts, and programs changed between runs (``n``, counts with zeros, ones
    and twos, a ``merge`` level), each equals the expression it stands for in every cycle but the one after a
    register write."""
    m = Module()
    D = 4
    counts = [Signal(8, name=f"count{j}") for j in range(D)]
    less = [[Signal(signed(9), name=f"less1_{j}") for j in range(D)]]
    less += [[Signal(name=f"is{k}_{j}") for j in range(D)] for k in (1, 2)]
    strides = [Signal(signed(8), name=f"stride{j}") for j in range(D)]
    n, top, merge = Signal(3), Signal(3), Signal(3)
    walk = AffineWalk(m, counts, strides, n, top, 8, signed(16), "w", merge=merge, static_counts=True,
                      count_flags=less)
    assert len(walk.checks) == 2 * D + 3
    step, restart = Signal(), Signal()
    with m.If(restart):
        walk.reset(m, 0)
    with m.Elif(step):
        walk.advance(m, lambda: None)
    rng = np.random.default_rng(2)
    compared, bad = [0], []

    async def bench(ctx):
        for program in range(40):
            n_ = int(rng.integers(0, D + 1))
            for j in range(D):
                c = int(rng.choice([0, 1, 1, 2, 3, 4])) if rng.random() < 0.9 else 0
                ctx.set(counts[j], c)
                ctx.set(less[0][j], c - 1)
                ctx.set(less[1][j], int(c == 1))
                ctx.set(less[2][j], int(c == 2))
                ctx.set(strides[j], int(rng.integers(-3, 4)))
            ctx.set(n, n_)
            ctx.set(top, int(rng.integers(0, D + 1)))
            ctx.set(merge, int(rng.integers(0, 3)))
            ctx.set(step, 0)
            await ctx.tick()
            await ctx.tick()
            for cycle in range(60):
                ctx.set(restart, int(cycle == 0 or rng.random() < 0.03))
                ctx.set(step, int(rng.random() < 0.7))
                await ctx.tick()
                for reg, expr in walk.checks:
                    compared[0] += 1
                    if ctx.get(reg) != ctx.get(expr):
                        bad.append((program, cycle, reg.name, ctx.get(reg), ctx.get(expr)))
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert compared[0] == 40 * 60 * (2 * D + 3)
    assert not bad, bad[:5]
