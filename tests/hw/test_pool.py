"""The tile pool and the buffers that share it (units/pool.py, units/pooled.py): every client's tokens against
the interpreter's Bufferize + Streamify under random stalls on any --sim back-end; allocation, release, the
peak and starvation on the Amaranth simulator."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from step_hdl import dyn
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario, write_config
from step_hdl.token import encode, format_tokens
from step_hdl.types import Ragged
from step_hdl.units.onchip import OnChipBuffer, OnChipBufferParams
from step_hdl.units.params import ParamError
from step_hdl.units.pool import TilePool, TilePoolParams
from step_hdl.units.pooled import PooledBuffers

from helpers import buffer_reference, tiles
from step_hdl.units.base import not_elaborated

SEEDS = (0, 1, 2)
L = Ragged("L", integer=True, nonnegative=True)


def pooled(pages, page_entries, **kw):
    return OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, pool_pages=pages,
                              page_entries=page_entries, **kw)


def _chunks(rng, nprng, n, size):
    """``n`` rank-1 chunks of 0..``size`` tiles each."""
    return [[nprng.integers(-500, 500, (2, 2)).astype(np.int16) for _ in range(rng.randint(0, size))]
            for _ in range(n)]


def run_group(group, streams, op, st, backend, seeds=SEEDS, p=0.3):
    """Each client ``k`` gets ``streams[k]`` (tokens); its output must be the interpreter's buffer of it."""
    fmt = group.buffers[0].fmt("o")
    config = group.configure(op, {"in": st})
    want = [buffer_reference(st, t, op["rank"], op.get("repeat")) for t in streams]
    for seed in seeds:
        sc = Scenario({f"i{k}": fmt.pack_all(t) for k, t in enumerate(streams)},
                      {f"o{k}": fmt.done_bit for k in range(len(streams))}, config, seed=seed, p_gap=p, p_drop=p)
        got, n = run_scenario(group, sc, backend, "pooled_buffers")
        for k in range(len(streams)):
            tokens = fmt.unpack_all(got[f"o{k}"])
            assert tokens == want[k], (f"client {k}, seed {seed}:\n in   {format_tokens(streams[k], 80)}\n"
                                       f" got  {format_tokens(tokens, 80)}\n want {format_tokens(want[k], 80)}")
    return n


