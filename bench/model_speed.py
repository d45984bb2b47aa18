"""Approximate model vs RTL simulation: wall time over the SwiGLU paper sweep, side by side.

For each of the fifteen points (B=64, H=256, I=512 int16, tile_b x tile_inter, 16x16 physical tiles, DRAM
``paper``) this runs the generated fabric on Verilator (one build for the sweep; build time excluded, reported
separately) and the approximate model in timing-only mode, and prints both wall times, both cycle counts and
the speed ratio.

    python bench/model_speed.py --json speed.json

The first run builds the 16x16 fabric (~10 minutes); later runs reuse the cached build.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.flow import DRAM_PRESETS, model, prepare, run_rtl as run, shared_fabric
from step_hdl.workloads import swiglu

TILE_B = (16, 32, 64)
TILE_INTER = (16, 32, 64, 128, 256)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    dram = DRAM_PRESETS["paper"]
    pts = [(tb, ti) for tb in TILE_B for ti in TILE_INTER]
    ws = [swiglu(64, 256, 512, tb, ti, "int16") for tb, ti in pts]
    fab = shared_fabric(ws, 16)
    rows, build_s = [], 0.0
    print(f"{'tile_b':>6} {'tile_i':>6} {'rtl cycles':>10} {'model cyc':>10} {'rtl s':>7} {'model s':>8} {'ratio':>7}")
    for (tb, ti), w in zip(pts, ws):
        prep = prepare(w, fab)
        res = run(prep, args.backend, dram)
        build_s += res.build_s
        t0 = time.perf_counter()
        m = model(w, fab, dram)
        model_s = time.perf_counter() - t0
        rows.append({"tile_b": tb, "tile_inter": ti, "rtl_cycles": res.cycles, "model_cycles": m.cycles,
                     "rtl_s": round(res.wall_s, 3), "model_s": round(model_s, 4),
                     "ratio": round(res.wall_s / model_s, 1), "outputs_match": res.outputs_match})
        print(f"{tb:>6} {ti:>6} {res.cycles:>10,} {m.cycles:>10,} {res.wall_s:>7.2f} {model_s:>8.3f} "
              f"{res.wall_s / model_s:>7.0f}", flush=True)
    rtl_total = sum(r["rtl_s"] for r in rows)
    model_total = sum(r["model_s"] for r in rows)
    summary = {"rtl_s": round(rtl_total, 2), "model_s": round(model_total, 3),
               "ratio": round(rtl_total / model_total, 1), "rtl_build_s_excluded": round(build_s, 1)}
    print(f"sweep total: RTL {rtl_total:.1f} s ({args.backend}, build {build_s:.0f} s excluded), model "
          f"{model_total:.2f} s: the model is {rtl_total / model_total:.0f}x faster")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"points": rows, **summary}, f, indent=1)
    return 0 if all(r["outputs_match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
