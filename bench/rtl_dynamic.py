"""Dynamic tiling in RTL: the MoE layer on a real routing trace, RTL beside the approximate model.

Builds the fabric of the MoE layer with dynamic token tiles (every expert's
routed rows form one ``[N_e, H]`` tile, ``ceil(N_e / P)`` blocks of ``P`` rows in
hardware, the last one partial) for a routing trace with hidden/intermediate sizes scaled
down, simulates it (Verilator by default), checks the output bit for bit
against the interpreter and prints, side by side: RTL cycles, the model's
cycles and its error, off-chip bytes (RTL counters) against the symbolic
traffic, bandwidth fraction, build time and simulated cycles per second.

    python bench/rtl_dynamic.py [--trace mixtral_b64] [--hidden 16] [--inter 32] [--tile-inter 16]
                                [--backend verilator] [--json PATH]

The first build of the 8-expert fabric takes several minutes (cached under
``~/.cache/step-hdl``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.metrics import metrics
from step_hdl.flow import DRAM_PRESETS, model, prepare, run_rtl as run
from step_hdl.workloads.moe import moe
from step_hdl.workloads.traces import TraceNotFound, model_of, routing_trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="mixtral_b64")
    ap.add_argument("--tokens", type=int, default=0, help="use only the first N tokens (0 = all)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--inter", type=int, default=32)
    ap.add_argument("--tile-inter", type=int, default=16)
    ap.add_argument("--phys-tile", type=int, default=4)
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS))
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    try:
        routing = routing_trace(args.trace)
    except TraceNotFound as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return 0
    if args.tokens:
        routing = routing[:args.tokens]
    w = moe(routing, model_of(args.trace)["experts"], args.hidden, args.inter, args.tile_inter, "int16", "dynamic")
    t0 = time.time()
    prep = prepare(w, args.phys_tile)
    print(f"{args.trace}: {len(routing)} tokens, {len(prep.design.units)} units, prepared in "
          f"{time.time() - t0:.1f} s; simulating on {args.backend} ...", file=sys.stderr, flush=True)
    res = run(prep, args.backend, args.dram, progress=True)
    dram = DRAM_PRESETS[args.dram]
    t0 = time.perf_counter()
    m = model(w, prep.design.fabric, dram)
    model_s = time.perf_counter() - t0
    sym = int(metrics(w.graph).subs(w.subs).offchip_bytes)
    out = {"trace": args.trace, "tokens": len(routing), "hidden": args.hidden, "inter": args.inter,
           "tile_inter": args.tile_inter, "phys_tile": args.phys_tile, "units": len(prep.design.units),
           "rtl_cycles": res.cycles, "model_cycles": m.cycles,
           "model_error_pct": round(100 * (m.cycles / res.cycles - 1), 2), "outputs_match": res.outputs_match,
           "rtl_offchip_bytes": res.offchip_bytes, "symbolic_offchip_bytes": sym,
           "bandwidth_fraction": round(res.bandwidth_fraction(dram), 4), "build_s": round(res.build_s, 1),
           "run_s": round(res.run_s, 2), "cycles_per_s": round(res.cycles_per_s), "model_s": round(model_s, 3)}
    print(f"MoE dynamic tiling, {args.trace} ({len(routing)} tokens), H={args.hidden} I={args.inter} "
          f"ti={args.tile_inter}, {args.phys_tile}x{args.phys_tile} tiles, {out['units']} units")
    print(f"  RTL    {res.cycles:>9,} cycles   outputs match: {res.outputs_match}   "
          f"off-chip {res.offchip_bytes:,} B (symbolic {sym:,} B)   bandwidth fraction "
          f"{out['bandwidth_fraction']:.3f}")
    print(f"  model  {m.cycles:>9,} cycles   error {out['model_error_pct']:+.1f} %   ({model_s:.2f} s)")
    print(f"  build {res.build_s:.0f} s, run {res.run_s:.1f} s = {out['cycles_per_s']:,} cycles/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if res.outputs_match and res.offchip_bytes == sym else 1


if __name__ == "__main__":
    sys.exit(main())
