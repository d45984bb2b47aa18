"""The affine walk's registered comparison (``AffineWalk.below``) against the comparison itself, every cycle."""

import numpy as np
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from step_hdl.units.address import AffineWalk


def test_below_is_the_comparison_of_every_cycle():
    """Under random steps, restarts (at 0 and elsewhere) and a random limit, ``below`` is ``acc[0] < limit``
    in every cycle, for a walk of three dimensions with negative and zero strides."""
    m = Module()
    counts = [Signal(8, name=f"count{j}") for j in range(3)]
    strides = [Signal(signed(8), name=f"stride{j}") for j in range(3)]
    n = Signal(2)
    walk = AffineWalk(m, counts, strides, n, n, 8, signed(16), "w")
    step, restart, restart_at = Signal(), Signal(), Signal(signed(16))
    limit, limit_next = Signal(12), Signal(12)
    below = walk.below(limit_next)
    with m.If(restart):
        walk.reset(m, restart_at)
    with m.Elif(step & ~walk.complete):
        walk.step(m)
    m.d.sync += limit.eq(limit_next)
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
            ctx.set(limit_next, int(rng.integers(0, 100)) if rng.random() < 0.3 else ctx.get(limit))
            await ctx.tick()
            if ctx.get(below) != int(ctx.get(walk.acc[0]) < ctx.get(limit)):
                bad.append((cycle, ctx.get(walk.acc[0]), ctx.get(limit), ctx.get(below)))
    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not bad, bad[:5]


def test_below_after_a_reset_is_refused():
    """``below`` follows the offsets ``reset`` goes back to, so it must see every reset: called after one,
    it says so."""
    import pytest
    m = Module()
    m._MustUse__silence = True          # built only to be refused: never elaborated
    walk = AffineWalk(m, [Signal(4)], [Signal(4)], Signal(1), Signal(1), 4, signed(8), "w")
    walk.reset(m, 3)
    with pytest.raises(ValueError, match=r"AffineWalk.below must be called before the walk's first reset\(\)"):
        walk.below(Signal(4))
