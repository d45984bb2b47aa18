"""RTL simulation of the mapped SwiGLU fabric: Verilog generation and build time, simulated cycles per second.

For each physical tile P (default 4 and 16) this builds the SwiGLU fabric of the
paper's sweep (the paper's B=64, H=256, I=512 at P=16; a quarter of it, B=16,
H=64, I=128, at P=4; one fabric for the sweep's points) and runs its first
point, printing side by side the Verilog generation time, the simulator build
time, simulated cycles and cycles per wall-clock second, whether the outputs
match the interpreter, and the fraction of the DRAM bandwidth bound reached.
The sweep's cycles against the model are ``step-hdl compare swiglu`` (or
``bench/crossval.py``), which run the sweep's points on the same build.

    python bench/rtl_sim.py --tiles 4 16 --amaranth --json rtl.json

The 16x16 build takes several minutes (Verilog generation ~6 min, Verilator
~10 min on this machine kind) and is cached under ``~/.cache/step-hdl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.flow import DRAM_PRESETS, prepare, run_rtl as run, shared_fabric
from step_hdl.flow.compare import PAPER_SWIGLU, paper_points
from step_hdl.workloads import swiglu


def sweep_points(P: int):
    """(B, H, I) and the fifteen (tile_b, tile_inter) of the paper's sweep, scaled by P/16."""
    size = tuple(x // (16 // P) for x in PAPER_SWIGLU) if P < 16 else PAPER_SWIGLU
    return size, paper_points(size, P)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, nargs="+", default=[4, 16], help="physical tile sides (default: 4 16)")
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS))
    ap.add_argument("--amaranth", action="store_true",
                    help="also run the smallest tile's point on the Amaranth simulator and print the speed ratio")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    dram = DRAM_PRESETS[args.dram]
    out = {"backend": args.backend, "dram": args.dram, "builds": []}
    print("sim s: load + configure + run + read back; run s: start to done alone (no Python per cycle)")
    print(f"{'tile':>5} {'verilog s':>10} {'build s':>8} {'cycles':>9} {'sim s':>7} {'run s':>7} {'cycles/s':>9} "
          f"{'bw frac':>8} {'match':>6}")
    for P in args.tiles:
        (B, H, I), pts = sweep_points(P)
        ws = [swiglu(B, H, I, tb, ti, "int16") for tb, ti in pts]
        fab = shared_fabric(ws, P)
        prep = prepare(ws[0], fab)
        t0 = time.time()
        res = run(prep, args.backend, dram)
        gen_s = res.verilog_s
        rec = {"tile": P, "size": [B, H, I], "point": list(pts[0]), "verilog_s": round(gen_s, 1),
               "build_s": round(res.build_s - gen_s, 1), "cycles": res.cycles, "sim_s": round(res.wall_s, 2),
               "run_s": round(res.run_s, 3), "cycles_per_s": round(res.cycles_per_s),
               "outputs_match": res.outputs_match,
               "bandwidth_fraction": round(res.bandwidth_fraction(dram), 4), "total_s": round(time.time() - t0, 1)}
        out["builds"].append(rec)
        print(f"{P:>3}x{P:<1} {gen_s:>10.1f} {res.build_s - gen_s:>8.1f} {res.cycles:>9,} {res.wall_s:>7.1f} {res.run_s:>7.2f} "
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    ok = all(r["outputs_match"] for r in out["builds"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
