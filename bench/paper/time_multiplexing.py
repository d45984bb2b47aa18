"""Configuration time-multiplexing of MoE expert regions (issue 6, study 2).

Qwen3-30B-A3B MoE layer (128 experts, top-8, hidden 2048, intermediate 768,
intermediate tile 256), batch 64 with the ``qwen_b64`` routing trace (60 of the
128 experts receive tokens), int16, on the approximate model (timing-only,
16x16 physical tiles, DRAM preset ``--dram``: by default the paper's dynamic
studies' 32 channels, 1,024 B/cycle). Static token tile 32 and
dynamic tiling, each with 128 dedicated expert regions (one per expert) and
with 64, 32, 16, 8 and 4 shared regions: ``g = 128 / regions`` experts share
one region, whose EagerMerge takes whichever member's token tile is ready and
whose RandomOffChipLoads fetch that expert's weights
(``moe_graph(..., experts_per_region=g)``).

Per point: cycles; slowdown versus 128 regions (``cycles / cycles_128 - 1``);
allocated compute = matmul units x 2·16³ FLOPs/cycle (three matmul units per
region); compute utilization = executed matmul FLOPs (padding rows included)
/ (cycles x allocated FLOPs/cycle); the same with the paper's definition of
allocated compute (``compute_utilization_paper``): every instantiated compute op
counts, 5 per region (its three matmuls, SiLU and the gate product, shared by
its experts), one weight-scale op per expert and the final accumulation, each
at one matmul unit's peak (the paper: 1,024 FLOPs/cycle each; the gain does not
depend on it), so its gain over 128 regions is at most ``769 / (5 n + 129)``;
on-chip memory (symbolic, substituted with the per-expert token counts);
off-chip bandwidth utilization (bytes / (cycles x the preset's peak)).

Summary (JSON fields), per tiling in ``by_tiling`` and, for dynamic tiling, at
the top level:

* ``best_regions``: the fewest shared regions whose slowdown is at most 5 %;
* ``utilization_gain``: compute utilization there / at 128 dedicated regions
  (our definition: the matmul units built);
* ``utilization_gain_paper_definition``: the paper's, at the largest gain whose
  slowdown is at most 5 % (``best_regions_paper_definition``);
* ``slowdown_pct``: its slowdown in percent;
* ``onchip_reduction``: on-chip memory at 128 regions / there.

    python bench/paper/time_multiplexing.py [--json PATH] [--plot PATH] [--quick]

``--quick``: dynamic tiling, 128 and 32 regions only.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dynamic_tiling import moe_task, shape_of, trace_file
from paper_common import cli, figure, save, study_main, table

TRACE = "qwen_b64"
REGIONS = (128, 64, 32, 16, 8, 4)
TILINGS = (("static", 32), ("dynamic", None))
MAX_SLOWDOWN = 0.05
#: the paper: about 2.6x higher compute utilization at under 5 % slowdown
PAPER = {"utilization_gain": 2.6, "max_slowdown_pct": 5.0}


def paper_allocated_ops(regions: int, experts: int) -> int:
    """Compute ops the paper's definition counts: 5 per region, one weight scale per expert, the final sum."""
    return 5 * regions + experts + 1


def summarize(pts: list[dict]) -> dict:
    """Best shared-region point within :data:`MAX_SLOWDOWN` of the dedicated (first) point, by both
    definitions of compute utilization."""
    base = pts[0]
    ok = [p for p in pts[1:] if p["slowdown"] <= MAX_SLOWDOWN]
    best = min(ok, key=lambda p: p["regions"]) if ok else base
    best_paper = max(ok or [base], key=lambda p: p["compute_utilization_paper"])
    return {"best_regions": best["regions"], "dedicated_regions": base["regions"],
            "utilization_gain": round(best["compute_utilization"] / base["compute_utilization"], 4),
            "slowdown_pct": round(100 * best["slowdown"], 3),
            "onchip_reduction": round(base["onchip_bytes"] / best["onchip_bytes"], 4),
            "best_regions_paper_definition": best_paper["regions"],
            "utilization_gain_paper_definition": round(best_paper["compute_utilization_paper"]
                                                       / base["compute_utilization_paper"], 4),
            "slowdown_pct_paper_definition": round(100 * best_paper["slowdown"], 3)}


