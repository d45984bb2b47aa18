"""Dynamic parallelization of grouped-query attention decode (issue 6, study 3).

GQA decode as in Qwen3-30B-A3B (32 query heads = 4 KV heads x group 8, head
dimension 128, fp32) over the real KV-cache-length traces of batch 16, 64 and
80 (``../shared/traces/kv_cache_lengths``: 21 + 15 + 15 batches), on 4 parallel
regions, on the approximate model (timing-only, 16x16 physical tiles, DRAM
preset ``--dram``, by default the paper's dynamic studies' 32 channels,
1,024 B/cycle). A work item is one (request, KV head) pair; the strategies
(``step_hdl.workloads.gqa``): static ``contiguous`` (requests split into 4
consecutive blocks), static ``interleaved`` (request b to region b mod 4) and
``dynamic`` (each item to the first free region: EagerMerge of the regions'
"done" announcements drives the Partition).

KV lengths are divided by ``--scale`` (default 32; at least 1 row), which keeps
every batch's relative spread and divides the model's work (one event per KV
row) by the same factor; ``--scale 1`` is the full size (about an hour on two
cores). Measured on three b16 batches (low, medium and high spread), the
best-static/dynamic cycle ratios at scale 32 are within 2 % of scale 1 (and
slightly smaller); docs/study-dynamic-parallelization.md compares scales.

Variability classes, by the rounded standard deviation of the batch's KV
lengths in the trace file name (the traces come in clusters of three around
175-200, 480-560, 750, 985, 1225, 1300-1460 and 1880-1975): ``low`` below 700,
``medium`` 700 to 1199, ``high`` 1200 and above.

Per batch: cycles of each strategy, normalized to dynamic
(``cycles(strategy) / cycles(dynamic)``), bandwidth utilization, and the
static imbalance (largest region's KV rows over the mean).

Summary (JSON fields):

* ``geomean_speedup_vs_best_static``: geometric mean over every batch of every
  batch size of ``min(cycles(contiguous), cycles(interleaved)) / cycles(dynamic)``
  (the better static strategy chosen per batch);
* ``geomean_speedup_vs_best_static_strategy``: the same with one static strategy
  for all batches, the one with the smaller geometric mean of cycles;
* ``geomean_best_static_imbalance``: geometric mean of the better static
  strategy's imbalance (largest region's KV rows / mean), the speedup a
  perfectly balanced schedule would have over it when regions do not compete;
* ``by_class`` and ``by_batch``: per class (and per batch size) the geometric
  means of each strategy's normalized cycles and of the best-static speedup;
* ``geomean_speedup_vs_best_static_c4`` / ``_c8``: the same with 4 and 8
  credits per region instead of the workload's 2: a region asks for its next
  item once it holds fewer than that many, so more credits hide more of the
  dispatch loop's round trip (an item's chain of some 40 units, its store's
  acknowledgement, the merge of the regions' announcements);
* ``bandwidth_sweep``: where dynamic assignment pays. Each region reads its KV
  rows through its own load's memory port, one physical tile (a ``[1, 16]`` fp32
  row piece, 64 bytes) accepted per cycle (``sim.dram``): a region's own rate
  is ``port_bytes_per_cycle`` = 64 B/cycle, 256 for the 4 regions. The sweep
  runs three batches of each size (the lowest, middle and highest spread) with
  the preset's DRAM at 4, 8, 16, 32 and 64 channels (128 to 2,048 B/cycle, the
  rest of the preset as it is): per total bandwidth, the geomean speedup of
  dynamic over the better static schedule. Below the regions' summed rate the
  memory binds the whole fabric and no assignment can be faster; above it each
  region's own rate binds, and the balance of work across regions sets the
  latency.

    python bench/paper/dynamic_parallelization.py [--json PATH] [--plot PATH] [--quick] [--scale S]

``--quick``: the lowest- and highest-spread b16 batches only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_common import (
    cli,
    figure,
    geomean,
    measure,
    progress,
    role_fractions,
    save,
    study_main,
    table,
)

DTYPE = "fp32"
BATCHES = (16, 64, 80)
KV_HEADS, GROUP, HEAD_DIM, REGIONS = 4, 8, 128, 4
STRATEGIES = ("contiguous", "interleaved", "dynamic")
CLASSES = (("low", 0, 700), ("medium", 700, 1200), ("high", 1200, 1 << 30))
SCALE = 32
#: credits per region besides the workload's 2 (items a region holds at once): how much of the dispatch
#: loop's round trip they hide
MORE_CREDITS = (4, 8)
#: the paper: about 1.5x over the best static schedule (up to about 2.7x in the final version)
PAPER = {"geomean_speedup_vs_best_static": 1.5, "max_speedup": 2.7}


def spread_class(stdev: int) -> str:
    return next(name for name, lo, hi in CLASSES if lo <= stdev < hi)


def gqa_role(name: str):
    base = name.split("_", 1)[1] if name[:1] == "r" and name[1:2].isdigit() else name
    if base in ("load_k", "load_v"):
        return "KV loads"
    if base in ("scores", "pv"):
        return "matmuls"
    if base in ("pack_k", "pack_v"):
        return "KV packing"
    return None


def gqa_point(lens: np.ndarray, strategy: str, heads: int = KV_HEADS, group: int = GROUP,
              head_dim: int = HEAD_DIM, regions: int = REGIONS, credits: int = 2, dram=None) -> dict:
    from step_hdl.workloads.gqa import gqa_graph, static_assignment
    batch = len(lens)
    rows = np.repeat(lens, heads)
    table_ = np.stack([np.concatenate([[0], np.cumsum(rows)[:-1]]), rows], 1).astype(np.int32)
    g = gqa_graph(batch, heads, group, head_dim, regions, strategy, DTYPE, total_rows=int(rows.sum()),
                  credits=credits)
    p = measure(g, DTYPE, tensors={"kv_table": table_}, role_of=gqa_role,
                keep=[f"r{r}_store" for r in range(regions)] + [f"r{r}_load_k" for r in range(regions)], dram=dram,
                bindings={f"r{r}_rows_len_max": int(lens.max()) for r in range(regions)})
    out = {"strategy": strategy, **{k: v for k, v in p.to_dict().items() if k != "nodes"}, "roles": role_fractions(p),
           "region_finish": [p.nodes[f"r{r}_store"]["finish"] for r in range(regions)],
           "kv_load_busy": [round(p.nodes[f"r{r}_load_k"]["busy"] / p.cycles, 4) for r in range(regions)]}
    if strategy != "dynamic":
        per_region = np.bincount(static_assignment(batch, regions, strategy), weights=lens, minlength=regions)
        out["imbalance"] = round(float(per_region.max() / per_region.mean()), 4)
    return out


def gqa_task(path: str, scale: int, strategy: str, credits: int, shape: dict, dram) -> dict:
    """:func:`gqa_point` of KV trace ``path`` (lengths divided by ``scale``), as a process pool's task: plain
    data in and out; ``dram``: a preset name or the fields of a ``DramParams``."""
    from step_hdl.sim.model.dram import DramParams
    from step_hdl.workloads.gqa import scale_lengths
    from step_hdl.workloads.traces import kv_lengths
    lens = scale_lengths(kv_lengths(path), scale)
    return gqa_point(lens, strategy, credits=credits, dram=DramParams(**dram) if isinstance(dram, dict) else dram,
                     **shape)


def _summary(rows: list[dict]) -> dict:
    return {"batches": len(rows),
            **{f"geomean_speedup_vs_best_static_c{c}": round(geomean(r[f"speedup_vs_best_static_c{c}"]
                                                                     for r in rows), 4)
               for c in MORE_CREDITS if all(f"speedup_vs_best_static_c{c}" in r for r in rows)},
            **{f"geomean_{s}_norm": round(geomean(r[f"{s}_norm"] for r in rows), 4) for s in STRATEGIES[:2]},
            "geomean_speedup_vs_best_static": round(geomean(r["speedup_vs_best_static"] for r in rows), 4),
            "max_speedup_vs_best_static": round(max(r["speedup_vs_best_static"] for r in rows), 4),
            "geomean_best_static_imbalance": round(geomean(r[r["best_static"]]["imbalance"] for r in rows), 4)}


#: DRAM channel counts of the bandwidth sweep (the preset's other parameters kept)
SWEEP_CHANNELS = (4, 8, 16, 32, 64)


def bandwidth_sweep(batches=BATCHES, scale: int = SCALE, files_of=None, channels=SWEEP_CHANNELS,
                    **shape) -> list[dict]:
    """Geomean speedup of dynamic over the better static schedule per DRAM bandwidth (``run``'s docstring)."""
    import dataclasses

    import paper_common
    from step_hdl.sim.model.dram import DRAM_PRESETS
    from step_hdl.workloads.traces import kv_traces
    files_of = files_of or (lambda b: [f for i, f in enumerate(kv_traces(b))
                                       if i in (0, len(kv_traces(b)) // 2, len(kv_traces(b)) - 1)])
    preset = paper_common.DRAM
    base = DRAM_PRESETS[preset] if isinstance(preset, str) else preset
    regions = shape.get("regions", REGIONS)
    port = paper_common.PHYS_TILE * 4            # one [1, P] fp32 row piece per cycle per port
    out = []
    try:
        for c in channels:
            paper_common.DRAM = dataclasses.replace(base, channels=c, inflight=base.inflight * c // base.channels)
            progress(f"bandwidth sweep: {c} channels ({paper_common.DRAM.peak_bytes_per_cycle:.0f} B/cycle)")
            res = run(batches, scale, files_of, **shape)
            out.append({"channels": c, "total_bytes_per_cycle": paper_common.DRAM.peak_bytes_per_cycle,
                        **{k: v for k, v in res.items() if k.startswith("geomean_speedup_vs_best_static_c")},
                        "port_bytes_per_cycle": port, "regions_bytes_per_cycle": regions * port,
                        "total_over_regions": round(paper_common.DRAM.peak_bytes_per_cycle / (regions * port), 3),
                        "batches": len(res["per_batch"]),
                        "geomean_speedup_vs_best_static": res["geomean_speedup_vs_best_static"],
                        "max_speedup_vs_best_static": res["max_speedup_vs_best_static"]})
    finally:
        paper_common.DRAM = preset
    return out


def run(batches=BATCHES, scale: int = SCALE, files_of=None, **shape) -> dict:
    """The study; ``files_of(batch)`` picks the trace files (default: all of them), ``shape`` shrinks the graph."""
    from step_hdl.workloads.gqa import scale_lengths
    from step_hdl.workloads.traces import kv_lengths, kv_stdev, kv_traces
    import dataclasses

    import paper_common
    files_of = files_of or kv_traces
    dram = paper_common.DRAM if isinstance(paper_common.DRAM, str) else dataclasses.asdict(paper_common.DRAM)
    files = [(batch, path) for batch in batches for path in files_of(batch)]
    runs = [(s, 2, s) for s in STRATEGIES] + [("dynamic", c, f"dynamic_c{c}") for c in MORE_CREDITS]
    calls = [{"path": str(path), "scale": scale, "strategy": s, "credits": c, "shape": shape, "dram": dram}
             for _, path in files for s, c, _ in runs]
    results = iter(paper_common.run_points(
        gqa_task, calls, lambda c: f"{Path(c['path']).parent.name} {Path(c['path']).stem} {c['strategy']}"
        + (f", {c['credits']} credits per region" if c["credits"] != 2 else ""), lambda c: [c["path"]]))
    per_batch = []
    for batch, path in files:
        lens = scale_lengths(kv_lengths(path), scale)
        row = {"batch": batch, "trace": path.stem, "stdev": kv_stdev(path), "class": spread_class(kv_stdev(path)),
               "kv_rows": int(lens.sum()) * shape.get("heads", KV_HEADS)}
        for _, _, name in runs:
            row[name] = next(results)
        dyn = row["dynamic"]["cycles"]
        for s in STRATEGIES[:2]:
            row[f"{s}_norm"] = round(row[s]["cycles"] / dyn, 4)
        row["best_static"] = min(STRATEGIES[:2], key=lambda s: row[s]["cycles"])
        row["speedup_vs_best_static"] = row[f"{row['best_static']}_norm"]
        for c in MORE_CREDITS:
            row[f"speedup_vs_best_static_c{c}"] = round(row[row["best_static"]]["cycles"]
                                                        / row[f"dynamic_c{c}"]["cycles"], 4)
        per_batch.append(row)
    by_class = {c: _summary(rs) for c, _, _ in CLASSES if (rs := [r for r in per_batch if r["class"] == c])}
    by_batch = {str(b): _summary(rs) for b in batches if (rs := [r for r in per_batch if r["batch"] == b])}
    overall = _summary(per_batch)
    strat = min(STRATEGIES[:2], key=lambda s: geomean(r[s]["cycles"] for r in per_batch))
    return {"study": "dynamic_parallelization", "dtype": DTYPE, "scale": scale, "regions": shape.get("regions", REGIONS),
            "kv_heads": shape.get("heads", KV_HEADS), "group": shape.get("group", GROUP),
            "head_dim": shape.get("head_dim", HEAD_DIM),
            "classes": {c: [lo, hi] for c, lo, hi in CLASSES},
            "geomean_speedup_vs_best_static": overall["geomean_speedup_vs_best_static"],
            **{k: v for k, v in overall.items() if k.startswith("geomean_speedup_vs_best_static_c")},
            "max_speedup_vs_best_static": overall["max_speedup_vs_best_static"],
            "geomean_best_static_imbalance": overall["geomean_best_static_imbalance"],
            "best_static_strategy": strat,
            "geomean_speedup_vs_best_static_strategy": round(geomean(r[f"{strat}_norm"] for r in per_batch), 4),
            "by_class": by_class, "by_batch": by_batch, "paper": PAPER, "per_batch": per_batch,
            "wall_s": round(sum(r[s]["wall_s"] for r in per_batch for s in STRATEGIES), 1)}


COLUMNS = [("batch", "batch", "d"), ("trace", "trace", "s"), ("class", "class", "s"),
           ("contiguous_norm", "contiguous/dyn", ".3f"), ("interleaved_norm", "interleaved/dyn", ".3f"),
           ("dyn_cycles", "dynamic cycles", ",d"), ("imb_c", "imbal. contig", ".2f"),
           ("imb_i", "imbal. interl", ".2f"), ("dyn_bw", "dyn BW util", ".3f"), ("wall", "wall s", ".1f")]


def report(res: dict) -> str:
    rows = [{**r, "dyn_cycles": r["dynamic"]["cycles"], "imb_c": r["contiguous"]["imbalance"],
             "imb_i": r["interleaved"]["imbalance"], "dyn_bw": r["dynamic"]["bandwidth_utilization"],
             "wall": sum(r[s]["wall_s"] for s in STRATEGIES)} for r in res["per_batch"]]
    lines = [table(rows, COLUMNS), "", "geometric means of cycles normalized to dynamic:"]
    for name, group in [(f"class {k}", v) for k, v in res["by_class"].items()] + \
                       [(f"batch {k}", v) for k, v in res["by_batch"].items()]:
        lines.append(f"  {name:13s} ({group['batches']:2d} batches): contiguous {group['geomean_contiguous_norm']:.3f}"
                     f"  interleaved {group['geomean_interleaved_norm']:.3f}  dynamic speedup over the better static "
                     f"{group['geomean_speedup_vs_best_static']:.3f} (max {group['max_speedup_vs_best_static']:.3f}; its "
                     f"imbalance {group['geomean_best_static_imbalance']:.3f})")
    lines.append(f"\ngeomean speedup vs best static (per batch): {res['geomean_speedup_vs_best_static']:.3f}x; vs the "
                 f"better static strategy overall ({res['best_static_strategy']}): "
                 f"{res['geomean_speedup_vs_best_static_strategy']:.3f}x; KV lengths / {res['scale']} "
                 f"(paper: about {PAPER['geomean_speedup_vs_best_static']}x, up to about {PAPER['max_speedup']}x)")
    for c in MORE_CREDITS:
        if f"geomean_speedup_vs_best_static_c{c}" in res:
            lines.append(f"  with {c} credits per region: {res[f'geomean_speedup_vs_best_static_c{c}']:.3f}x")
    if res.get("bandwidth_sweep"):
        lines.append("\nbandwidth sweep (each region's port: "
                     f"{res['bandwidth_sweep'][0]['port_bytes_per_cycle']} B/cycle, "
                     f"{res['bandwidth_sweep'][0]['regions_bytes_per_cycle']} B/cycle for the regions):")
        for b in res["bandwidth_sweep"]:
            lines.append(f"  {b['channels']:3d} channels, {b['total_bytes_per_cycle']:6.0f} B/cycle "
                         f"({b['total_over_regions']:.2f}x the regions' rate): dynamic "
                         f"{b['geomean_speedup_vs_best_static']:.3f}x the better static (max "
                         f"{b['max_speedup_vs_best_static']:.3f}x; with 4 / 8 credits "
                         f"{b.get('geomean_speedup_vs_best_static_c4', 0):.3f}x / "
                         f"{b.get('geomean_speedup_vs_best_static_c8', 0):.3f}x) over {b['batches']} batches")
    return "\n".join(lines)


def plot(res: dict, path) -> None:
    groups = [(c, v) for c, v in res["by_class"].items()]
    sweep = res.get("bandwidth_sweep") or []
    if sweep:
        fig, (a1, a2, a3) = figure(1, 3, figsize=(17, 4.2), gridspec_kw={"width_ratios": [1, 2, 1.2]})
        x3 = [b["total_bytes_per_cycle"] for b in sweep]
        a3.plot(x3, [b["geomean_speedup_vs_best_static"] for b in sweep], "o-", color="tab:red",
                label="geomean, 2 credits per region")
        a3.plot(x3, [b["max_speedup_vs_best_static"] for b in sweep], "s--", color="tab:red", alpha=0.5,
                label="max, 2 credits")
        for c, color in zip(MORE_CREDITS, ("tab:purple", "tab:green")):
            if all(f"geomean_speedup_vs_best_static_c{c}" in b for b in sweep):
                a3.plot(x3, [b[f"geomean_speedup_vs_best_static_c{c}"] for b in sweep], "o-", color=color,
                        label=f"geomean, {c} credits per region")
        a3.axvline(sweep[0]["regions_bytes_per_cycle"], color="gray", linestyle=":", linewidth=1.5,
                   label="the regions' own rate")
        a3.axhline(1.0, color="black", linewidth=0.8)
        a3.set_xscale("log", base=2)
        a3.set_xlabel("DRAM bandwidth (B/cycle)")
        a3.set_ylabel("dynamic speedup over the better static")
        a3.set_title("where dynamic assignment pays")
        a3.legend(fontsize=8)
        a3.grid(True, alpha=0.3)
    else:
        fig, (a1, a2) = figure(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    x = np.arange(len(groups))
    for i, (s, color) in enumerate((("contiguous", "tab:blue"), ("interleaved", "tab:orange"))):
        a1.bar(x + (i - 0.5) * 0.35, [v[f"geomean_{s}_norm"] for _, v in groups], 0.35, color=color, label=s)
    a1.axhline(1.0, color="tab:red", linewidth=1.5, label="dynamic")
    a1.set_xticks(x)
    a1.set_xticklabels([f"{c}\n({v['batches']} batches)" for c, v in groups])
    a1.set_ylabel("cycles / dynamic (geomean)")
    a1.set_title("per variability class")
    a1.legend(fontsize=8)
    for s, m, color in (("contiguous", "o", "tab:blue"), ("interleaved", "s", "tab:orange")):
        a2.scatter([r["stdev"] for r in res["per_batch"]], [r[f"{s}_norm"] for r in res["per_batch"]], marker=m,
                   color=color, label=s, s=18)
    a2.axhline(1.0, color="tab:red", linewidth=1.5, label="dynamic")
    for _, lo, _ in CLASSES[1:]:
        a2.axvline(lo, color="gray", linestyle=":", linewidth=1)
    a2.set_xlabel("KV-length standard deviation of the batch (trace)")
    a2.set_ylabel("cycles / dynamic")
    a2.set_title(f"every batch (b{', b'.join(res['by_batch'])}; KV lengths / {res['scale']})")
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        ax.grid(True, alpha=0.3)
    save(fig, path)


def small_graphs() -> dict:
    """Small instances for the docs: 4 requests x 1 KV head, group 4, head dimension 16, on 2 regions."""
    from step_hdl.workloads.gqa import gqa_graph
    return {s: gqa_graph(4, 1, 4, 16, 2, s, DTYPE) for s in ("interleaved", "dynamic")}


def main(argv=None) -> int:
    from step_hdl.workloads.traces import kv_traces
    ap = cli("dynamic_parallelization", __doc__)
    ap.add_argument("--scale", type=int, default=SCALE, help="divide KV lengths by this (default %(default)s; 1 = full)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the bandwidth sweep")
    args = ap.parse_args(argv)

    def study(batches, files_of=None):
        res = run(batches, args.scale, files_of)
        res["bandwidth_sweep"] = [] if args.no_sweep else bandwidth_sweep(
            batches, args.scale, files_of, channels=(8, 32) if args.quick else SWEEP_CHANNELS)
        return res
    quick = lambda: study((16,), lambda b: [kv_traces(b)[0], kv_traces(b)[-1]])     # noqa: E731
    return study_main(args, "dynamic_parallelization", small_graphs, lambda: [kv_traces(b) for b in BATCHES],
                      quick if args.quick else lambda: study(BATCHES), report, plot)


if __name__ == "__main__":
    sys.exit(main())
