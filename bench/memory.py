"""Bytes per cycle of the memory system against ports, request size and access pattern, RTL beside model.

For each configuration, every port streams ``--requests`` reads of one tile
(``--bytes``) back to back (``req.valid`` always high, ``resp.ready`` always
high) through the RTL DRAM model (``sim.dram.DramModel``, Amaranth simulator)
and through the approximate model's timing (``sim.dram_timing.Dram``, one
access per request), and this prints side by side the bytes per cycle each
measures from the first request to the last response, the preset's peak and
the ratio model / RTL.

Patterns: ``sequential`` (each port reads its own contiguous region in bursts,
as a linear load does: the tiles of one ``request_bytes`` block in one
request, so 32-byte tiles go two to a 64-byte block), ``random`` (uniform
random words, a request each), ``one-channel`` (every request on channel 0: a
stride of ``channels x request_bytes``).

    python bench/memory.py [--ports 1 4 8] [--bytes 32 64 512] [--requests 48] [--dram paper] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from amaranth.sim import Simulator

from step_hdl.sim.dram import DramModel
from step_hdl.sim.model.dram import DRAM_PRESETS, Dram
from step_hdl.units.memport import MemPortShape

PATTERNS = ("sequential", "random", "one-channel")


def addresses(pattern: str, port: int, n: int, word: int, depth: int, p) -> list[int]:
    """Byte addresses of port ``port``'s ``n`` reads of ``word`` bytes in a memory of ``depth`` words."""
    region = depth // 8
    if pattern == "sequential":
        return [((port * region + i) % depth) * word for i in range(n)]
    if pattern == "random":
        rnd = random.Random(port)
        return [rnd.randrange(depth) * word for _ in range(n)]
    stride = max(1, p.channels * p.request_bytes // word)       # words between two blocks of channel 0
    return [((port * n + i) * stride % depth) * word for i in range(n)]


def requests(pattern: str, port: int, n: int, word: int, depth: int, p) -> list[tuple[int, int]]:
    """``(byte address, tiles)`` of port ``port``'s read requests for ``n`` tiles: sequential tiles in bursts
    within a block (a linear load's), the other patterns a request per tile."""
    addrs = addresses(pattern, port, n, word, depth, p)
    per_block = max(1, p.request_bytes // word) if pattern == "sequential" else 1
    out = []
    for a in addrs:
        if out and a == out[-1][0] + out[-1][1] * word and a % (per_block * word) and out[-1][1] < per_block:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((a, 1))
    return out


def rtl_rate(ports: int, word: int, n: int, pattern: str, p) -> tuple[float, int]:
    depth = 1024
    bursts = max(1, p.request_bytes // word)
    dut = DramModel(MemPortShape(data_bits=8 * word, addr_bits=24, tag_bits=7, burst_words=bursts), ports, p, depth,
                    resp_depth=128)
    first, last = [], []

    def requester(q):
        async def tb(ctx):
            port, cycle = dut.port(q), 0
            ctx.set(port.resp.ready, 1)
            for a, words in requests(pattern, q, n, word, depth, p):
                ctx.set(port.req.payload, {"addr": a, "bytes": word, "words": words, "write": 0, "tag": 0})
                ctx.set(port.req.valid, 1)
                while True:
                    _, _, ready = await ctx.tick().sample(port.req.ready)
                    cycle += 1
                    if ready:
                        break
                if len(first) <= q:
                    first.append(cycle - 1)
            ctx.set(port.req.valid, 0)
        return tb

    def receiver(q):
        async def tb(ctx):
            port, cycle, got = dut.port(q), 0, 0
            while got < n:
                _, _, valid = await ctx.tick().sample(port.resp.valid)
                got += valid
                cycle += 1
            last.append(cycle - 1)
        return tb

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for q in range(ports):
        sim.add_testbench(requester(q))
        sim.add_testbench(receiver(q))
    sim.run()
    cycles = max(last) - min(first) + 1
    return ports * n * word / cycles, cycles


def model_rate(ports: int, word: int, n: int, pattern: str, p) -> tuple[float, int]:
    """The model's timing of the same requests: each port offers its tiles one per cycle from cycle 0."""
    dram, done = Dram(p), 0
    reqs = [requests(pattern, q, n, word, 1024, p) for q in range(ports)]
    starts = [[sum(w for _, w in r[:i]) for i in range(len(r))] for r in reqs]
    for i in range(max(map(len, reqs))):
        for q in range(ports):
            if i < len(reqs[q]):
                a, words = reqs[q][i]
                done = max(done, dram.access(starts[q][i], a, words * word, words, q))
    return ports * n * word / (done + 1), done + 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, nargs="+", default=[1, 4, 8], help="memory ports (default: 1 4 8)")
    ap.add_argument("--bytes", type=int, nargs="+", default=[32, 64, 512],
                    help="bytes per request (a physical tile; default: 32 64 512)")
    ap.add_argument("--requests", type=int, default=48, help="reads per port (default: 48)")
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS), help="DRAM preset (default: paper)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the results here")
    a = ap.parse_args(argv)
    bad = [v for v in a.ports + a.bytes + [a.requests] if v < 1]
    if bad:
        print(f"memory.py: error: ports, bytes and requests must be >= 1, got {bad[0]}", file=sys.stderr)
        return 2
    p = DRAM_PRESETS[a.dram]
    print(f"DRAM '{a.dram}': {p.channels} channels x {p.request_bytes} B every {p.interval} cycles = "
          f"{p.peak_bytes_per_cycle:g} B/cycle peak, latency {p.latency}; {a.requests} reads per port")
    print(f"{'ports':>5} {'bytes':>5} {'pattern':>12} {'RTL B/cyc':>10} {'model B/cyc':>11} {'model/RTL':>9} "
          f"{'of peak':>7} {'sim s':>6}")
    rows = []
    for ports in a.ports:
        for word in a.bytes:
            for pattern in PATTERNS:
                t0 = time.perf_counter()
                rtl, rtl_cycles = rtl_rate(ports, word, a.requests, pattern, p)
                wall = time.perf_counter() - t0
                mod, mod_cycles = model_rate(ports, word, a.requests, pattern, p)
                rows.append({"ports": ports, "bytes": word, "pattern": pattern, "rtl_bytes_per_cycle": round(rtl, 2),
                             "rtl_cycles": rtl_cycles, "model_bytes_per_cycle": round(mod, 2),
                             "model_cycles": mod_cycles, "ratio": round(mod / rtl, 3),
                             "of_peak": round(rtl / p.peak_bytes_per_cycle, 3), "sim_s": round(wall, 2)})
                r = rows[-1]
                print(f"{ports:5d} {word:5d} {pattern:>12} {rtl:10.1f} {mod:11.1f} {r['ratio']:9.3f} "
                      f"{r['of_peak']:7.3f} {wall:6.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dram": a.dram, "requests": a.requests, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
