"""Dynamic tiling of MoE experts against static token tiles (issue 6, study 1).

Mixtral-8x7B (8 experts, top-2, hidden 4096, intermediate 14336) and
Qwen3-30B-A3B (128 experts, top-8, hidden 2048, intermediate 768) MoE layers
driven by the four real routing traces (``mixtral_b64``, ``mixtral_b1024``,
``qwen_b64``, ``qwen_b1024`` in ``../shared/traces/moe_expert_routing``), int16,
on the approximate model (timing-only, 16x16 physical tiles, DRAM preset
``--dram``: by default the paper's dynamic studies' 32 channels, 1,024 B/cycle).
Static tiling packs each expert's routed tokens into
``ceil(n_e / t)`` tiles of ``t`` rows (padding the last one) for
``t`` in 8, 16, 32, 64 at batch 64 and 16, 32, ..., 1024 at batch 1024;
dynamic tiling packs exactly the ``n_e`` routed rows into one tile per expert.
The intermediate dimension is tiled by 256 for both models (14336 = 56 x 256,
768 = 3 x 256; ``bench/model_scale.py``'s rule), so a weight tile is
``[hidden, 256]`` or ``[256, hidden]``.

Per point: cycles and off-chip traffic (model), on-chip memory requirement
(symbolic metrics, spec section 4, substituted with the trace's per-expert
token counts ``route_n<e>``), token rows computed (routed + padding).

Summary (JSON fields):

* ``geomean_onchip_reduction``: geometric mean, over every static point of
  every trace (4 + 4 + 7 + 7 = 22 points), of
  ``onchip(static t) / onchip(dynamic)`` of the same trace;
* ``geomean_speedup``: the same geometric mean of
  ``cycles(static t) / cycles(dynamic)``;
* ``geomean_token_onchip_reduction``: the same, counting only the on-chip bytes
  that do not hold weight tiles (weight tiles: the weight loads' double buffers
  and each matmul's weight operand, the same for every tiling);
* ``iso_speed_onchip_reduction`` (per trace, and ``geomean_iso_speed_onchip_reduction``
  over the traces): on-chip memory of the smallest static point at most 5 %
  slower than dynamic (``iso_speed_tile``), over dynamic's (null when every
  static point is slower than that): the paper's "less on-chip memory at equal
  or better speed"; ``..._token_onchip_reduction``: the same for the token
  buffers alone;
* ``pareto_optimal`` per trace: no static point has both fewer cycles and less
  on-chip memory than dynamic.

    python bench/paper/dynamic_tiling.py [--json PATH] [--plot PATH] [--quick]

``--quick``: the ``mixtral_b64`` trace with static tiles 16 and 64 only.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_common import (
    cli,
    figure,
    geomean,
    measure,
    onchip_bytes,
    role_fractions,
    save,
    study_main,
    table,
)

DTYPE = "int16"
TILES = {64: (8, 16, 32, 64), 1024: (16, 32, 64, 128, 256, 512, 1024)}
#: the paper's figure: dynamic tiling needs about 2.2x less on-chip memory at equal or better speed
PAPER = {"onchip_reduction": 2.2}


def moe_role(name: str):
    """Per-node statistics role of an MoE node (``bench/paper`` studies 1 and 2)."""
    m = re.match(r"^[er]\d+_(.*)$", name)
    base = m.group(1) if m else name
    if base in ("load_w1", "load_w3", "load_w2"):
        return "weight loads"
    if base in ("gate_proj", "up_proj", "down_proj"):
        return "matmuls"
    if base in ("pack", "merge"):
        return "token packing"
    return None


def weight_onchip_bytes(graph) -> int:
    """On-chip bytes that hold weight tiles: the weight loads' double buffers and each matmul's weight operand.

    They do not depend on the token tiling; the rest of the on-chip total does.
    """
    total = 0
    for node in graph.nodes.values():
        if moe_role(node.name) == "weight loads":
            total += int(node.onchip_bytes())
        elif moe_role(node.name) == "matmuls":
            total += int(node.t("in1").dtype.nbytes)
    return total


def shape_of(trace: str, shape=None) -> dict:
    """Model shape of ``trace`` (``hidden``, ``inter``, ``tile_inter``, ``experts``, ``top_k``)."""
    from step_hdl.workloads.traces import model_of
    m = dict(model_of(trace))
    m["tile_inter"] = 256 if m["inter"] % 256 == 0 else 128     # 256 for both models
    m.update(shape or {})
    return m


def moe_point(routing, m: dict, tiling: str, tile=None, experts_per_region: int = 1, dram=None) -> dict:
    """Build and measure one MoE configuration: model numbers plus symbolic on-chip memory."""
    import numpy as np

    from step_hdl.workloads.moe import moe_graph, routing_selector_counts
    g = moe_graph(len(routing), m["experts"], m["top_k"], m["hidden"], m["inter"], m["tile_inter"], DTYPE,
                  tiling, tile, experts_per_region)
    counts = routing_selector_counts(routing, m["experts"])
    subs = {f"route_n{e}": int(c) for e, c in enumerate(counts)}
    p = measure(g, DTYPE, streams={"routing": np.asarray(routing)}, role_of=moe_role, dram=dram, bindings=subs)
    rows = int(sum(math.ceil(c / tile) * tile for c in counts)) if tiling == "static" else int(counts.sum())
    return {"tiling": tiling, "tile": tile, "experts_per_region": experts_per_region,
            "regions": m["experts"] // experts_per_region, **p.to_dict(), "roles": role_fractions(p),
            "onchip_bytes": onchip_bytes(g, subs), "onchip_weight_bytes": weight_onchip_bytes(g), "rows_computed": rows, "rows_routed": int(counts.sum()),
            "active_experts": int((counts > 0).sum())}


def moe_task(trace: str, tiling: str, tile=None, experts_per_region: int = 1, tokens=None, shape=None,
             dram=None) -> dict:
    """:func:`moe_point` of trace ``trace`` (its first ``tokens`` tokens), as a process pool's task: plain data
    in and out (``paper_common.run_points``)."""
    from step_hdl.workloads.traces import routing_trace
    r = routing_trace(trace)
    if tokens:
        r = r[:tokens]
    return {"trace": trace, "batch": len(r),
            **moe_point(r, shape_of(trace, shape), tiling, tile, experts_per_region, dram)}


def trace_file(trace: str):
    from step_hdl.workloads.traces import traces_dir
    return traces_dir() / "moe_expert_routing" / f"{trace}.npz"


def run(traces, tiles=None, shape=None, tokens=None) -> dict:
    """The study on ``traces``; ``tiles`` maps batch size to static tiles (default :data:`TILES`).

    ``shape`` overrides model dimensions and ``tokens`` keeps the first tokens of
    each trace (for the tests' tiny configuration).
    """
    from step_hdl.workloads.traces import routing_trace
    import paper_common
    tiles = tiles or TILES
    calls = [{"trace": trace, "tiling": tiling, "tile": t, "tokens": tokens, "shape": shape,
              "dram": paper_common.DRAM}
             for trace in traces
             for tiling, t in [("static", t) for t in tiles[len(routing_trace(trace))]] + [("dynamic", None)]]
    results = paper_common.run_points(moe_task, calls, lambda c: f"{c['trace']} {c['tiling']}"
                                      + (f" tile {c['tile']}" if c["tile"] else ""),
                                      lambda c: [trace_file(c["trace"])])
    points, per_trace = [], {}
    for trace in traces:
        pts = [r for c, r in zip(calls, results) if c["trace"] == trace]
        dyn = pts[-1]
        for pt in pts:
            pt["speedup_of_dynamic"] = round(pt["cycles"] / dyn["cycles"], 4)
            pt["onchip_reduction_of_dynamic"] = round(pt["onchip_bytes"] / dyn["onchip_bytes"], 4)
            pt["onchip_token_bytes"] = pt["onchip_bytes"] - pt["onchip_weight_bytes"]
        for pt in pts:
            pt["token_onchip_reduction_of_dynamic"] = round(pt["onchip_token_bytes"] / dyn["onchip_token_bytes"], 4)
        static = pts[:-1]
        near = [p for p in static if p["cycles"] <= 1.05 * dyn["cycles"]]
        iso_pt = min(near, key=lambda p: p["onchip_bytes"]) if near else None
        iso = iso_pt["onchip_bytes"] / dyn["onchip_bytes"] if near else None
        iso_tok = iso_pt["onchip_token_bytes"] / dyn["onchip_token_bytes"] if near else None
        dominated_by = [p["tile"] for p in static
                        if p["cycles"] <= dyn["cycles"] and p["onchip_bytes"] <= dyn["onchip_bytes"]]
        per_trace[trace] = {
            "geomean_speedup": round(geomean(p["speedup_of_dynamic"] for p in static), 4),
            "geomean_onchip_reduction": round(geomean(p["onchip_reduction_of_dynamic"] for p in static), 4),
            "geomean_token_onchip_reduction": round(geomean(p["token_onchip_reduction_of_dynamic"] for p in static),
                                                    4),
            "weight_share_of_dynamic_onchip": round(dyn["onchip_weight_bytes"] / dyn["onchip_bytes"], 4),
            "iso_speed_tile": iso_pt["tile"] if near else None,
            "iso_speed_onchip_reduction": round(iso, 4) if iso else None,
            "iso_speed_token_onchip_reduction": round(iso_tok, 4) if iso_tok else None,
            "pareto_optimal": not dominated_by, "dominated_by": dominated_by,
        }
        points += pts
    static = [p for p in points if p["tiling"] == "static"]
    isos = [v["iso_speed_onchip_reduction"] for v in per_trace.values() if v["iso_speed_onchip_reduction"]]
    iso_toks = [v["iso_speed_token_onchip_reduction"] for v in per_trace.values()
                if v["iso_speed_token_onchip_reduction"]]
    return {
        "study": "dynamic_tiling", "dtype": DTYPE, "traces": list(traces),
        "static_tiles": {str(b): list(t) for b, t in tiles.items()},
        "geomean_onchip_reduction": round(geomean(p["onchip_reduction_of_dynamic"] for p in static), 4),
        "geomean_speedup": round(geomean(p["speedup_of_dynamic"] for p in static), 4),
        "geomean_token_onchip_reduction": round(geomean(p["token_onchip_reduction_of_dynamic"] for p in static), 4),
        "geomean_iso_speed_onchip_reduction": round(geomean(isos), 4) if isos else None,
        "geomean_iso_speed_token_onchip_reduction": round(geomean(iso_toks), 4) if iso_toks else None,
        "static_points": len(static), "per_trace": per_trace, "paper": PAPER, "points": points,
        "wall_s": round(sum(p["wall_s"] for p in points), 1),
    }


COLUMNS = [("trace", "trace", "s"), ("tiling", "tiling", "s"), ("tile", "tile", "d"), ("cycles", "cycles", ",d"),
           ("offchip_mb", "off-chip MB", ".1f"), ("onchip_kb", "on-chip KB", ",.0f"),
           ("token_kb", "token-buf KB", ",.0f"),
           ("rows_computed", "rows", "d"), ("bandwidth_utilization", "BW util", ".3f"),
           ("speedup_of_dynamic", "dyn speedup", ".3f"), ("onchip_reduction_of_dynamic", "dyn on-chip red.", ".2f"),
           ("wall_s", "wall s", ".1f")]


def report(res: dict) -> str:
    rows = [{**p, "offchip_mb": p["offchip_bytes"] / 1e6, "onchip_kb": p["onchip_bytes"] / 1e3,
             "token_kb": p["onchip_token_bytes"] / 1e3} for p in res["points"]]
    lines = [table(rows, COLUMNS), ""]
    for trace, s in res["per_trace"].items():
        lines.append(f"{trace}: geomean speedup {s['geomean_speedup']:.3f}, on-chip reduction "
                     f"{s['geomean_onchip_reduction']:.2f} (token buffers {s['geomean_token_onchip_reduction']:.2f}, "
                     f"weights {s['weight_share_of_dynamic_onchip']:.0%} of dynamic's); iso-speed: tile "
                     f"{s['iso_speed_tile']}, on-chip reduction {s['iso_speed_onchip_reduction']} (token buffers "
                     f"{s['iso_speed_token_onchip_reduction']}); dynamic Pareto-optimal: {s['pareto_optimal']}")
    lines.append(f"\ngeomean over {res['static_points']} static points: on-chip reduction "
                 f"{res['geomean_onchip_reduction']:.2f}x (token buffers alone "
                 f"{res['geomean_token_onchip_reduction']:.2f}x), speedup {res['geomean_speedup']:.3f}x; at iso-speed "
                 f"(smallest static point within 5 % of dynamic's cycles) on-chip reduction "
                 f"{res['geomean_iso_speed_onchip_reduction']:.2f}x (token buffers "
                 f"{res['geomean_iso_speed_token_onchip_reduction']:.2f}x) "
                 f"(paper: about {PAPER['onchip_reduction']}x less on-chip memory at equal or better speed)")
    return "\n".join(lines)


def pareto_front(points: list[dict]) -> list[dict]:
    """The points no other point beats in both cycles and on-chip bytes, by cycles."""
    front = [p for p in points if not any(q["cycles"] <= p["cycles"] and q["onchip_bytes"] <= p["onchip_bytes"]
                                          and (q["cycles"], q["onchip_bytes"]) != (p["cycles"], p["onchip_bytes"])
                                          for q in points)]
    return sorted(front, key=lambda p: p["cycles"])


def plot(res: dict, path) -> None:
    from matplotlib.ticker import FuncFormatter
    traces = res["traces"]
    cols = 2 if len(traces) > 1 else 1
    fig, axes = figure(math.ceil(len(traces) / cols), cols, figsize=(5.5 * cols, 4.2 * math.ceil(len(traces) / cols)),
                       squeeze=False)
    for ax, trace in zip(axes.flat, traces):
        pts = [p for p in res["points"] if p["trace"] == trace]
        st = [p for p in pts if p["tiling"] == "static"]
        dyn = next(p for p in pts if p["tiling"] == "dynamic")
        ax.plot([p["cycles"] for p in st], [p["onchip_bytes"] for p in st], "o-", color="tab:blue",
                label="static tile")
        for p in st:
            ax.annotate(str(p["tile"]), (p["cycles"], p["onchip_bytes"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=8)
        ax.plot([dyn["cycles"]], [dyn["onchip_bytes"]], "*", color="tab:red", markersize=14, label="dynamic")
        front = pareto_front(pts)
        ax.plot([p["cycles"] for p in front], [p["onchip_bytes"] for p in front], "-", color="gray", alpha=0.5,
                linewidth=4, zorder=0, label="Pareto front")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis, unit, spec in ((ax.xaxis, 1e6, ".3g"), (ax.yaxis, 1e6, ",.0f")):  # ranges under a decade: minor labels
            fmt = FuncFormatter(lambda v, _, u=unit, f=spec: format(v / u, f))
            axis.set_major_formatter(fmt)
            axis.set_minor_formatter(fmt)
        ax.tick_params(axis="x", which="both", labelrotation=45, labelsize=8)
        ax.tick_params(axis="y", which="both", labelsize=8)
        ax.set_title(trace)
        ax.set_xlabel("million cycles (model)")
        ax.set_ylabel("on-chip memory (MB, symbolic)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(traces):]:
        ax.axis("off")
    save(fig, path)


def small_graphs() -> dict:
    """Small instances for the docs: 2 experts, top-1, 4 tokens, hidden 32, intermediate 64 (tile 32)."""
    from step_hdl.workloads.moe import moe_graph
    return {"static": moe_graph(4, 2, 1, 32, 64, 32, DTYPE, "static", 2),
            "dynamic": moe_graph(4, 2, 1, 32, 64, 32, DTYPE, "dynamic")}


def main(argv=None) -> int:
    from step_hdl.workloads.traces import ROUTING_TRACES, routing_trace
    args = cli("dynamic_tiling", __doc__).parse_args(argv)
    return study_main(args, "dynamic_tiling", small_graphs, lambda: [routing_trace(t) for t in ROUTING_TRACES],
                      lambda: run(["mixtral_b64"], {64: (16, 64)}) if args.quick else run(ROUTING_TRACES),
                      report, plot)


if __name__ == "__main__":
    sys.exit(main())