def run(regions=REGIONS, tilings=TILINGS, shape=None, tokens=None, trace=TRACE) -> dict:
    """The study; ``shape``/``tokens`` shrink it for the tests (see ``dynamic_tiling.run``)."""
    import paper_common
    m = shape_of(trace, shape)
    calls = [{"trace": trace, "tiling": tiling, "tile": tile, "experts_per_region": m["experts"] // n,
              "tokens": tokens, "shape": shape, "dram": paper_common.DRAM} for tiling, tile in tilings for n in regions]
    results = paper_common.run_points(
        moe_task, calls, lambda c: f"{trace} {c['tiling']}" + (f" tile {c['tile']}" if c["tile"] else "")
        + f": {m['experts'] // c['experts_per_region']} regions", lambda c: [trace_file(c["trace"])])
    points, by_tiling = [], {}
    for tiling, tile in tilings:
        pts = [r for c, r in zip(calls, results) if c["tiling"] == tiling and c["tile"] == tile]
        for p in pts:
            p["slowdown"] = round(p["cycles"] / pts[0]["cycles"] - 1, 5)
            p["allocated_ops_paper"] = paper_allocated_ops(p["regions"], m["experts"])
            # each op at one matmul unit's peak (allocated_flops_per_cycle / matmul_units)
            per_op = p["allocated_flops_per_cycle"] / p["matmul_units"]
            p["compute_utilization_paper"] = round(p["matmul_flops"] / (p["cycles"] * p["allocated_ops_paper"]
                                                                        * per_op), 8)
        by_tiling[tiling] = summarize(pts)
        points += pts
    top = by_tiling.get("dynamic") or next(iter(by_tiling.values()))
    return {"study": "time_multiplexing", "trace": trace, "regions": list(regions),
            "max_slowdown_pct": 100 * MAX_SLOWDOWN, **top, "by_tiling": by_tiling, "paper": PAPER,
            "points": points, "wall_s": round(sum(p["wall_s"] for p in points), 1)}


COLUMNS = [("tiling", "tiling", "s"), ("regions", "regions", "d"), ("cycles", "cycles", ",d"),
           ("slowdown_pct", "slowdown %", ".2f"), ("allocated_flops_per_cycle", "alloc FLOP/cyc", ",d"),
           ("compute_utilization", "compute util", ".5f"), ("allocated_ops_paper", "paper ops", "d"),
           ("compute_utilization_paper", "paper util", ".5f"), ("onchip_mb", "on-chip MB", ".1f"),
           ("bandwidth_utilization", "BW util", ".3f"), ("wall_s", "wall s", ".1f")]


def report(res: dict) -> str:
    rows = [{**p, "slowdown_pct": 100 * p["slowdown"], "onchip_mb": p["onchip_bytes"] / 1e6} for p in res["points"]]
    lines = [table(rows, COLUMNS), ""]
    for tiling, s in res["by_tiling"].items():
        lines.append(f"{tiling}: {s['best_regions']} shared regions within {res['max_slowdown_pct']:.0f} % of "
                     f"{s['dedicated_regions']} dedicated: compute utilization x{s['utilization_gain']:.2f} at "
                     f"{s['slowdown_pct']:.2f} % slowdown, on-chip memory /{s['onchip_reduction']:.2f}; the paper's "
                     f"definition x{s['utilization_gain_paper_definition']:.2f} at "
                     f"{s['best_regions_paper_definition']} regions ({s['slowdown_pct_paper_definition']:.2f} %)")
    lines.append(f"(paper: about {PAPER['utilization_gain']}x compute utilization at under 5 % slowdown)")
    return "\n".join(lines)


def plot(res: dict, path) -> None:
    fig, (a1, a2) = figure(1, 2, figsize=(11, 4.2))
    for tiling, color in (("static", "tab:blue"), ("dynamic", "tab:red")):
        pts = [p for p in res["points"] if p["tiling"] == tiling]
        if not pts:
            continue
        label = tiling + (f" tile {pts[0]['tile']}" if pts[0]["tile"] else "")
        x = [p["regions"] for p in pts]
        a1.plot(x, [100 * p["slowdown"] for p in pts], "o-", color=color, label=label)
        a2.plot(x, [p["compute_utilization"] for p in pts], "o-", color=color, label=label)
    a1.axhline(100 * MAX_SLOWDOWN, color="gray", linestyle="--", linewidth=1, label="5 % slowdown")
    for ax, ylabel in ((a1, "slowdown vs 128 regions (%)"), (a2, "compute utilization")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(res["regions"]))
        ax.set_xticklabels([str(r) for r in res["regions"]])
        ax.invert_xaxis()
        ax.set_xlabel("expert regions (128 = dedicated)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    a2.set_yscale("log")
    fig.suptitle(f"{res['trace']}: configuration time-multiplexing (model)")
    save(fig, path)


def small_graphs() -> dict:
    """Small instance for the docs: 4 experts sharing 2 regions, dynamic tiling, top-1, hidden 32."""
    from step_hdl.workloads.moe import moe_graph
    return {"shared": moe_graph(4, 4, 1, 32, 64, 32, "int16", "dynamic", experts_per_region=2)}


def main(argv=None) -> int:
    from step_hdl.workloads.traces import routing_trace
    args = cli("time_multiplexing", __doc__).parse_args(argv)
    return study_main(args, "time_multiplexing", small_graphs, lambda: routing_trace(TRACE),
                      lambda: run((128, 32), (("dynamic", None),)) if args.quick else run(), report, plot)


if __name__ == "__main__":
    sys.exit(main())
