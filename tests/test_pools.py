"""Bounds on routed counts (step_hdl/counts.py), the tile pools the mapper derives from them (mapper/pools.py),
their report in the metrics, and the pooled MoE in RTL."""

import itertools

import numpy as np
import pytest

from step_hdl import Graph, StepError
from step_hdl.counts import CountGroup, count_groups
from step_hdl.flow import Fabric, FabricError, lower, prepare, run_rtl
from step_hdl.interp import run
from step_hdl.mapper.sizing import fabric_for
from step_hdl.mapper.pools import tile_pools
from step_hdl.metrics import metrics
from step_hdl.workloads.moe import moe

SMALL_ROUTING = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])


@pytest.mark.parametrize("experts, total, q", [(1, 5, 4), (3, 7, 2), (4, 3, 4), (3, 9, 3), (2, 8, 1)])
def test_blocks_is_the_most_any_split_of_the_counts_fills(experts, total, q):
    """``CountGroup.blocks``: the largest ``sum ceil(n_i / q)`` over every split of at most ``total`` rows."""
    g = CountGroup("p", tuple(f"n{i}" for i in range(experts)), total, 1)
    best = max(sum(-(-n // q) for n in split) for split in itertools.product(range(total + 1), repeat=experts)
               if sum(split) <= total)
    assert g.blocks(q) == best


def _routed(k=None, values=None, n=4, merge=False):
    g = Graph("routed")
    g.tensor("x", 8, 4, "int16")
    x = g.load("x", tile=(1, 4), out_shape=[8], stride=[1], name="load_x")
    if merge:
        a, b = g.partition(x, g.selector_source(2, values=[[i % 2] for i in range(8)], name="split"), 2, name="pre")
        merged, sel = g.eager_merge([a, b], rank=0, name="merge")
        g.output(merged, name="merged")
        x = g.load("x", tile=(1, 4), out_shape=[8], stride=[1], name="load_x2")
        src = sel
    else:
        src = g.selector_source(n, values=values, data=None if values else "r", length=8, name="route_sel", k=k)
    outs = g.partition(x, src, n if not merge else 2, name="route")
    for i, o in enumerate(outs):
        g.output(o, name=f"o{i}")
    return g


@pytest.mark.parametrize("kw, choices", [(dict(k=2), 2), (dict(), 4), (dict(values=[[0, 1, 2]] * 8), 3),
                                         (dict(merge=True), 1)])
def test_the_choices_of_a_selector_come_from_its_source(kw, choices):
    groups = count_groups(_routed(**kw))
    g = groups["route_n0"]
    assert (g.partition, g.chunks, g.choices, g.total) == ("route", 8, choices, 8 * choices)
    assert g.symbols == tuple(f"route_n{i}" for i in range(len(g.symbols)))


def test_selector_k_is_checked():
    with pytest.raises(StepError, match=r"SelectorSource 'route_sel': k \(the most choices of one element\) must "
                                        r"be in 1\.\.4, got 5"):
        _routed(k=5)
    g = _routed(k=1)
    with pytest.raises(StepError, match="element 2 chooses 2 outputs, more than k = 1"):
        run(g, {"x": np.zeros((8, 4), np.int16)}, {"r": [[0], [1], [0, 3]] + [[0]] * 5})


@pytest.fixture(scope="module")
def mixtral(routing):
    return routing("mixtral_b64")


def test_dynamic_moe_buffers_share_one_pool_sized_by_the_routed_rows(mixtral):
    """mixtral_b64 (8 experts, top-2, 64 tokens), H=16 on 4x4 tiles: each expert's token tile (the
    RepeatStatic's buffer, [ceil(n_e/4), 4] tiles) takes a page of 4 tiles and a stop per block of 4 rows;
    the 8 buffers hold at most 8 + (128 - 8) // 4 = 38 pages together (the trace's counts need 36), where
    sized one by one each would hold its largest tile."""
    w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic")
    lo = lower(w, 4)
    (pool,) = tile_pools(lo.graph)
    assert pool.buffers == tuple(f"e{e}_repeat_x_buf" for e in range(8))
    assert (pool.rows_per_page, pool.page_entries, pool.group.total, pool.bound) == (4, 5, 128, 38)
    assert pool.need(w.subs) == sum(-(-int(n) // 4) for n in w.subs.values()) == 36
    assert lo.fabric.pool_pages == 38
    private = fabric_for(lo.graph, 4, "int16", bindings=w.subs, pools=False)
    assert (lo.fabric.sram_bytes, private.sram_bytes) == (1024, 2048)      # the largest unpooled buffer


@pytest.mark.parametrize("group", [2, 4])
def test_time_multiplexed_regions_share_the_pool(mixtral, group):
    """A region's buffer takes its experts' tiles in turn (the Max of their blocks), one chunk each: the
    regions pool with the same bound."""
    w = moe(mixtral, 8, hidden=4, inter=8, tile_inter=4, dtype="int16", tiling="dynamic", experts_per_region=group)
    (pool,) = tile_pools(lower(w, 4).graph)
    assert pool.buffers == tuple(f"r{r}_repeat_x_buf" for r in range(8 // group))
    assert (pool.page_entries, pool.bound, pool.need(w.subs)) == (2, 38, 36)


def test_static_tiles_keep_their_own_buffers(mixtral):
    w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static", tile=4)
    lo = lower(w, 4)
    assert tile_pools(lo.graph) == [] and lo.fabric.pool_pages == 0


def test_a_pool_smaller_than_the_program_needs_is_an_error_at_map_time(mixtral):
    w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic")
    fab = lower(w, 4).fabric
    small = Fabric.from_json({**fab.to_json(), "pool_pages": 35})
    with pytest.raises(FabricError, match=r"tile pool 'pool_route' \(buffers e0_repeat_x_buf, e1_repeat_x_buf, "
                                          r"e2_repeat_x_buf, e3_repeat_x_buf, \.\.\.\): this program's tiles need 36 "
                                          r"pages of 4 rows at once; the fabric's pools have 35 \(pool_pages\): raise "
                                          r"pool_pages to at least 36 \(the bound for any routing is 38\)"):
        prepare(w, small)
    prep = prepare(w, Fabric.from_json({**fab.to_json(), "pool_pages": 36}))
    assert ("tile pool 'pool_route': 36 pages, below the bound of 38 for any routing of 128 rows; a routing that "
            "needs more waits for pages (flag 'starved')") in prep.program.notes
    (rep,) = prep.program.pools
    assert (rep["pages"], rep["bound_pages"], rep["need_pages"], rep["page_bytes"], rep["bytes"]) == \
        (36, 38, 36, 5 * 32, 36 * 5 * 32)


def test_metrics_bound_the_dynamic_tiles(mixtral):
    """The logical graph's expert tiles (pack, repeat and the down projection's int32 accumulator: 32 + 32 + 64
    bytes a row at H=16) hold 128 bytes per routed row: at most 128 x 128 for any routing; the trace fills it.
    Time-multiplexed regions hold one expert's tile at a time: less for these counts, the same bound."""
    for kw, need in ((dict(), 16384), (dict(experts_per_region=2), 10912)):
        w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic", **kw)
        (p,) = metrics(w.graph).pools(w.graph, w.subs)
        assert (p["partition"], p["rows_bound"], p["bound_bytes"], p["need_bytes"]) == ("route", 128, 16384, need)
    w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static", tile=8)
    assert metrics(w.graph).pools(w.graph, w.subs) == []


@pytest.mark.slow      # two RTL runs, about 70 s (tests/test_rtl_flow.py runs a pooled MoE in the suite)
def test_pooled_moe_in_rtl_matches_private_buffers():
    """Two experts, top-1, eight tokens (3 and 5 rows): their token tiles share a pool of 1 + 2 = 3 pages (the
    bound for any routing of 8 rows) and fill it; bit-exact, and as fast as with a private SRAM each
    (measured 2026-12-02: 354 cycles both ways, no grant waited)."""
    w = moe(SMALL_ROUTING, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")
    prep = prepare(w, 4)
    (spec,) = prep.design.pools
    assert (spec.params.pages, spec.params.page_entries, spec.clients) == (3, 3, ("e0_repeat_x_buf",
                                                                                   "e1_repeat_x_buf"))
    res = run_rtl(prep, "amaranth")
    assert res.outputs_match, res.mismatches
    assert res.pools(prep.design)["pool_route"] == {"pages": 3, "page_entries": 3, "peak": 3, "starved": False,
                                                    "waits": 0, "clients": ["e0_repeat_x_buf", "e1_repeat_x_buf"]}
    assert res.problems == []
    private = prepare(w, fabric_for(prep.lowered.graph, 4, "int16", bindings=w.subs, pools=False))
    assert private.design.pools == ()
    res_private = run_rtl(private, "amaranth")
    assert res_private.outputs_match and res_private.cycles == res.cycles


def test_status_flags_are_reported():
    """What the status counters say reaches the result: a private buffer that dropped entries and a pool that
    found no page (counters made up here; tests/hw/test_pool.py raises the flags in hardware)."""
    from step_hdl.sim.fabric import _problems
    w = moe(SMALL_ROUTING, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")
    design = prepare(w, 4).design
    counters = {n: 0 for n in design.counter_names()}
    counters.update({"e0_pack_buf.overflow": 1, "pool_route.starved": 1, "pool_route.peak": 3})
    assert _problems(design, counters) == [
        "on-chip buffer 'e0_pack_buf' overflowed: a chunk had more entries than its SRAM's bank holds and the rest "
        "were dropped (the program sends more than the bindings it was mapped with: map it with larger bindings)",
        "tile pool 'pool_route' ran out of pages: a buffer (e0_repeat_x_buf, e1_repeat_x_buf) waited for a free "
        "page with all 3 in use (peak 3); raise the fabric's pool_pages"]


def test_fabric_pool_fields_are_validated():
    with pytest.raises(FabricError, match="pool_pages must be an integer >= 0 \\(0: each pool's bound\\), got -1"):
        Fabric(pool_pages=-1)
    with pytest.raises(FabricError, match="pools must be true or false, got 1"):
        Fabric(pools=1)


def test_a_buffer_of_one_tile_per_count_is_needed(mixtral):
    """A buffer whose input may hold several chunks of one count (here: the static tiles' chunks, several per
    expert) is not pooled: the bound counts one tile per count."""
    w = moe(mixtral, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static", tile=3)
    assert tile_pools(lower(w, 4).graph) == []


@pytest.mark.slow      # about 40 s
def test_a_program_that_needs_more_pages_than_its_bindings_said_waits_and_says_so():
    """Mapped with bindings of one row per expert on a pool of 2 pages (enough for those), the real routing
    (3 and 5 rows: 3 pages at once) starves: expert 1's writer waits for a page until expert 0's tile is read
    and released (nothing is dropped or overwritten), so the outputs are right and the result names the pool.
    (Measured 2026-12-02: 354 cycles, as with 3 pages: the wait is off this run's critical path.)"""
    w = moe(SMALL_ROUTING, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")
    fab = Fabric.from_json({**prepare(w, 4).design.fabric.to_json(), "pool_pages": 2})
    w.subs = {"route_n0": 1, "route_n1": 1}
    res = run_rtl(prepare(w, fab), "amaranth")
    assert res.outputs_match, res.mismatches
    assert res.problems == ["tile pool 'pool_route' ran out of pages: a buffer (e0_repeat_x_buf, e1_repeat_x_buf) "
                            "waited for a free page with all 2 in use (peak 2); raise the fabric's pool_pages"]
    pool = res.pools(prepare(w, fab).design)["pool_route"]
    assert pool["starved"] and pool["waits"] > 0 and pool["peak"] == 2
