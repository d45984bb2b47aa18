"""The approximate performance model: timing rules, DRAM bound, deadlock detection, dynamic workloads."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from step_hdl import StepDeadlockError
from step_hdl.mapper.fifo import fifo_depths
from step_hdl.mapper.lower import lower
from step_hdl.mapper.sizing import FitFabric
from step_hdl.sim.model import Model
from step_hdl.sim.model.dram import DRAM_PRESETS, DramParams
from step_hdl.workloads import gqa_decode, moe, swiglu

PAPER = DRAM_PRESETS["paper"]


def timed(program, tile=16, tensors=None, streams=None, dram=PAPER, timing_only=True, depths=None, dtype="int16",
          fused=True, **fields):
    """The model of ``program`` (a graph, or a workload: its graph, inputs and dynamic sizes) lowered onto a
    fabric sized to fit on ``tile`` (with ``fields``), as the flow times a program (``.run()`` for the
    result)."""
    graph, bindings = program, {}
    if not hasattr(program, "nodes"):
        graph, bindings = program.graph, program.subs
        tensors = program.tensors if tensors is None else tensors
        streams = program.streams if streams is None else streams
    lowered = lower(graph, FitFabric(tile, dtype, fields), dtype=dtype, bindings=bindings)
    return Model(lowered, dram, tensors, streams, timing_only=timing_only, depths=depths, fused=fused)


@pytest.mark.parametrize("tb, ti", [(16, 16), (32, 64), (64, 256)])
def test_swiglu_timing_only_agrees_with_data_mode(tb, ti):
    w = swiglu(64, 256, 512, tb, ti, "int16")
    fast = timed(w, 16).run()
    full = timed(w, 16, timing_only=False).run()
    assert fast.cycles == full.cycles and fast.offchip_bytes == full.offchip_bytes
    assert np.array_equal(full.memory["y"], w.expected["y"])
    assert fast.offchip_bytes == w.run().offchip_bytes


def test_cycles_respect_bandwidth_and_compute_bounds():
    peak = DRAM_PRESETS["paper"].peak_bytes_per_cycle
    for tb, ti in [(16, 16), (64, 256)]:
        w = swiglu(64, 256, 512, tb, ti, "int16")
        r = timed(w, 16).run()
        assert r.cycles >= r.offchip_bytes / peak
        # each matmul unit does 16^3 MACs per cycle: W1, W3 and W2 products
        assert r.cycles >= 64 * 256 * 512 / 16 ** 3
    memory_bound = timed(swiglu(64, 256, 512, 16, 16, "int16"), 16).run()
    assert memory_bound.bandwidth_utilization > 0.9


def test_dram_parameters_matter():
    w = swiglu(64, 256, 512, 16, 16, "int16")
    slow = timed(w, 16, dram=DramParams(4, 64, 64, 2, 512)).run()
    fast = timed(w, 16).run()
    assert slow.cycles > 1.8 * fast.cycles   # half the channels, memory-bound: about twice as long


def test_reconvergent_fanout_gets_deep_fifos_and_shallow_ones_deadlock(routing):
    r = routing("mixtral_b64")
    w = moe(r, 8, hidden=32, inter=64, tile_inter=32, dtype="int16", tiling="dynamic")
    depths = fifo_depths(w.graph, 2)
    assert depths["bcast_routing.out1"] >= 2 * 64 + 1
    res = timed(w, 16, timing_only=False).run()
    assert np.array_equal(res.memory["y"], w.expected["y"])
    shallow = {k: 2 for k in depths}
    with pytest.raises(StepDeadlockError, match=r"Broadcast 'bcast_routing' waits for room on output "
                                                r"bcast_routing.out1"):
        timed(w, 16, depths=shallow).run()


@pytest.mark.slow      # about 60 s of full-size models
def test_time_multiplexing_and_dynamic_parallelization_run(routing, kv_files):
    r = routing("qwen_b64")
    w = moe(r, 128, hidden=16, inter=32, tile_inter=16, dtype="int16", experts_per_region=8)
    res = timed(w, 16, timing_only=False).run()
    assert np.array_equal(res.memory["y"], w.expected["y"])
    from step_hdl.workloads.traces import kv_lengths
    lens = np.maximum(1, kv_lengths(kv_files(16)[-1]) // 32)
    for s in ("interleaved", "contiguous", "dynamic"):
        g = gqa_decode(lens, group=4, head_dim=4, regions=4, strategy=s)
        out = timed(g, 4, timing_only=False, dtype="fp32").run()
        assert g.mismatches(type("R", (), {"memory": out.memory})()) == {}
        fast = timed(g, 4, dtype="fp32").run()  # kv_table read for real
        assert fast.cycles == out.cycles


def test_result_reports_per_node_activity():
    w = swiglu(64, 256, 512, 16, 16, "int16")
    r = timed(w, 16).run()
    d = r.to_dict()
    assert set(d) >= {"cycles", "offchip_bytes", "bandwidth_utilization", "compute_utilization", "nodes"}
    node = d["nodes"]["gate_proj"]
    assert node["busy"] > 0 and node["finish"] <= r.cycles
    assert math.isclose(r.bandwidth_utilization, r.offchip_bytes / (r.cycles * 256), rel_tol=1e-9)


def _same_result(a, b):
    assert a.to_dict() == b.to_dict()
    assert (a.bandwidth_utilization, a.compute_utilization) == (b.bandwidth_utilization, b.compute_utilization)
    assert {k: repr(v) for k, v in a.outputs.items()} == {k: repr(v) for k, v in b.outputs.items()}
    assert a.memory.keys() == b.memory.keys()
    assert all(np.array_equal(a.memory[k], b.memory[k]) for k in a.memory)


def test_fused_operator_loops_match_the_operators_own_code(routing):
    """The model's fused loops (random load, broadcast, flat map, accum) are a speed-up only: every figure
    is the same as with the operators' own code, in timing-only and data mode."""
    cases = []
    for s in ("interleaved", "dynamic"):
        w = gqa_decode([9, 2, 17, 5, 1, 12], kv_heads=2, group=4, head_dim=4, regions=2, strategy=s, dtype="int16")
        cases.append((w, 4, "int16", True))
        w = gqa_decode([9, 2, 17, 5, 1, 12], group=4, head_dim=4, regions=2, strategy=s)
        cases.append((w, 4, "fp32", False))
    r = routing("mixtral_b64")
    for tiling, tile in (("static", 16), ("dynamic", None)):
        w = moe(r, 8, hidden=32, inter=64, tile_inter=32, dtype="int16", tiling=tiling, tile=tile)
        cases += [(w, 16, "int16", True), (w, 16, "int16", False)]
    cases.append((swiglu(64, 256, 512, 16, 16, "int16"), 16, "int16", True))
    for w, tile, dtype, timing_only in cases:
        runs = [timed(w, tile, timing_only=timing_only, dtype=dtype, fused=f).run()
                for f in (True, False)]
        _same_result(*runs)


