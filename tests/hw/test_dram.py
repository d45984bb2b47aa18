"""The simulation-only DRAM model (``step_hdl.sim.dram``) on the Amaranth simulator.

Data: several requesters with random valid gaps and ready drops, every response
checked against a Python array updated in acceptance order, and every cycle
checked against an exact reference of the documented timing (acceptance,
arbitration, block issue, response). Timing: the lone-request latency, the
paper preset's bandwidth with 512-byte tiles, the in-flight limit and the
per-channel interval. Backdoors and parameter checks.
"""

import bisect
import gc
import itertools
import random
import warnings
from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator

from step_hdl.sim.dram import MAX_LATENCY, DramModel
from step_hdl.sim.model.dram import DRAM_PRESETS, DramParams
from step_hdl.sim.faults import DramFaults
from step_hdl.units.memport import MemPortShape
from step_hdl.units.params import ParamError


class SimTimeout(AssertionError):
    pass


def simulate(dut, testbenches, max_cycles, background=()):
    """Run ``testbenches`` (async functions of ``ctx``) on ``dut`` until they all return (``background``
    ones run alongside and may not finish)."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for tb in testbenches:
        sim.add_testbench(tb)
    for tb in background:
        sim.add_testbench(tb, background=True)

    async def limit(ctx):
        for _ in range(max_cycles):         # (not repeat(): an unfinished repeat() raises when collected)
            await ctx.tick()
        raise SimTimeout(f"testbenches still running after {max_cycles} cycles")
    sim.add_testbench(limit, background=True)
    sim.run()


def blocks(p: DramParams, word_bytes: int, addr: int, nbytes: int) -> range:
    """Blocks a request covers (the docstring's rule 1)."""
    nbytes = min(max(nbytes, 1), word_bytes)
    return range(addr // p.request_bytes, (addr + nbytes - 1) // p.request_bytes + 1)


# ----------------------------------------------------------------------------- exact reference of the timing

def reference_schedule(p: DramParams, word_bytes: int, ports: int, accepts, merged):
    """The documented rules 3-4 replayed on the observed acceptances ``(cycle, port, addr, bytes)``:
    per request (in ``accepts`` order) the cycle its sequencer enqueues its last block and the cycle all its
    blocks are complete; ``merged[i]``: request i's first block is coalesced with its port's previous."""
    reqs = [[] for _ in range(ports)]             # per port: indices into accepts, in order
    for i, (_, q, *_) in enumerate(accepts):
        reqs[q].append(i)
    nxt = [0] * ports                             # per port: next request to load into the sequencer
    cur = [None] * ports                          # per port: (request index, blocks left)
    queue = [deque() for _ in range(p.channels)]  # per channel: request indices of the blocks waiting
    last_issue = [None] * p.channels
    done = [deque() for _ in range(p.channels)]   # per channel: completion cycles of blocks in flight
    finish, complete = [None] * len(accepts), [0] * len(accepts)
    own = [list(blocks(p, word_bytes, a[2], a[3]))[1 if mg else 0:] for a, mg in zip(accepts, merged)]
    left = [len(b) for b in own]
    remaining, u, turn = sum(1 for n in left if n), 0, 0
    for i, n in enumerate(left):
        if not n:                                 # wholly coalesced: nothing to enqueue
            finish[i] = accepts[i][0]
    while remaining:
        for q in range(ports):                    # rule 2: in the sequencer from the cycle after acceptance
            while cur[q] is None and nxt[q] < len(reqs[q]) and accepts[reqs[q][nxt[q]]][0] < u:
                i = reqs[q][nxt[q]]
                nxt[q] += 1
                if own[i]:
                    cur[q] = (i, deque(b % p.channels for b in own[i]))
        held = [len(x) for x in queue]            # at the start of cycle u
        for c in range(p.channels):               # rule 4
            while done[c] and done[c][0] <= u:
                done[c].popleft()
            if queue[c] and (last_issue[c] is None or u >= last_issue[c] + p.interval) \
                    and len(done[c]) < p.channel_inflight:
                i = queue[c].popleft()
                last_issue[c] = u
                done[c].append(u + p.latency)
                complete[i] = max(complete[i], u + p.latency)
                left[i] -= 1
                remaining -= left[i] == 0
        claimed = set()                           # rule 3: turns from port T(u) % ports
        busy_cycle = any(x is not None for x in cur)
        for j in range(ports):
            q = (turn + j) % ports
            if cur[q] is None:
                continue
            i, chans = cur[q]
            while chans and held[chans[0]] < p.queue and chans[0] not in claimed:
                c = chans.popleft()
                claimed.add(c)
                queue[c].append(i)
            if not chans:
                finish[i] = u
                cur[q] = None
        turn += busy_cycle
        u += 1
        assert u < 10 ** 6, "reference schedule does not finish"
    return finish, complete


def check_schedule(p: DramParams, word_bytes: int, ports: int, resp_depth: int, accepts, valid_cycles,
                   writes, responses):
    """Check acceptance, write arbitration and response timing against the documented rules, item by item.

    ``accepts``: (cycle, port, addr, bytes, cont) of every item (``DramModel.items``) in acceptance order;
    ``valid_cycles[q]``: cycles port q offered an item; ``writes[q]``: cycles in which it offered a write item;
    ``responses[q]``: (first cycle valid, transfer cycle) of each response.
    """
    merged, last_block = [], {}
    for a, q, addr, nbytes, cont in accepts:    # bursts: an item after the first, unanswered before, same block
        b = blocks(p, word_bytes, addr, nbytes)
        waiting = sum(1 for a2, q2, *_ in accepts if q2 == q and a2 < a) - sum(1 for _, t in responses[q] if t < a)
        merged.append(cont and waiting > 0 and last_block.get(q) == b[0])
        last_block[q] = b[-1]
    finish, complete = reference_schedule(p, word_bytes, ports, accepts, merged)
    # rule 5: valid from max(all blocks complete, previous transfer + 1)
    per_port = [[] for _ in range(ports)]
    for (_, q, *_), c in zip(accepts, complete):
        per_port[q].append(c)
    for q in range(ports):
        assert len(per_port[q]) == len(responses[q])
        prev = None
        for i, (c, (first, took)) in enumerate(zip(per_port[q], responses[q])):
            want = c if prev is None else max(c, prev + 1)
            assert first == want, f"port {q} response {i}: valid from cycle {first}, documented {want}"
            prev = took
    # rule 2: a port is accepted exactly when it is valid, has response room, its sequencer is free (or
    # finishing) and, for a write, it is the round-robin choice among such writers
    acc_at = {(a, q): i for i, (a, q, *_) in enumerate(accepts)}
    taken = [sorted(t for _, t in responses[q]) for q in range(ports)]
    issued = [[a for a, q2, *_ in accepts if q2 == q] for q in range(ports)]
    busy_until = [-1] * ports                     # the cycle the port's sequencer enqueues its last block
    last_w = ports - 1
    for c in range(max(a for a, *_ in accepts) + 1):
        can = [c in valid_cycles[q] and c >= busy_until[q]
               and bisect.bisect_left(issued[q], c) - bisect.bisect_left(taken[q], c) < resp_depth
               for q in range(ports)]
        granted = next(((last_w + 1 + j) % ports for j in range(ports)
                        if can[(last_w + 1 + j) % ports] and c in writes[(last_w + 1 + j) % ports]), None)
        for q in range(ports):
            want = can[q] and (c not in writes[q] or q == granted)
            got = (c, q) in acc_at
            assert got == want, f"cycle {c}, port {q}: accepted {got}, documented {want} (can {can})"
            if got:
                busy_until[q] = finish[acc_at[(c, q)]]
        if granted is not None:
            last_w = granted


# ----------------------------------------------------------------------------- 1. data under random stalls

#: (ports, params, resp_depth, depth) small configurations: multi-block words, blocks holding several words,
#: non-power-of-two channels and block sizes
CONFIGS = {
    "3ch-2blk": (3, DramParams(channels=3, request_bytes=4, latency=3, interval=2, inflight=4), 3, 12),
    "rb3": (2, DramParams(channels=2, request_bytes=3, latency=1, interval=3, inflight=2), 2, 10),
    "shared-blk": (3, DramParams(channels=4, request_bytes=16, latency=5, interval=1, inflight=3), 4, 16),
    "minimal": (2, DramParams(channels=1, request_bytes=8, latency=2, interval=1, inflight=1), 1, 8),
    # channel queues of one and two blocks (a full queue stops a sequencer), in-flight 2 per channel
    "short-queues": (4, DramParams(channels=2, request_bytes=4, latency=4, interval=1, inflight=4, queue=1), 4, 12),
    "5ports": (5, DramParams(channels=4, request_bytes=8, latency=6, interval=2, inflight=16, queue=2), 3, 16),
}


@pytest.mark.parametrize("seed,config", [(0, "3ch-2blk"), (1, "rb3"), (2, "shared-blk"), (3, "3ch-2blk"),
                                         (4, "minimal"), (5, "short-queues"), (6, "5ports"),
                                         (7, "short-queues")])
def test_random_traffic(seed, config):
    random_traffic(seed, config)


@pytest.mark.parametrize("seed,config,faults", [
    (20, "3ch-2blk", DramFaults(jitter=0.6, refuse=0.4, hold=0.4, seed=5)),
    (21, "5ports", DramFaults(jitter=0.9, seed=6)),
    (22, "short-queues", DramFaults(refuse=0.7, hold=0.7, seed=7))])
def test_random_traffic_under_faults(seed, config, faults):
    """Random latency and back-pressure (:mod:`step_hdl.sim.faults`): every response still the right word or
    write acknowledgement with its tag, in order per port, valid held until taken (the timing rules do not
    hold then)."""
    random_traffic(seed, config, faults)


def random_traffic(seed, config, faults=None):
    """Random reads and writes on every port with random response back-pressure; checks every response and,
    without faults, the timing rules cycle by cycle."""
    ports, params, resp_depth, depth = CONFIGS[config]
    shape = MemPortShape(data_bits=64, addr_bits=12, tag_bits=4, burst_words=3)
    wb = shape.word_bytes
    rng = random.Random(seed)
    init = [rng.getrandbits(64) for _ in range(depth - 2)]
    dut = DramModel(shape, ports, params, depth, init=init, resp_depth=resp_depth, faults=faults)
    array = init + [0] * (depth - len(init))
    n_req = 60
    n_items = [0] * ports
    expect = [deque() for _ in range(ports)]
    accepts, valid_cycles, writes = [], [set() for _ in range(ports)], [set() for _ in range(ports)]
    responses = [[] for _ in range(ports)]
    log = []                      # item acceptances not replayed yet: (cycle, port, addr, write, wdata, tag)

    def replay(before):
        """Apply the log's acceptances of cycles before ``before``: a cycle's reads see the array as it was
        before that cycle's write."""
        entries = sorted(log, key=lambda e: e[0])
        ready = [e for e in entries if e[0] < before]
        for cycle in sorted({e[0] for e in ready}):
            group = [e for e in ready if e[0] == cycle]
            for _, q, addr, write, wdata, tag in group:
                expect[q].append((0, tag) if write else (array[addr // wb], tag))
            for _, q, addr, write, wdata, tag in group:
                if write:
                    array[addr // wb] = wdata
        log[:] = [e for e in entries if e[0] >= before]

    def requester(q):
        async def tb(ctx):
            r = random.Random(seed * 100 + q)
            port = dut.port(q)
            for n in range(n_req):
                while r.random() < 0.3:
                    await ctx.tick()
                write = r.random() < 0.4
                # bursts of 1 to 3 items of whole words (some of one word with any value of `bytes`: 0 counts as
                # 1, above word_bytes as word_bytes; only the timing depends on it)
                words = r.randint(1, 3) if r.random() < 0.6 else 1
                nbytes = wb if words > 1 or r.random() < 0.8 else r.randrange(1 << shape.bytes_bits)
                first = r.randrange(depth - words + 1)
                tag = n % 16
                n_items[q] += words
                for k in range(words if write else 1):     # a write is a beat per item, a read one beat
                    ctx.set(port.req.payload, {"addr": (first + k) * wb, "bytes": nbytes, "write": int(write),
                                               "words": words if k == 0 else 0, "wdata": r.getrandbits(64),
                                               "tag": tag})
                    ctx.set(port.req.valid, 1)
                    while not (await ctx.tick().sample(port.req.ready))[2]:
                        pass
                ctx.set(port.req.valid, 0)
        return tb

    def monitor(max_cycles=20000):
        """Every item each port offers and every one accepted, as sampled at the clock edge."""
        async def tb(ctx):
            sigs = [x for item in dut.items for x in (item.valid, item.ready, item.payload)]
            for cycle in range(max_cycles):
                _, _, *vals = await ctx.tick().sample(*sigs)
                for q in range(ports):
                    valid, ready, it = vals[3 * q:3 * q + 3]
                    if valid:
                        valid_cycles[q].add(cycle)
                        if it.write:
                            writes[q].add(cycle)
                    if valid and ready:
                        accepts.append((cycle, q, it.addr, it.bytes, it.cont))
                        log.append((cycle, q, it.addr, it.write, it.wdata, it.tag))
        return tb

    def responder(q):
        async def tb(ctx):
            r = random.Random(seed * 100 + 50 + q)
            port, cycle, first, hold = dut.port(q), 0, None, 0
            while not requests_done[q] or len(responses[q]) < n_items[q]:
                # ready drops, single and in bursts (so response queues fill and requests wait for room)
                if not hold and r.random() < 0.25:
                    hold = r.randint(1, 12) if r.random() < 0.3 else 1
                ctx.set(port.resp.ready, not hold)
                hold = max(hold - 1, 0)
                _, _, valid, ready, payload = await ctx.tick().sample(port.resp.valid, port.resp.ready,
                                                                      port.resp.payload)
                assert valid or first is None, f"port {q}: resp.valid dropped before the transfer"
                if valid and first is None:
                    first = cycle
                if valid and ready:
                    replay(cycle)      # every acceptance before this cycle is logged by now
                    assert expect[q], f"port {q}: response without a request"
                    rdata, tag = expect[q].popleft()
                    got = (payload.rdata, payload.tag)
                    assert got == (rdata, tag), f"port {q} response {len(responses[q])}: got {got}, " \
                                                f"want {(rdata, tag)}"
                    responses[q].append((first, cycle))
                    first = None
                cycle += 1
            ctx.set(port.resp.ready, 0)
        return tb

    requests_done = [False] * ports

    def sending(q):
        inner = requester(q)

        async def tb(ctx):
            await inner(ctx)
            requests_done[q] = True
        return tb

    simulate(dut, [sending(q) for q in range(ports)] + [responder(q) for q in range(ports)], 20000,
             background=[monitor()])
    replay(10 ** 9)
    assert all(not e for e in expect)
    assert [len(r) for r in responses] == n_items
    if faults is None:
        check_schedule(params, wb, ports, resp_depth, accepts, valid_cycles, writes, responses)


# ----------------------------------------------------------------------------- 2. timing

def stream_reads(dut, n, addr_of, port=0, max_cycles=20000, words=1, nbytes=None):
    """One requester keeps ``req.valid`` high for ``n`` reads of ``words`` items of ``nbytes`` (default: a
    word) from ``addr_of(i)`` (resp.ready always high).

    Returns (request transfer cycles, (first valid, transfer) cycle of each item's response, read data).
    """
    wb = dut.shape.word_bytes
    acc, resp, got = [], [], []

    async def send(ctx):
        p, cycle = dut.port(port), 0
        for i in range(n):
            ctx.set(p.req.payload, {"addr": addr_of(i), "bytes": nbytes or wb, "write": 0, "words": words,
                                    "tag": i % 2 ** dut.shape.tag_bits})
            ctx.set(p.req.valid, 1)
            while True:
                _, _, ready = await ctx.tick().sample(p.req.ready)
                cycle += 1
                if ready:
                    break
            acc.append(cycle - 1)
        ctx.set(p.req.valid, 0)

    async def receive(ctx):
        p, cycle, first = dut.port(port), 0, None
        ctx.set(p.resp.ready, 1)
        while len(resp) < n * words:
            _, _, valid, payload = await ctx.tick().sample(p.resp.valid, p.resp.payload)
            if valid and first is None:
                first = cycle
            if valid:
                resp.append((first, cycle))
                got.append(payload.rdata)
                first = None
            cycle += 1

    simulate(dut, [send, receive], max_cycles)
    return acc, resp, got


@pytest.mark.parametrize("bits,params", [(64, DRAM_PRESETS["paper"]), (4096, DRAM_PRESETS["paper"]),
                                         (512, DramParams(channels=3, request_bytes=32, latency=7, interval=4,
                                                          inflight=2)),
                                         (64, DramParams(channels=1, request_bytes=8, latency=1, interval=1,
                                                         inflight=1))])
def test_lone_request_latency(bits, params):
    """A lone request's response is valid exactly latency + 2 cycles after its transfer (also with a
    512-byte tile over 8 channels, enqueued and issued in one cycle each); a write's too."""
    shape = MemPortShape(data_bits=bits, addr_bits=20, tag_bits=4)
    init = [random.Random(bits).getrandbits(bits) for _ in range(4)]
    dut = DramModel(shape, 2, params, 4, init=init)
    assert dut.lone_latency == params.latency + 2
    wb, seen = shape.word_bytes, []

    async def tb(ctx):
        p, cycle = dut.port1, 0
        ctx.set(p.resp.ready, 1)
        for write, word in ((0, 2), (1, 1), (0, 1)):
            ctx.set(p.req.payload, {"addr": word * wb, "bytes": wb, "write": write, "wdata": 12345, "tag": 5})
            ctx.set(p.req.valid, 1)
            _, _, ready = await ctx.tick().sample(p.req.ready)
            assert ready, "an idle memory accepts at once"
            sent = cycle
            cycle += 1
            ctx.set(p.req.valid, 0)
            while True:
                _, _, valid, payload = await ctx.tick().sample(p.resp.valid, p.resp.payload)
                cycle += 1
                if valid:
                    break
            seen.append((cycle - 1 - sent, payload.rdata, payload.tag))
            # idle until everything has completed, so the next request is lone again
            for _ in range(params.latency + params.interval):
                await ctx.tick()
            cycle += params.latency + params.interval

    simulate(dut, [tb], 1000)
    lat = params.latency + 2
    assert seen == [(lat, init[2], 5), (lat, 0, 5), (lat, 12345, 5)]


def span_cycles(acc, resp, lone_latency):
    """Cycles of a run without its latency tail: (last response transfer - first request transfer + 1)
    - lone latency, i.e. the cycles the same run would take if a lone request's response came at once."""
    return resp[-1][1] - acc[0] + 1 - lone_latency


def test_paper_bandwidth_512_byte_tiles():
    """Paper preset, 16x16 int16 tiles (512 bytes = 8 blocks): 400 streamed reads reach >= 95 % of
    8 channels x 64 B / 2 cycles = 256 B/cycle, measured by :func:`span_cycles`."""
    params = DRAM_PRESETS["paper"]
    shape = MemPortShape(data_bits=4096, addr_bits=24, tag_bits=6)
    depth, n = 64, 400
    init = [random.Random(7).getrandbits(4096) for _ in range(depth)]
    dut = DramModel(shape, 4, params, depth, init=init, resp_depth=64)
    acc, resp, got = stream_reads(dut, n, lambda i: (i % depth) * 512)
    assert got == [init[i % depth] for i in range(n)]
    span = span_cycles(acc, resp, dut.lone_latency)
    rate = n * 512 / span
    assert params.peak_bytes_per_cycle == 256
    assert 0.95 * 256 <= rate <= 256 * (1 + 1 / n), f"{rate:.1f} B/cycle over {span} cycles"


def test_inflight_limit():
    """inflight 16, latency 32, interval 1, 8 channels, 64-byte words: 16/32 blocks per cycle (5 %)."""
    params = DramParams(channels=8, request_bytes=64, latency=32, interval=1, inflight=16)
    dut = DramModel(MemPortShape(data_bits=512, addr_bits=20, tag_bits=6), 1, params, 32, resp_depth=64)
    n = 400
    acc, resp, _ = stream_reads(dut, n, lambda i: (i % 32) * 64)
    rate = n / span_cycles(acc, resp, dut.lone_latency)
    assert abs(rate - 0.5) <= 0.05 * 0.5, f"{rate:.3f} blocks/cycle"


@pytest.mark.parametrize("interval", [1, 3])
def test_channel_interval(interval):
    """Every request on channel 0 (address stride channels x request_bytes): one block per interval."""
    params = DramParams(channels=4, request_bytes=64, latency=8, interval=interval, inflight=512)
    dut = DramModel(MemPortShape(data_bits=512, addr_bits=20, tag_bits=4), 1, params, 64, resp_depth=16)
    n = 60
    acc, resp, _ = stream_reads(dut, n, lambda i: (i % 16) * 4 * 64)
    assert resp[0][0] - acc[0] == dut.lone_latency
    gaps = {b[1] - a[1] for a, b in itertools.pairwise(resp)}
    assert gaps == {interval}, gaps


def offer(dut, q, payloads, cycles, log):
    """A requester on port ``q`` keeping ``req.valid`` high with ``payloads(cycle)``; logs accepted cycles."""
    async def tb(ctx):
        p = dut.port(q)
        ctx.set(p.resp.ready, 1)
        ctx.set(p.req.valid, 1)
        for cycle in range(cycles):
            ctx.set(p.req.payload, payloads(cycle))
            _, _, ready = await ctx.tick().sample(p.req.ready)
            if ready:
                log.append((cycle, q))
        ctx.set(p.req.valid, 0)
    return tb


def test_reads_on_every_port_each_cycle_writes_in_turn():
    """Three always-valid ports reading blocks of different channels are all accepted every cycle; three
    writing are accepted one per cycle, in turn."""
    params = DramParams(channels=8, request_bytes=8, latency=4, interval=1, inflight=64)
    shape = MemPortShape(data_bits=64, addr_bits=16, tag_bits=4)
    for write, want in ((0, [(c, q) for c in range(12) for q in range(3)]), (1, [(c, c % 3) for c in range(12)])):
        dut = DramModel(shape, 3, params, 8)
        log = []
        simulate(dut, [offer(dut, q, lambda c, q=q: {"addr": 8 * q, "bytes": 8, "write": write, "wdata": c},
                             12, log) for q in range(3)], 100)
        assert sorted(log) == want, write


def test_a_channel_takes_one_new_block_per_cycle_in_turns():
    """Three ports reading the same channel: one block enters its queue per cycle, the ports taking turns,
    so each port is accepted every third cycle."""
    params = DramParams(channels=4, request_bytes=8, latency=4, interval=1, inflight=64)
    dut = DramModel(MemPortShape(data_bits=64, addr_bits=16, tag_bits=4), 3, params, 8)
    log = []
    # blocks 0, 4, 8, ...: all on channel 0, and never the port's previous block (no coalescing)
    simulate(dut, [offer(dut, q, lambda c: {"addr": 32 * (c % 5), "bytes": 8, "write": 0}, 30, log)
                   for q in range(3)], 200)
    per_port = [[c for c, q2 in sorted(log) if q2 == q] for q in range(3)]
    for q in range(3):
        gaps = {b - a for a, b in itertools.pairwise(per_port[q][1:])}
        assert gaps == {3}, (q, per_port[q])


@pytest.mark.parametrize("words", [1, 8])
def test_the_items_of_a_burst_share_a_block(words):
    """Eight-byte reads of 64 consecutive addresses on one channel that takes a 64-byte block every 4 cycles:
    as bursts of 8 (one block each) the port streams an item per cycle, a burst every 8 cycles; as 64 separate
    requests each takes a block of its own, one per 4 cycles (the memory merges no separate requests). Every
    item returns its own word."""
    params = DramParams(channels=1, request_bytes=64, latency=6, interval=4, inflight=64)
    dut = DramModel(MemPortShape(data_bits=64, addr_bits=16, tag_bits=4, burst_words=8), 1, params, 64,
                    init=list(range(100, 164)), resp_depth=16)
    n = 64 // words
    acc, resp, got = stream_reads(dut, n, lambda i: 64 * i if words > 1 else 8 * i, words=words)
    assert got == list(range(100, 164))
    if words > 1:
        assert acc == list(range(acc[0], acc[0] + 8 * n, 8)), "a burst accepted every 8 cycles"
        assert span_cycles(acc, resp, dut.lone_latency) <= 64 + 8
    else:
        assert span_cycles(acc, resp, dut.lone_latency) >= 4 * (n - 1)


# ----------------------------------------------------------------------------- 3. backdoors, parameters

def test_backdoor_load_and_peek():
    """Load every word through the backdoor (requests wait meanwhile), read and write through a port,
    peek everything; addresses at or beyond depth: loads and writes are dropped, reads and peeks give 0."""
    shape = MemPortShape(data_bits=64, addr_bits=12, tag_bits=4)
    depth = 10
    params = DramParams(channels=2, request_bytes=8, latency=2, interval=1, inflight=4)
    dut = DramModel(shape, 1, params, depth, init=np.array([1, 2, 3], dtype=np.uint64))  # numpy ints too
    words = [random.Random(3).getrandbits(64) for _ in range(depth)]
    log = []

    async def tb(ctx):
        p = dut.port0
        ctx.set(dut.peek_addr, 2)
        assert ctx.get(dut.peek_data) == 3
        # a request offered while loading waits for the load to end
        ctx.set(p.req.payload, {"addr": 4 * 8, "bytes": 8, "write": 0, "tag": 9})
        ctx.set(p.req.valid, 1)
        ctx.set(dut.load_en, 1)
        for i, w in enumerate(words):
            ctx.set(dut.load_addr, i)
            ctx.set(dut.load_data, w)
            _, _, ready = await ctx.tick().sample(p.req.ready)
            assert not ready, "no request is accepted while load_en is high"
        ctx.set(dut.load_en, 0)
        _, _, ready = await ctx.tick().sample(p.req.ready)
        assert ready
        # responses wait (ready low) while later requests and a load beyond depth must not disturb them
        for write, addr, wdata, tag in ((0, 5 * 8, 0, 9), (1, 7 * 8, 777, 1), (1, 11 * 8, 5, 1),
                                        (0, 12 * 8, 0, 1)):
            ctx.set(p.req.payload, {"addr": addr, "bytes": 8, "write": write, "wdata": wdata, "tag": tag})
            while not (await ctx.tick().sample(p.req.ready))[-1]:
                pass
        ctx.set(p.req.valid, 0)
        ctx.set(dut.load_en, 1)
        ctx.set(dut.load_addr, 11)
        ctx.set(dut.load_data, 0xDEAD)
        await ctx.tick()
        ctx.set(dut.load_en, 0)
        ctx.set(p.resp.ready, 1)
        while len(log) < 5:
            _, _, valid, payload = await ctx.tick().sample(p.resp.valid, p.resp.payload)
            if valid:
                log.append((payload.rdata, payload.tag))
        for i in range(16):
            ctx.set(dut.peek_addr, i)
            assert ctx.get(dut.peek_data) == (777 if i == 7 else words[i] if i < depth else 0), i

    simulate(dut, [tb], 500)
    assert log == [(words[4], 9), (words[5], 9), (0, 1), (0, 1), (0, 1)]


def test_narrow_port_reads_and_writes_sub_words():
    """A 2-byte port beside a full 8-byte port: it reads the sub-word at addr % 8 and writes only its
    bytes, so row-tiled and square-tiled tensors share the array densely."""
    shape = MemPortShape(data_bits=64, addr_bits=12, tag_bits=4)
    params = DramParams(channels=2, request_bytes=8, latency=2, interval=1, inflight=4)
    word = 0x8877665544332211
    dut = DramModel(shape, 2, params, 4, init=[word, 0], port_bytes=[8, 2])
    got = []

    async def request(ctx, p, write, addr, wdata=0):
        ctx.set(p.req.payload, {"addr": addr, "bytes": 2 if p is dut.port1 else 8, "write": write,
                                "wdata": wdata, "tag": 0})
        ctx.set(p.req.valid, 1)
        while not (await ctx.tick().sample(p.req.ready))[-1]:
            pass
        ctx.set(p.req.valid, 0)
        ctx.set(p.resp.ready, 1)
        while True:
            _, _, valid, payload = await ctx.tick().sample(p.resp.valid, p.resp.payload)
            if valid:
                ctx.set(p.resp.ready, 0)
                return payload.rdata

    async def tb(ctx):
        for off in (0, 2, 4, 6):
            got.append(await request(ctx, dut.port1, 0, off))
        await request(ctx, dut.port1, 1, 8 + 4, 0xFFFFBEEF)      # high data bits are ignored
        await request(ctx, dut.port1, 1, 2, 0xCAFE)
        got.append(await request(ctx, dut.port0, 0, 0))
        got.append(await request(ctx, dut.port0, 0, 8))

    simulate(dut, [tb], 400)
    assert got == [0x2211, 0x4433, 0x6655, 0x8877, 0x88776655CAFE2211, 0xBEEF << 32]


def test_verilog_array_has_no_image():
    """``array="verilog"``: the word array and the response rings are instances of the plain Verilog memory,
    so the Verilog does not grow with the depth (an Amaranth memory writes its image word by word)."""
    from amaranth.back import verilog
    shape = MemPortShape(data_bits=256)

    def lines(depth, array):
        dut = DramModel(shape, 3, DRAM_PRESETS["paper"], depth, array=array)
        return verilog.convert(dut, name="dram", emit_src=False).count("\n")
    assert lines(64, "verilog") == lines(4096, "verilog")
    assert lines(4096, "memory") > lines(64, "memory") + 4000


def test_bad_array():
    with pytest.raises(ParamError, match=r"^DramModel: array must be 'memory' or 'verilog', got 'sram'$"):
        DramModel(MemPortShape(data_bits=64), 1, BASE, 4, array="sram")
    with pytest.raises(ParamError, match=r"^DramModel: an array of array='verilog' starts at zero: init must be "
                                         r"empty \(load the words through the backdoor\), got 2 words$"):
        DramModel(MemPortShape(data_bits=64), 1, BASE, 4, init=[1, 2], array="verilog")


def test_bad_port_bytes():
    with pytest.raises(ParamError, match=r"port_bytes\[0\] must be a positive divisor of the 8-byte word"):
        DramModel(MemPortShape(data_bits=64), 1, BASE, 4, port_bytes=[3])


BASE = DramParams(channels=2, request_bytes=8, latency=2, interval=1, inflight=4)


@pytest.mark.parametrize("kwargs,name", [
    ({"ports": 0}, "ports"),
    ({"depth": 0}, "depth"),
    ({"resp_depth": 0}, "resp_depth"),
    ({"params": DramParams(channels=0)}, "channels"),
    ({"params": DramParams(request_bytes=0)}, "request_bytes"),
    ({"params": DramParams(latency=0)}, "latency"),
    ({"params": DramParams(latency=MAX_LATENCY + 1)}, "latency"),
    ({"params": DramParams(interval=0)}, "interval"),
    ({"params": DramParams(inflight=0)}, "inflight"),
    ({"params": DramParams(inflight=2.5)}, "inflight"),
    ({"depth": 2, "init": [1, 2, 3]}, "init"),
    ({"init": [1 << 64]}, "init"),
    ({"shape": 64}, "shape"),
    ({"params": {"channels": 8}}, "params"),
])
def test_bad_parameters(kwargs, name):
    args = {"shape": MemPortShape(data_bits=64), "ports": 1, "params": BASE, "depth": 4}
    args.update(kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ParamError, match=rf"\b{name}\b"):
            DramModel(**args)
        gc.collect()
    assert not caught, [str(w.message) for w in caught]
