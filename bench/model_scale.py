"""Wall time of the approximate model on full-size workloads (timing-only mode).

Mixtral-8x7B and Qwen3-30B-A3B MoE layers with the four real routing traces
(static tile 32 and dynamic tiling), and grouped-query attention decode
(32 query heads, 4 KV heads, head dim 128) over the real KV-length traces of
batch 16, 64 and 80 with the three parallelization strategies.

    python bench/model_scale.py [--json PATH] [--quick]

Prints one row per run and the slowest run; the target is under 60 s each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def moe_runs(quick: bool):
    from step_hdl.workloads.moe import moe_graph, routing_selector_counts
    from step_hdl.workloads.traces import ROUTING_TRACES, model_of, routing_trace
    for trace in ROUTING_TRACES[:1] if quick else ROUTING_TRACES:
        r = routing_trace(trace)
        m = model_of(trace)
        ti = 256 if m["inter"] % 256 == 0 else 128
        for tiling, tile in (("static", 32), ("dynamic", None)):
            def build(r=r, m=m, ti=ti, tiling=tiling, tile=tile):
                g = moe_graph(len(r), m["experts"], m["top_k"], m["hidden"], m["inter"], ti, "int16", tiling,
                              tile)
                counts = routing_selector_counts(r, m["experts"])
                return g, {}, {"routing": r}, {f"route_n{e}": int(c) for e, c in enumerate(counts)}
            yield f"moe {trace} {tiling}", "int16", build


def gqa_runs(quick: bool):
    from step_hdl.workloads.gqa import gqa_graph
    from step_hdl.workloads.traces import kv_lengths, kv_traces
    for batch in (16,) if quick else (16, 64, 80):
        path = kv_traces(batch)[-1]          # the widest spread of this batch size
        lens = kv_lengths(path)
        heads = 4
        rows = np.repeat(lens, heads)
        table = np.stack([np.concatenate([[0], np.cumsum(rows)[:-1]]), rows], 1).astype(np.int32)
        for strategy in ("interleaved", "contiguous", "dynamic"):
            def build(batch=batch, strategy=strategy, rows=rows, table=table, lens=lens):
                g = gqa_graph(batch, heads, 8, 128, 4, strategy, "fp32", total_rows=int(rows.sum()))
                return g, {"kv_table": table}, {}, {f"r{r}_rows_len_max": int(lens.max()) for r in range(4)}
            yield f"gqa b{batch} {path.stem} {strategy}", "fp32", build


#: full-size fabrics build reconvergent FIFOs as deep as their streams (as the paper studies do:
#: bench/paper/paper_common.STUDY_MAX_FIFO_DEPTH); the default cap of 64 deadlocks the batch-1024 MoE
FULL_SIZE_FIFO_DEPTH = 1 << 30


def main(argv=None) -> int:
    from step_hdl.flow import FitFabric, Workload, model
    from step_hdl.types import dtype as make_dtype
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true", help="one MoE trace and one KV batch size")
    ap.add_argument("--tile", type=int, default=16)
    args = ap.parse_args(argv)
    records = []
    print(f"{'run':58s} {'cycles':>12s} {'off-chip MB':>12s} {'BW util':>8s} {'wall s':>7s}")
    for name, dt, build in list(moe_runs(args.quick)) + list(gqa_runs(args.quick)):
        t0 = time.perf_counter()
        g, tensors, streams, bindings = build()
        w = Workload(g, tensors, streams, {}, make_dtype(dt), subs=bindings)
        res = model(w, FitFabric(args.tile, dt, {"max_fifo_depth": FULL_SIZE_FIFO_DEPTH}), "paper")
        wall = time.perf_counter() - t0
        records.append({"run": name, "cycles": res.cycles, "offchip_bytes": res.offchip_bytes,
                        "bandwidth_utilization": round(res.bandwidth_utilization, 4), "wall_s": round(wall, 2)})
        print(f"{name:58s} {res.cycles:12d} {res.offchip_bytes / 1e6:12.1f} {res.bandwidth_utilization:8.3f} "
              f"{wall:7.1f}", flush=True)
    worst = max(records, key=lambda r: r["wall_s"])
    print(f"\nslowest: {worst['run']} in {worst['wall_s']} s (target < 60 s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records": records, "max_wall_s": worst["wall_s"]}, f, indent=1)
    return 0 if worst["wall_s"] < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
