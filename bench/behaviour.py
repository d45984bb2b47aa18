"""Behaviour fingerprint of the flow: RTL cycles, model cycles and off-chip bytes of the suite's workloads.

A refactoring that claims identical behaviour runs this on the old and the new
code and compares the JSON files (``--compare OLD.json``): every field must be
equal. Runs on the Amaranth simulator by default (no build), about five
minutes on two cores.

    python bench/behaviour.py [--backend amaranth] [--json PATH] [--compare OLD.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time

import numpy as np


def _api():
    """(prepare, run, model_cycles): the flow's public functions, on this code's layout."""
    try:
        from step_hdl.flow import model, prepare, run_rtl
        return prepare, run_rtl, lambda w: model(w, 4, "paper").cycles
    except ImportError:     # the layout before step_hdl.flow
        from step_hdl.sim.fabric import prepare, run
        from step_hdl.sim.model import DRAM_PRESETS, ModelParams, simulate
        return prepare, run, lambda w: simulate(w.graph, ModelParams(tile=4, dtype="int16",
                                                                     dram=DRAM_PRESETS["paper"]),
                                                w.tensors, w.streams, timing_only=True).cycles


def workloads():
    """name -> workload: the small RTL workloads of tests/test_rtl_flow.py, one of each kind."""
    from step_hdl.workloads import swiglu
    from step_hdl.workloads.gqa import gqa_decode
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    return {
        "swiglu_reduced_tb8_ti16": swiglu(16, 8, 64, 8, 16, "int16"),
        "swiglu_reduced_tb16_ti64": swiglu(16, 8, 64, 16, 64, "int16"),
        "swiglu_quick_start": swiglu(16, 64, 128, 8, 32, "int16"),
        "moe_dynamic_small": moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic"),
        "moe_static3_small": moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="static",
                                 tile=3),
        "moe_time_multiplexed_small": moe(routing, 2, hidden=4, inter=8, tile_inter=4, dtype="int16",
                                          tiling="dynamic", experts_per_region=2),
        "gqa_dynamic_small": gqa_decode([16, 3, 15, 2], group=4, head_dim=4, regions=2, strategy="dynamic",
                                        dtype="int16"),
    }


def model_workloads():
    """name -> workload: reduced-size study graphs on the real traces, model only (skipped without traces)."""
    from step_hdl.workloads.gqa import gqa_decode, scale_lengths
    from step_hdl.workloads.moe import moe
    from step_hdl.workloads.traces import TraceNotFound, kv_lengths, kv_traces, routing_trace
    try:
        routing, kv = routing_trace("mixtral_b64"), kv_lengths(kv_traces(16)[3])
    except TraceNotFound as exc:
        print(f"model-only workloads skipped: {exc}", file=sys.stderr)
        return {}
    out = {f"moe_b64_static{t}": moe(routing, 8, hidden=16, inter=32, tile_inter=16, dtype="int16",
                                     tiling="static", tile=t) for t in (3, 6, 10)}
    out["moe_b64_dynamic"] = moe(routing, 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="dynamic")
    out["moe_b64_tm4"] = moe(routing, 8, hidden=4, inter=8, tile_inter=4, dtype="int16", tiling="dynamic",
                             experts_per_region=4)
    for s in ("dynamic", "interleaved", "contiguous"):
        out[f"gqa_b16_{s}"] = gqa_decode(scale_lengths(kv, 64), group=4, head_dim=4, regions=4, strategy=s,
                                         dtype="int16")
    return out


def measure(backend: str) -> dict:
    prepare, run, model_cycles = _api()
    out = {}
    for name, w in workloads().items():
        t0 = time.time()
        prep = prepare(w, 4)
        res = run(prep, backend)
        out[name] = {"rtl_cycles": res.cycles, "outputs_match": res.outputs_match,
                     "offchip_bytes": res.offchip_bytes, "reference_bytes": prep.reference_bytes,
                     "model_cycles": model_cycles(w), "units": len(prep.design.units),
                     "design_key": prep.design.key(),
                     "config": hashlib.sha256(json.dumps(prep.program.config).encode()).hexdigest()[:12],
                     "image": hashlib.sha256(json.dumps(prep.image).encode()).hexdigest()[:12]}
        print(f"{name}: RTL {res.cycles} cycles ({'match' if res.outputs_match else 'MISMATCH'}), model "
              f"{out[name]['model_cycles']}, {res.offchip_bytes} off-chip bytes, {time.time() - t0:.0f} s",
              file=sys.stderr, flush=True)
    for name, w in model_workloads().items():
        out[name] = {"model_cycles": model_cycles(w)}
        print(f"{name}: model {out[name]['model_cycles']}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="amaranth", choices=("amaranth", "verilator", "icarus"))
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--compare", default=None, help="a JSON file of an earlier run: print every difference")
    args = ap.parse_args(argv)
    old = json.load(open(args.compare)) if args.compare else None
    res = measure(args.backend)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(f"{'workload':28s} {'RTL':>7s} {'model':>7s} {'bytes':>8s}")
    for name, r in res.items():
        print(f"{name:28s} {r.get('rtl_cycles', '-'):>7} {r['model_cycles']:7d} {r.get('offchip_bytes', '-'):>8}")
    if old is None:
        return 0
    diffs = [f"{n}.{k}: {old.get(n, {}).get(k)} -> {v}" for n, r in res.items() for k, v in r.items()
             if old.get(n, {}).get(k) != v]
    print("identical to " + args.compare if not diffs else "differences:\n  " + "\n  ".join(diffs))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