@pytest.mark.parametrize("k", range(4))
def test_clients_share_a_pool(sim_backend, k):
    """Three buffers, random rank-1 chunks (several per client, so both banks hold pages at once), pages of 1-3
    entries; the pool holds what the clients can hold at once at most (two chunks each)."""
    rng, nprng = random.Random(4000 + k), np.random.default_rng(k)
    size, page = 5, 1 + k % 3
    streams = [encode(_chunks(rng, nprng, rng.randint(1, 3), size), 1) for _ in range(3)]
    pages = 3 * 2 * -(-size // page)
    group = PooledBuffers(pooled(pages, page), 3)
    st = tiles(2, 2, dyn("N"), L, dt="int16")
    run_group(group, streams, {"rank": 1, "repeat": rng.choice([None, 2])}, st, sim_backend)


def test_rank_2_chunks_with_inner_stops(sim_backend):
    """Rank-2 chunks: inner stops are entries too (pages of 3 hold a row of 2 tiles and its stop)."""
    group = PooledBuffers(pooled(8, 3), 2)
    st = tiles(2, 2, 2, L, L, dt="int16")
    nprng = np.random.default_rng(5)
    t = lambda: nprng.integers(-500, 500, (2, 2)).astype(np.int16)      # noqa: E731
    streams = [encode([[[t(), t()], [t(), t()], [t()]], [[t()], []]], 2), encode([[[t(), t()]], [[], [t()]]], 2)]
    run_group(group, streams, {"rank": 2, "repeat": 2}, st, sim_backend)


def _status(group, streams, op, st, cycles=400):
    """Run ``group`` on the Amaranth simulator without stalls; (outputs per client, peak, lost cycles, starved)."""
    fmt = group.buffers[0].fmt("o")
    config = group.configure(op, {"in": st})
    outs = {k: [] for k in range(len(streams))}
    seen = {"lost": 0}
    sim = Simulator(group)
    sim.add_clock(1e-8)

    async def bench(ctx):
        await write_config(ctx, group.cfg, config)
        pending = [list(fmt.pack_all(t)) for t in streams]
        for k in range(len(streams)):
            ctx.set(getattr(group, f"o{k}").ready, 1)
        for _ in range(cycles):
            for k, left in enumerate(pending):
                port = getattr(group, f"i{k}")
                ctx.set(port.valid, bool(left))
                if left:
                    ctx.set(port.payload.as_value(), left[0])
            _, _, *sampled = await ctx.tick().sample(
                group.lost, *[s for k in range(len(streams)) for s in (getattr(group, f"i{k}").ready,
                                                                        getattr(group, f"o{k}").valid,
                                                                        getattr(group, f"o{k}").payload.as_value())])
            seen["lost"] += sampled[0]
            for k, left in enumerate(pending):
                ready, valid, payload = sampled[1 + 3 * k: 4 + 3 * k]
                if left and ready:
                    left.pop(0)
                if valid:
                    outs[k].append(fmt.unpack(payload))
        seen["peak"] = ctx.get(group.peak)
        seen["starved"] = ctx.get(group.starved)

    sim.add_testbench(bench)
    sim.run()
    return outs, seen["peak"], seen["lost"], seen["starved"]


def test_the_peak_is_what_the_chunks_take_together():
    """Two clients, one chunk each of 5 and 3 tiles, pages of 2 entries: 3 + 2 pages in use at once, both
    chunks read twice, then released; the later chunk of client 0 (1 tile) reuses a freed page."""
    nprng = np.random.default_rng(7)
    t = lambda: nprng.integers(-500, 500, (2, 2)).astype(np.int16)      # noqa: E731
    streams = [encode([[t() for _ in range(5)], [t()]], 1), encode([[t() for _ in range(3)]], 1)]
    st = tiles(2, 2, dyn("N"), L, dt="int16")
    op = {"rank": 1, "repeat": 2}
    outs, peak, lost, starved = _status(PooledBuffers(pooled(6, 2), 2), streams, op, st)
    for k, s in enumerate(streams):
        assert outs[k] == buffer_reference(st, s, 1, 2)
    assert peak == 3 + 2 + 1      # client 0's second chunk arrives while its first is still being read
    assert lost == 1              # both clients ask for their first page in the same cycle: client 1 waits one
    assert not starved


def test_a_pool_too_small_starves_and_says_so():
    """A chunk of 5 tiles in pages of 2 needs 3 pages; a pool of 2 cannot hold it: the writer waits for a
    page that never comes (nothing is dropped or overwritten) and ``starved`` is set."""
    nprng = np.random.default_rng(8)
    streams = [encode([[nprng.integers(-5, 5, (2, 2)).astype(np.int16) for _ in range(5)]], 1)]
    st = tiles(2, 2, dyn("N"), L, dt="int16")
    outs, peak, _, starved = _status(PooledBuffers(pooled(2, 2), 1), streams, {"rank": 1, "repeat": None}, st)
    assert starved and peak == 2 and outs[0] == []


def test_a_private_buffer_that_overflows_says_so():
    """A private buffer of 2 entries per bank given a chunk of 3 drops the third and sets ``overflow``."""
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=32))
    assert unit.params.bank_depth == 2
    st = tiles(2, 2, dyn("N"), L, dt="int16")
    nprng = np.random.default_rng(9)
    tokens = encode([[nprng.integers(-5, 5, (2, 2)).astype(np.int16) for _ in range(3)]], 1)
    fmt = unit.fmt("i")
    config = unit.configure({"rank": 1, "repeat": None}, {"in": st})
    sim = Simulator(unit)
    sim.add_clock(1e-8)
    flag = []

    async def bench(ctx):
        await write_config(ctx, unit.cfg, config)
        ctx.set(unit.o.ready, 1)
        for v in fmt.pack_all(tokens):
            ctx.set(unit.i.valid, 1)
            ctx.set(unit.i.payload.as_value(), v)
            await ctx.tick().until(unit.i.ready)
        ctx.set(unit.i.valid, 0)
        await ctx.tick().repeat(8)
        flag.append(ctx.get(unit.overflow))

    sim.add_testbench(bench)
    sim.run()
    assert flag == [1]


def test_pool_parameters():
    with pytest.raises(ParamError, match="a pooled buffer reads linearly"):
        pooled(4, 2, read_dims=1)
    with pytest.raises(ParamError, match="page_entries must be an integer >= 1, got 0"):
        pooled(4, 0)
    with pytest.raises(ParamError, match="pages must be an integer >= 1, got 0"):
        TilePoolParams(width=8, pages=0)
    assert TilePoolParams(width=8, pages=5, page_entries=3).sram_bits == 120
    pool = TilePool(TilePoolParams(width=8, pages=5, page_entries=3, clients=2))
    not_elaborated(pool)
    assert set(pool.signature.members) == {"c0", "c1", "peak", "lost", "starved"}


def test_backends_agree_on_tokens_and_cycles():
    """One pooled scenario (three clients, pages of 2, random stalls) gives the same tokens and cycles on the
    Amaranth simulator, Verilator and Icarus (where installed)."""
    from tools import installed_backends
    rng, nprng = random.Random(4100), np.random.default_rng(41)
    streams = [encode(_chunks(rng, nprng, 2, 5), 1) for _ in range(3)]
    st = tiles(2, 2, dyn("N"), L, dt="int16")
    cycles = {}
    for backend in installed_backends():
        cycles[backend] = run_group(PooledBuffers(pooled(18, 2), 3), streams, {"rank": 1, "repeat": 2}, st,
                                    backend, seeds=(5,))
    assert len(set(cycles.values())) == 1, cycles
