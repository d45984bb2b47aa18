"""What ``Fabric.pipeline`` costs in cycles, measured in RTL beside the model, plain and pipelined.

    python bench/pipeline.py [--backend verilator] [--json PATH]

The reduced SwiGLU sweep (16x8x64, tile_b x tile_inter over the paper's
points scaled to 4x4 tiles; one shared fabric, one build each way) and the
two-expert MoE with dynamic token tiles, each on the same fabric without and
with ``pipeline`` (the compute units' function stages and the buffers' SRAM
output register, ``docs/units.md``). Every run is checked bit for bit against
the interpreter. Prints per point the RTL's and the model's cycles both ways,
and per fabric the model's agreement (Pearson, mean and worst error): the
model counts each unit's declared latency, so its agreement should not move.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

from step_hdl.flow import model, prepare, run_rtl, shared_fabric
from step_hdl.workloads import swiglu
from step_hdl.workloads.moe import moe

SWEEP = [(tb, ti) for tb in (4, 8, 16) for ti in (4, 8, 16, 32, 64)]


def workloads():
    """``[(label, group, workload)]``: the SwiGLU sweep (one group: one shared fabric) and the MoE run."""
    out = [(f"swiglu 16x8x64 tb {tb} ti {ti}", "swiglu", swiglu(16, 8, 64, tb, ti, "int16")) for tb, ti in SWEEP]
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    out.append(("moe 2 experts, 8 tokens, dynamic", "moe",
                moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")))
    return out


def stats(points) -> dict:
    rtl = np.array([p["rtl_cycles"] for p in points], dtype=float)
    mod = np.array([p["model_cycles"] for p in points], dtype=float)
    err = (mod / rtl - 1) * 100
    return {"points": len(points), "pearson": round(float(np.corrcoef(rtl, mod)[0, 1]), 4) if len(points) > 1
            else None, "mape_pct": round(float(np.mean(np.abs(err))), 2),
            "worst_pct": round(float(err[np.argmax(np.abs(err))]), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="verilator", choices=("verilator", "amaranth", "icarus"))
    ap.add_argument("--json", metavar="PATH", help="write the points and the statistics here")
    args = ap.parse_args(argv)
    ws = workloads()
    fabrics = {g: shared_fabric([w for _, gg, w in ws if gg == g], 4) for g in ("swiglu", "moe")}
    points = []
    t0 = time.time()
    for pipeline in (False, True):
        for label, group, w in ws:
            fab = dataclasses.replace(fabrics[group], pipeline=pipeline)
            t = time.time()
            res = run_rtl(prepare(w, fab), args.backend)
            if not res.outputs_match:
                print(f"{label}: the RTL's outputs differ from the interpreter's", file=sys.stderr)
                return 1
            points.append({"workload": label, "group": group, "pipeline": pipeline, "rtl_cycles": res.cycles,
                           "model_cycles": model(w, fab).cycles})
            print(f"{'pipelined' if pipeline else 'plain':9s} {label:34s} RTL {res.cycles:5d}  model "
                  f"{points[-1]['model_cycles']:5d}  ({time.time() - t:.0f} s)", file=sys.stderr, flush=True)
    print(f"\n{'point':34s} {'RTL':>6s} {'RTL pip.':>8s} {'+cycles':>7s} {'model':>6s} {'model pip.':>10s} "
          f"{'+cycles':>7s}")
    plain = [p for p in points if not p["pipeline"]]
    piped = [p for p in points if p["pipeline"]]
    for a, b in zip(plain, piped):
        print(f"{a['workload']:34s} {a['rtl_cycles']:6d} {b['rtl_cycles']:8d} {b['rtl_cycles'] - a['rtl_cycles']:+7d} "
              f"{a['model_cycles']:6d} {b['model_cycles']:10d} {b['model_cycles'] - a['model_cycles']:+7d}")
    summary = {"plain": stats(plain), "pipelined": stats(piped),
               "swiglu_plain": stats([p for p in plain if p["group"] == "swiglu"]),
               "swiglu_pipelined": stats([p for p in piped if p["group"] == "swiglu"])}
    print()
    for k, s in summary.items():
        print(f"{k:17s} model against RTL: pearson {s['pearson']}, mean error {s['mape_pct']} %, worst "
              f"{s['worst_pct']:+} % ({s['points']} points)")
    print(f"({(time.time() - t0) / 60:.1f} minutes on {args.backend})")
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "points": points, **summary}, indent=1)
                                   + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