def test_dram_channel_bookkeeping_matches_per_channel_reference():
    """Dram keeps the channels' free times in O(1) for transfers over all channels; the same as one counter
    per channel (and one acceptance time per port)."""
    import random
    from step_hdl.sim.model.dram import Dram

    class Reference:
        def __init__(self, p):
            self.p, self.free, self.window_free, self.accept_free = p, [0] * p.channels, 0.0, {}

        def access(self, now, addr, nbytes, port_requests, port):
            p = self.p
            accepted = max(now, self.accept_free.get(port, 0))
            self.accept_free[port] = accepted + port_requests
            n = max(1, math.ceil(nbytes / p.request_bytes))
            c0 = (addr // p.request_bytes) % p.channels
            base, extra = divmod(n, p.channels)
            done = now
            for ch in range(p.channels):
                count = base + (1 if (ch - c0) % p.channels < extra else 0)
                if count:
                    start = max(now, self.free[ch])
                    self.free[ch] = start + count * p.interval
                    done = max(done, start + (count - 1) * p.interval + p.latency + 2)
            self.window_free = max(float(now), self.window_free) + n * p.latency / p.inflight
            return max(done, math.ceil(self.window_free) + p.latency + 1, accepted + port_requests + p.latency + 1)

    for p in (DRAM_PRESETS["paper"], DramParams(4, 64, 64, 2, 512), DramParams(3, 32, 7, 0, 5),
              DramParams(8, 64, 0, 1, 512), DramParams(2, 64, 5, 4, 1)):
        rnd = random.Random(p.channels)
        dram, ref = Dram(p), Reference(p)
        now = 0
        for _ in range(2000):
            now += rnd.choice((0, 0, 1, 2, 5, 9, 40))
            nbytes = rnd.choice((512, 512, 8, 32, 100, 4096, 64 * p.channels, 6144))
            addr = rnd.randrange(1 << 20) * rnd.choice((1, 8, 64, 512))
            reqs, port = rnd.choice((1, 3, 8)), rnd.choice("abc")
            assert dram.access(now, addr, nbytes, reqs, port) == ref.access(now, addr, nbytes, reqs, port)
            assert dram.free == ref.free and dram.window_free == ref.window_free


def test_range_builds_wrapped_int32_index_tiles():
    """``range`` (vectorised: a KV range is thousands of rows) gives [1, 1] int32 tiles wrapped at 32 bits."""
    from step_hdl.functions import fn
    cases = [(fn("range"), [[5, 4]]), (fn("range", step=3), [[-7, 6]]), (fn("range"), [[2 ** 31 - 2, 5]]),
             (fn("range", step=-2 ** 30), [[0, 7]]), (fn("range"), [[3, 0]]), (fn("range", count=5), [[9]]),
             (fn("range", count=0), [[9]])]
    for f, a in cases:
        vals = [int(v) for v in np.array(a).reshape(-1)]
        start, count = (vals[0], f.param("count")) if f.param("count") is not None else vals
        want = [(start + f.param("step") * j + 2 ** 31) % 2 ** 32 - 2 ** 31 for j in range(max(count, 0))]
        got = f.spec.apply(f, np.array(a, np.int32))
        assert all(g.shape == (1, 1) and g.dtype == np.int32 for g in got)
        assert [int(g[0, 0]) for g in got] == want

def test_fifos_hold_physical_tiles_as_the_rtl_does():
    """An edge of depth D holds D lowered tokens: [8, 8] tiles on 4x4 physical tiles are 6 of them (4 tiles and
    the stops closing their 2 block rows), so depth 8 holds one tile and depth 12 two. Counting logical tiles,
    both would hold all four and give the same timing."""
    from step_hdl import Graph
    from step_hdl.mapper.tiling import stream_tokens
    assert stream_tokens(8, 8, 4) == 6
    g = Graph("fifo")
    g.tensor("x", 32, 8, "int16")
    g.tensor("w", 8, 8, "int16")
    x = g.load("x", tile=(8, 8), out_shape=[4], stride=[1], name="lx")
    w = g.load("w", tile=(8, 8), out_shape=[4], stride=[0], name="lw")
    y = g.map([x, w], "matmul", name="mm")    # 12 cycles per tile: slower than the loads
    g.output(y, name="o")
    runs = {d: timed(g, 4, depths={e: d for e in ("lx.out", "lw.out", "mm.out")}).run()
            for d in (8, 12, 64)}
    stalled = {d: r.nodes["lx"]["stalled"] for d, r in runs.items()}
    assert stalled[8] > stalled[12] > stalled[64] == 0, stalled


def test_a_store_writes_its_pieces_as_they_come():
    """A matmul streams its output tiles to the store one by one (the token goes on with its first piece): the
    store's last write reaches the memory when the last piece is in, so the run ends a DRAM round trip
    (latency + 2) after the producer's last piece, not after its first (the model said 837 cycles here,
    as it finished, before it timed the writes by the pieces; now 900)."""
    from step_hdl import Graph
    g = Graph("mm_store")
    for name, rows, cols in (("x", 8, 64), ("w", 64, 64), ("y", 8, 64)):
        g.tensor(name, rows, cols, "int16")
    x = g.load("x", tile=(8, 64), out_shape=[1], stride=[1])
    w = g.load("w", tile=(64, 64), out_shape=[1], stride=[1])
    y = g.map(g.map([x, w], "matmul", name="mm"), "requantize", name="q", shift=4, dtype="int16")
    g.store(y, "y", tile=(8, 64))
    r = timed(g, 4).run()
    # (q's process finishes with its output register a few cycles after its last piece left)
    assert PAPER.latency - 4 <= r.cycles - r.nodes["q"]["finish"] <= PAPER.latency + 4


def test_a_random_store_keeps_writes_in_flight():
    """A random store takes the next (address, data) pair while earlier writes are unacknowledged, as the RTL
    unit does with its tracker's credits: 16 scattered tiles end about one DRAM round trip after the last
    write, not one round trip per write (the model serialized them: GQA decode's stores 11-18 % slow); with one
    credit each write waits for the one before it. The data comes from a load, a round trip of its own."""
    from step_hdl import Graph
    g = Graph("scatter")
    g.tensor("x", 64, 4, "int16")
    g.tensor("y", 64, 4, "int16")
    x = g.load("x", tile=(4, 4), out_shape=[16], stride=[1], name="load_x")
    g.output(g.random_store(g.index_source(values=list(range(15, -1, -1)), name="addr"), x, "y", tile=(4, 4),
                            name="scatter"), "acks")
    trip = PAPER.latency + 2
    piped = timed(g, 4).run().cycles
    assert 2 * trip + 16 <= piped <= 3 * trip
    assert timed(g, 4, mem_inflight=1).run().cycles >= 16 * trip


def _copy(rows, cols, tile, out_rows, out_cols):
    """A load of ``tile``-sized tiles of a ``[rows, cols]`` int16 tensor, stored back whole (one load unit and
    one store in RTL)."""
    from step_hdl import Graph
    g = Graph("copy")
    g.tensor("x", rows, cols, "int16")
    g.tensor("y", out_rows, out_cols, "int16")
    n = rows * cols // (tile[0] * tile[1])
    g.store(g.load("x", tile=tile, out_shape=[n], stride=[1], name="load_x"), "y", tile=tile)
    return g


def test_a_load_keeps_no_more_pieces_in_flight_than_its_credits():
    """The RTL load's tracker issues a physical tile's request only while fewer than ``mem_inflight`` are in
    flight, so of a [16, 64] tile (64 physical tiles) on 16 credits a quarter goes out at once and each of the
    others when an earlier one has left: four such tiles take 16 round trips. The model issued the whole tile
    when one credit was free (RTL 1,191 cycles at 16 credits, 656 at 32; the model 600 and 552, now 1,227 and
    700)."""
    g = _copy(64, 64, (16, 64), 64, 64)
    trip = DRAM_PRESETS["paper"].latency + 2
    for credits in (16, 32):
        cycles = timed(g, 4, mem_inflight=credits).run().cycles
        assert 256 / credits * trip <= cycles <= 1.25 * (256 / credits * trip + 64), (credits, cycles)


def _pace_loop(d, leave, credits, lone, r, done):
    """The piece-by-piece pacing ``_pace_rest`` replaces: each piece after the first ``credits`` waits for
    its response and for the piece ``credits`` before it to have left, and leaves ``r`` after the one before."""
    leave = list(leave)
    for p in range(len(leave), len(d)):
        c = max(d[p], math.ceil(leave[p - credits]) + lone)
        done = max(done, c)
        leave.append(max(c, leave[-1] + r))
    return done, [math.ceil(t) for t in leave]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_block_pacing_is_the_piece_by_piece_loop(data):
    """A read of thousands of pieces is paced a block of ``credits`` at a time, and once its blocks repeat
    the rest is the pattern repeated (a 4,096-piece weight tile made the full-size dynamic-tiling study's
    points take up to 27 minutes). The times must be exactly the loop's, whichever regime binds: the
    responses, the credits or the token rate."""
    from step_hdl.sim.model.memory import _dyadic, _pace_rest
    credits = data.draw(st.integers(1, 40), label="credits")
    lone = data.draw(st.integers(1, 90), label="lone")
    r = 1 + data.draw(st.integers(0, 64), label="r") / 64
    assert _dyadic(r)
    parts, t = [], data.draw(st.integers(0, 50))
    for _ in range(data.draw(st.integers(1, 4), label="parts")):
        k = data.draw(st.integers(1, 12 * credits))
        t += data.draw(st.integers(0, 3 * k))
        parts.append((k, t))
    n = sum(k for k, _ in parts)
    assume(n > credits)
    d = [t - (k - 1 - i) for k, t in parts for i in range(k)]
    leave, last = [], 0.0
    for c in d[:credits]:                   # the first pieces' times, as the caller makes them
        last = max(c + data.draw(st.integers(0, 5)), last + r)
        leave.append(last)
    done = max(d[:credits])
    assert _pace_rest(np.array(d), leave, parts, credits, lone, r, done) == \
        _pace_loop(d, leave, credits, lone, r, done)


def test_a_loads_stops_hold_its_order_queue():
    """The tracker's order queue (``mem_inflight + 2`` entries) holds a load's stops with its requests until
    they leave: of [64, 4] column tiles, a stop after every physical tile, only 9 pieces are in flight on 16
    credits (RTL 3,974 cycles for 32 tiles, 2,184 on 32 credits; the model 2,703 and 1,439 when it counted
    the requests only, now 4,240 and 2,161). Each piece also leaves a token time after the one before it, two
    cycles here."""
    g = _copy(64, 128, (64, 4), 2048, 4)
    trip = DRAM_PRESETS["paper"].latency + 2
    for credits in (16, 32):
        in_flight = (credits + 2) // 2
        cycles = timed(g, 4, mem_inflight=credits).run().cycles
        assert 512 / in_flight * trip <= cycles <= 1.25 * 512 / in_flight * trip, (credits, cycles)


def test_a_narrow_tile_is_timed_where_the_rtl_lays_it_out():
    """The RTL stores a tensor physical tile after physical tile, row by row of the whole tensor, so a
    [64, 4] column tile of a [64, 128] int16 tensor on 4x4 tiles is 16 tiles of 32 bytes, 1,024 bytes apart:
    16 requests on one channel of 8 (interleaved by 64-byte block), not 512 consecutive bytes over all 8.
    The model took every logical tile as consecutive bytes (SwiGLU B=16 H=64 I=128 on 4x4 at tile_inter 4:
    model 2,434 cycles against RTL 3,355, now 2,754)."""
    from step_hdl.sim.model.dram import Dram
    from step_hdl.sim.model.memory import TimedMemory
    from step_hdl import Graph
    g = Graph("w")
    g.tensor("w", 64, 128, "int16")
    mem = TimedMemory(g, {}, Dram(DRAM_PRESETS["paper"]), {}, timing_only=True)
    mem.tile = 4
    base = mem.base["w"]
    assert mem.where("w", 0, 64, 4) == (base, 1024, 16)
    assert mem.where("w", 33, 64, 4) == (base + 1 * 16 * 1024 + 1 * 32, 1024, 16)     # tile row 1, column 1
    assert mem.where("w", 1, 4, 128) == (base + 1024, 0, 1)     # a whole tile row: consecutive
    assert mem.where("w", 3, 16, 128) == (base + 3 * 4096, 0, 1)
    p = DRAM_PRESETS["paper"]
    strided, packed = Dram(p), Dram(p)
    one_channel = strided.access(0, base, 512, 16, "load", stride=1024, runs=16)
    spread = packed.access(0, base, 512, 16, "load")
    assert one_channel == 15 * p.interval + p.latency + 2
    assert spread == 15 + p.latency + 2        # 8 blocks over 8 channels: the port's 16 requests set the pace


def test_a_burst_shares_its_block_in_the_model():
    """The model's DRAM times a linear load's burst as the RTL's: a transfer that goes on the port's burst
    (``cont``) and starts in the block its previous transfer ended in is that block: no channel slot more,
    done when the block is; the same transfer as a request of its own takes a block of its own."""
    from step_hdl.sim.model.dram import Dram
    p = DramParams(channels=1, request_bytes=64, latency=10, interval=4, inflight=64)
    burst, alone = Dram(p), Dram(p)
    firsts = [d.access(0, 0, 8, 1, "load") for d in (burst, alone)]
    assert firsts == [10 + 2, 10 + 2]
    assert burst.access(1, 8, 8, 1, "load", cont=True) == 12        # the same block, already under way
    assert alone.access(1, 8, 8, 1, "load") == 12 + 4               # the channel's next slot
    assert burst.access(2, 64, 8, 1, "load", cont=True) == 12 + 4   # the next block: a slot of its own


def _rows_graph(rows: int, tail=None):
    """A table record (start, length) read by a random load, the range of rows it names, the rows read by a
    random load and packed into one dynamically sized tile (GQA decode's KV path), then ``tail(g, packed)``."""
    from step_hdl import Graph
    from step_hdl.functions import fn
    g = Graph("rows")
    g.tensor("table", 1, 2, "int32")
    g.tensor("K", rows, 4, "int16")
    meta = g.random_load(g.index_source(values=[0], name="item"), "table", tile=(1, 2), name="load_table")
    addrs = g.flat_map(meta, "range", name="range")
    k = g.random_load(addrs, "K", tile=(1, 4), name="load_k")
    packed = g.accum(k, "retile_row", fn("zeros", rows=0, cols=4, dtype="int16"), 1, name="pack")
    g.output(tail(g, packed) if tail else packed, name="o")
    return g, {"table": np.array([[0, rows]], np.int32), "K": np.zeros((rows, 4), np.int16)}


def test_a_random_load_requests_when_its_address_is_whole():
    """A row address made from a table record the memory has not returned yet cannot be requested: the rows
    arrive a DRAM round trip after the record, and the record a round trip after the start (the model used
    to issue the first row's request when the load took the address token, on its first piece: GQA decode's
    first KV row 60 cycles early)."""
    g, tensors = _rows_graph(1)
    trip = PAPER.latency + 2
    r = timed(g, 4, tensors).run()
    assert r.nodes["load_k"]["finish"] >= 2 * trip


def test_rows_pass_on_as_they_come():
    """Rows packed into a tile (retile_row) go on one by one in the RTL, so the unit after the packing starts on
    the first row, not when the packed tile is whole: an element-wise map of 32 row tiles ends a few cycles
    after the last row arrives, not 2 x 32 cycles (a row and its closing stop each) after."""
    g, tensors = _rows_graph(32, lambda g, t: g.map(t, "relu", name="act"))
    r = timed(g, 4, tensors).run()
    assert r.nodes["act"]["finish"] - r.nodes["load_k"]["finish"] <= 8


def test_a_random_store_writes_when_its_data_is_whole():
    """The acknowledgement of a random store comes a DRAM round trip after its data's last piece is in, not
    after the store took the token on its first piece (GQA decode's stores acknowledged before their
    normalized tile existed)."""
    from step_hdl.functions import fn

    def tail(g, packed):
        s = g.map(packed, "col_sum", name="colsum")         # [1, 4] int32 at the end of the rows
        g.tensor("out", 1, 4, "int32")
        return g.random_store(g.index_source(values=[0], name="slot"), s, "out", tile=(1, 4), name="store")
    g, tensors = _rows_graph(32, tail)
    r = timed(g, 4, tensors).run()
    assert r.nodes["store"]["finish"] >= r.nodes["colsum"]["finish"] + PAPER.latency


def test_index_streams_and_merged_stops_cost_no_extra_cycle():
    """An index stream has no stop closing each element (the lowering adds no block dims to addresses), so a
    range of 64 addresses moves one a cycle; and a stop right after a tile merges with the stop that closes
    the tile's last row of pieces, so [1, 4] rows in pairs ([32, 2]) take as long as 64 rows in one run."""
    from step_hdl import Graph
    g, tensors = _rows_graph(64)
    n = timed(g, 4, tensors).run().nodes
    assert n["range"]["finish"] - n["load_table"]["finish"] <= 64 + 4
    runs = []
    for shape in ([32, 2], [64]):
        g = Graph("rows")
        g.tensor("x", 64, 4, "int16")
        x = g.load("x", tile=(1, 4), out_shape=shape, stride=[2, 1] if len(shape) == 2 else [1], name="lx")
        g.output(g.map(x, "relu", name="act"), name="o")
        runs.append(timed(g, 4).run().cycles)
    assert runs[0] == runs[1], runs


def test_the_model_lays_tensors_out_as_the_program_does(routing):
    """The model's transfers fall on the RTL's DRAM channels: each tensor at the address the plan gives it
    (``mapper.plan.tensor_layout``: one after the other on word boundaries). With every tensor on a 4 KB
    boundary instead, GQA decode's K and V rows shared one channel and the model was 20 % slow."""
    from step_hdl.flow import prepare
    for w in (swiglu(16, 64, 128, 8, 32, "int16"), gqa_decode([3, 9, 1, 12], regions=2, head_dim=4, dtype="int16"),
              moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic")):
        prep = prepare(w, 4)
        m = Model(prep.lowered, PAPER, w.tensors, w.streams)
        assert m.memory.base == {k: v[0] for k, v in prep.program.tensors.items()}, w.graph.name


def test_a_token_going_round_a_cycle_forever_is_named():
    """The model stops a program that makes no progress (only nodes on a feedback loop, touching no memory,
    ran) and names them, where it ran for minutes to its event limit: a selector merged back with itself
    forever (a cycle of selectors maps; one of tiles the mapper refuses, and so does the model)."""
    from step_hdl import Graph, Selector, StepRuntimeError, StreamType
    g = Graph("loop")
    s = g.selector_source(values=[1], n=2, name="src")
    fb = g.feedback(StreamType(Selector(2), ("n",)), name="fb")
    merged, sel = g.eager_merge([s, fb], rank=0, name="m")
    a, b = g.broadcast(merged, 2, name="b")
    g.bind(fb, a)
    g.output(b, name="o")
    g.output(sel, name="s")
    m = timed(g, 4)
    with pytest.raises(StepRuntimeError, match=r"model: no progress in 20,001 events: only .*EagerMerge 'm'.*"
                                               r"tokens going round a cycle"):
        m.run(max_idle_events=20_000)


def test_the_model_refuses_what_the_mapper_refuses():
    """The model times the program the mapper makes: a graph the mapper refuses (here a cycle carrying tiles,
    which hierarchical tiling does not take) is refused with the mapper's error, where the model once timed
    its own lowering of it silently."""
    from step_hdl.flow import model, prepare, workload
    from step_hdl.mapper.tiling import TilingError
    from test_errors import livelock_graph
    w = workload(livelock_graph(), {"x": np.ones((4, 4), np.int16)}, expected={}, subs={})
    message = r"Feedback 'fb': cycles carrying tiles or indices are not supported by hierarchical tiling yet"
    with pytest.raises(TilingError, match=message):
        prepare(w, 4)
    with pytest.raises(TilingError, match=message):
        model(w, 4)
