"""The fabric's counters, read-back and sampler (``mapper/instruments.py``) on the Amaranth simulator, and their
wiring in the Verilog (a module of their own)."""

import random

import pytest
from amaranth.sim import Simulator

from step_hdl.mapper.design import COUNTER_BITS
from step_hdl.mapper.instruments import Instruments

NAMES = ["cycles", "bytes", "idle", "u.active", "u.finish", "e.produced"]
SOURCES = {"cycles": ("count", 0), "bytes": ("add", 0), "idle": ("value", 0), "u.active": ("count", 1),
           "u.finish": ("stamp", 1), "e.produced": ("count", 2)}


def run_scenario(cycles: int, seed: int, samples: int = 0, every: int = 0):
    """Drive random events, byte counts and a value for ``cycles`` live cycles (then two more not live);
    return what the read-back shows, the reference and the sampler's rows."""
    dut = Instruments(NAMES, SOURCES, ["cycles", "u.active"], samples)
    rnd = random.Random(seed)
    want = {n: 0 for n in NAMES}
    got, rows = {}, []

    async def tb(ctx):
        if samples:
            ctx.set(dut.smp_every, every)
        await ctx.tick()                # not live yet: the sampler takes its first interval
        ctx.set(dut.live, 1)
        for _ in range(cycles):
            active, produced, nbytes, value = rnd.randrange(2), rnd.randrange(2), rnd.randrange(100), rnd.randrange(50)
            ctx.set(dut.events, 1 | active << 1 | produced << 2)
            ctx.set(dut.adds, nbytes)
            ctx.set(dut.values, value)
            await ctx.tick()
            want["cycles"] += 1
            want["bytes"] += nbytes
            want["u.active"] += active
            want["e.produced"] += produced
            want["idle"] = value
            if active:
                want["u.finish"] = want["cycles"]
        ctx.set(dut.live, 0)
        ctx.set(dut.events, 0b111)      # not live: nothing counts
        ctx.set(dut.adds, 7)
        await ctx.tick().repeat(2)
        for k, name in enumerate(NAMES):
            ctx.set(dut.ctr_addr, k)
            got[name] = ctx.get(dut.ctr_data)
        ctx.set(dut.ctr_addr, len(NAMES))
        got["beyond"] = ctx.get(dut.ctr_data)
        if samples:
            for k in range(ctx.get(dut.smp_count)):
                ctx.set(dut.smp_addr, k)
                row = ctx.get(dut.smp_data)
                rows.append((row & (1 << COUNTER_BITS) - 1, row >> COUNTER_BITS))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return got, want, rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_counts_adds_stamps_and_values(seed):
    got, want, _ = run_scenario(40, seed)
    assert {n: got[n] for n in NAMES} == want
    assert got["beyond"] == 0


def test_sampler_takes_a_row_every_interval():
    got, want, rows = run_scenario(45, 3, samples=8, every=10)
    # a row whenever the cycle count reaches the next multiple of 10 while live: each row's own cycle count
    # beside the counter at that instant
    assert [c for c, _ in rows] == [10, 20, 30, 40]
    assert all(a <= b for (_, a), (_, b) in zip(rows, rows[1:])) and rows[-1][1] <= want["u.active"]
    _, _, full = run_scenario(45, 3, samples=2, every=10)
    assert full == rows[:2]             # a full memory takes no more rows


def test_bad_sources():
    with pytest.raises(ValueError, match=r"^Instruments: counters without a source \(kind one of count, add, "
                                         r"stamp, value\): x$"):
        Instruments(["cycles", "x"], {"cycles": ("count", 0)})
    with pytest.raises(ValueError, match=r"^Instruments: a 'cycles' counter of kind 'count' is needed"):
        Instruments(["idle"], {"idle": ("value", 0)})
    with pytest.raises(ValueError, match=r"^Instruments: sampled counters that are not counters: y$"):
        Instruments(["cycles"], {"cycles": ("count", 0)}, ["y"], 4)


def test_fabric_verilog_has_the_instruments_apart(reduced_sweep):
    """The fabric's Verilog instantiates one instruments module, and its top level holds no counter."""
    import re
    from step_hdl.flow import DRAM_PRESETS
    from step_hdl.sim.fabric import verilog_for
    prep = reduced_sweep[2][0]
    text, name, _ = verilog_for(prep.design, DRAM_PRESETS["paper"], prep.depth())
    modules = re.findall(r"^module (\w+)", text, re.M)
    assert sum(m.startswith("instruments_") for m in modules) == 1
    top = text[text.index(f"module \\{name}.top "):]
    top = top[:top.index("endmodule")]
    assert "instruments_" in top
    assert "ctr_cycles" not in top
