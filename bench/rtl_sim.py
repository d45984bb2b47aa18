"""RTL simulation of the mapped SwiGLU fabric: build time, simulated cycles per second, the paper sweep.

For each physical tile P (default 4 and 16) this builds the SwiGLU fabric (the
paper's B=64, H=256, I=512 at P=16; a quarter of it, B=16, H=64, I=128, at
P=4) and runs one point, printing side by side the Verilog generation time,
the simulator build time, simulated cycles and cycles per wall-clock second,
whether the outputs match the interpreter, and the fraction of the DRAM
bandwidth bound reached. With ``--sweep`` it then runs all fifteen points of
the paper's sweep (tile_b in {16, 32, 64} x tile_inter in {16, ..., 256}, scaled
by P/16) on that one build: cycles, off-chip bytes (RTL counters) against the
symbolic traffic, bandwidth fraction, match.

    python bench/rtl_sim.py --tiles 4 16 --sweep --amaranth --json rtl.json

The 16x16 build takes several minutes (Verilog generation ~6 min, Verilator
~10 min on this machine kind) and is cached under ``~/.cache/step-hdl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.metrics import metrics
from step_hdl.flow import DRAM_PRESETS, prepare, run_rtl as run, shared_fabric
from step_hdl.sim.fabric import verilog_for
from step_hdl.workloads import swiglu

PAPER = (64, 256, 512)
TILE_B = (16, 32, 64)
TILE_INTER = (16, 32, 64, 128, 256)


def sweep_points(P: int):
    """(B, H, I) and the fifteen (tile_b, tile_inter) of the paper's sweep, scaled by P/16."""
    s = 16 // P if P < 16 else 1
    size = tuple(x // s for x in PAPER) if P < 16 else PAPER
    return size, [(tb // s, ti // s) for tb in TILE_B for ti in TILE_INTER]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, nargs="+", default=[4, 16], help="physical tile sides (default: 4 16)")
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--sweep", action="store_true", help="run the 15 sweep points on the largest tile's build")
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS))
    ap.add_argument("--amaranth", action="store_true",
                    help="also run the smallest tile's point on the Amaranth simulator and print the speed ratio")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    dram = DRAM_PRESETS[args.dram]
    out = {"backend": args.backend, "dram": args.dram, "builds": [], "sweep": []}
    print("sim s: load + configure + run + read back; run s: start to done alone (no Python per cycle)")
    print(f"{'tile':>5} {'verilog s':>10} {'build s':>8} {'cycles':>9} {'sim s':>7} {'run s':>7} {'cycles/s':>9} "
          f"{'bw frac':>8} {'match':>6}")
    for P in args.tiles:
        (B, H, I), pts = sweep_points(P)
        ws = [swiglu(B, H, I, tb, ti, "int16") for tb, ti in pts]
        fab = shared_fabric(ws, P)
        prep = prepare(ws[0], fab)
        t0 = time.time()
        if args.backend != "amaranth":
            _, _, gen_s = verilog_for(prep.design, dram, prep.depth())
        else:
            gen_s = 0.0
        res = run(prep, args.backend, dram)
        rec = {"tile": P, "size": [B, H, I], "point": list(pts[0]), "verilog_s": round(gen_s, 1),
               "build_s": round(res.build_s, 1), "cycles": res.cycles, "sim_s": round(res.wall_s, 2),
               "run_s": round(res.run_s, 3), "cycles_per_s": round(res.cycles_per_s),
               "outputs_match": res.outputs_match,
               "bandwidth_fraction": round(res.bandwidth_fraction(dram), 4), "total_s": round(time.time() - t0, 1)}
        out["builds"].append(rec)
        print(f"{P:>3}x{P:<1} {gen_s:>10.1f} {res.build_s:>8.1f} {res.cycles:>9,} {res.wall_s:>7.1f} {res.run_s:>7.2f} "
              f"{rec['cycles_per_s']:>9,} {rec['bandwidth_fraction']:>8.3f} {str(res.outputs_match):>6}",
              flush=True)
    if args.amaranth and args.backend != "amaranth":
        first = out["builds"][0]
        P = first["tile"]
        (B, H, I), pts = sweep_points(P)
        w = swiglu(B, H, I, *pts[0], "int16")
        res = run(prepare(w, shared_fabric([swiglu(B, H, I, tb, ti, "int16") for tb, ti in pts], P)), "amaranth",
                  dram)
        ratio = first["cycles_per_s"] / max(res.cycles_per_s, 1e-9)
        out["amaranth"] = {"tile": P, "cycles": res.cycles, "run_s": round(res.run_s, 2),
                           "cycles_per_s": round(res.cycles_per_s), "outputs_match": res.outputs_match,
                           f"{args.backend}_speedup": round(ratio, 1)}
        print(f"amaranth {P}x{P}: {res.cycles:,} cycles in {res.run_s:.1f} s = {res.cycles_per_s:,.0f} cycles/s; "
              f"{args.backend} is {ratio:,.0f}x faster (cycle counts equal: {res.cycles == first['cycles']})")
    if args.sweep:
        P = max(args.tiles)
        (B, H, I), pts = sweep_points(P)
        ws = [swiglu(B, H, I, tb, ti, "int16") for tb, ti in pts]
        fab = shared_fabric(ws, P)
        print(f"\nsweep: SwiGLU B={B} H={H} I={I} int16 on one {P}x{P} build, DRAM '{args.dram}' "
              f"({dram.peak_bytes_per_cycle:.0f} B/cycle peak)")
        print(f"{'tile_b':>6} {'tile_i':>6} {'cycles':>9} {'offchip B':>10} {'symbolic':>10} {'bw frac':>8} "
              f"{'match':>6} {'sim s':>6}")
        keys = set()
        for (tb, ti), w in zip(pts, ws):
            prep = prepare(w, fab)
            keys.add(prep.design.key())
            res = run(prep, args.backend, dram)
            sym = int(metrics(w.graph).subs(w.subs).offchip_bytes)
            rec = {"tile_b": tb, "tile_inter": ti, "cycles": res.cycles, "offchip_bytes": res.offchip_bytes,
                   "symbolic_bytes": sym, "bandwidth_fraction": round(res.bandwidth_fraction(dram), 4),
                   "outputs_match": res.outputs_match, "sim_s": round(res.wall_s, 2), "build_s": round(res.build_s, 1)}
            out["sweep"].append(rec)
            print(f"{tb:>6} {ti:>6} {res.cycles:>9,} {res.offchip_bytes:>10,} {sym:>10,} "
                  f"{rec['bandwidth_fraction']:>8.3f} {str(res.outputs_match):>6} {res.wall_s:>6.1f}", flush=True)
        out["designs"] = sorted(keys)
        mem_bound = [r["bandwidth_fraction"] for r in out["sweep"] if r["tile_b"] == pts[0][0]]
        print(f"one design for the sweep: {len(keys) == 1}; all bit-exact: "
              f"{all(r['outputs_match'] for r in out['sweep'])}; RTL bytes == symbolic everywhere: "
              f"{all(r['offchip_bytes'] == r['symbolic_bytes'] for r in out['sweep'])}; "
              f"bandwidth fraction at the smallest tile_b: min {min(mem_bound):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    ok = all(r["outputs_match"] for r in out["builds"] + out["sweep"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
