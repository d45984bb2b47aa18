"""Two loads on one DRAM channel: the quarter-size SwiGLU point at 4 x 4 with the loads' credits swept, RTL
beside the model.

    python bench/credits.py [--credits 56 60 62 63 64 65 66 68 72 80 96] [--dram paper] [--json PATH]

SwiGLU 16x64x128 with ``tile_b`` 4 and ``tile_inter`` 4 on 4x4 tiles (the
cross-validation's point, on its fabric: ``bench/crossval.py``) puts column
``c`` of W1 and of W3 on the same channel (``docs/crossval.md``). The two
loads either run in lockstep, sharing that channel, or a channel pair apart,
each with a channel of its own; which one they settle in, and when, decides
the run's cycles. This runs the point with ``Fabric.mem_inflight`` (each
load's credits) at each value given, RTL (Verilator, outputs checked against
the interpreter) and model on the same fabric, and prints the cycles and the
model's error per value. One build per value (about 40 s each), two at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from step_hdl.flow import DRAM_PRESETS, model, prepare, run_rtl, shared_fabric
from step_hdl.flow.compare import point_workload, swiglu_points

SIZE, TILE = (16, 64, 128), 4
CREDITS = (56, 60, 62, 63, 64, 65, 66, 68, 72, 80, 96)


def fabric(dram: str):
    """The cross-validation's fabric of the quarter-size sweep (one shared fabric for all its points)."""
    return shared_fabric([point_workload(p) for p in swiglu_points(SIZE, TILE, dram)], TILE)


def workload(dram: str):
    (p,) = [p for p in swiglu_points(SIZE, TILE, dram) if (p.params["tile-b"], p.params["tile-inter"]) == (4, 4)]
    return point_workload(p)


def measure(credits: int, dram: str, backend: str) -> dict:
    w = workload(dram)
    fab = dataclasses.replace(fabric(dram), mem_inflight=credits)
    t = time.time()
    res = run_rtl(prepare(w, fab), backend, dram)
    m = model(w, fab, dram).cycles
    return {"credits": credits, "rtl_cycles": res.cycles, "outputs_match": res.outputs_match, "model_cycles": m,
            "error_pct": round((m - res.cycles) / res.cycles * 100, 1), "wall_s": round(time.time() - t, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--credits", type=int, nargs="+", default=list(CREDITS), metavar="N",
                    help="the loads' credits (Fabric.mem_inflight) to run, each >= 1 (default: %(default)s)")
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS),
                    help="DRAM preset (default: paper)")
    ap.add_argument("--backend", default="verilator", choices=("verilator", "amaranth", "icarus"))
    ap.add_argument("--workers", type=int, default=2, help="builds at once (default: 2)")
    ap.add_argument("--json", metavar="PATH", help="write the runs here")
    args = ap.parse_args(argv)
    bad = [c for c in args.credits if c < 1]
    if bad or args.workers < 1:
        ap.error(f"--credits must be >= 1 (got {bad})" if bad else f"--workers must be >= 1, got {args.workers}")
    from step_hdl.errors import check_writable
    from step_hdl.errors import OutputError
    try:
        check_writable(args.json, "--json")
    except OutputError as exc:
        ap.error(str(exc))
    t0 = time.time()
    runs = []
    print(f"{len(args.credits)} builds of SwiGLU 16x64x128 4 x 4 on {args.backend}, {args.workers} at a time ...",
          file=sys.stderr, flush=True)
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(measure, c, args.dram, args.backend) for c in args.credits]
        for f in futures:
            r = f.result()
            runs.append(r)
            print(f"  {r['credits']:4d} credits: RTL {r['rtl_cycles']:6,d}  model {r['model_cycles']:6,d}  "
                  f"({r['wall_s']:.0f} s)", file=sys.stderr, flush=True)
    if not all(r["outputs_match"] for r in runs):
        print("the RTL's outputs differ from the interpreter's at credits "
              f"{[r['credits'] for r in runs if not r['outputs_match']]}", file=sys.stderr)
        return 1
    print(f"\n{'credits':>7s} {'RTL':>7s} {'model':>7s} {'error':>8s}")
    for r in runs:
        print(f"{r['credits']:7d} {r['rtl_cycles']:7,d} {r['model_cycles']:7,d} {r['error_pct']:+7.1f} %")
    print(f"({(time.time() - t0) / 60:.1f} minutes, {args.dram})")
    if args.json:
        Path(args.json).write_text(json.dumps({"dram": args.dram, "backend": args.backend, "runs": runs}, indent=1)
                                   + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
