"""Dynamic parallelization of grouped-query attention decode (issue 6, study 3).

GQA decode as in Qwen3-30B-A3B (32 query heads = 4 KV heads x group 8, head
dimension 128, fp32) over the real KV-cache-length traces of batch 16, 64 and
80 (``../shared/traces/kv_cache_lengths``: 21 + 15 + 15 batches), on 4 parallel
regions, on the approximate model (timing-only, 16x16 physical tiles, the
paper's DRAM). A work item is one (request, KV head) pair; the strategies
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
  means of each strategy's normalized cycles and of the best-static speedup.

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
              head_dim: int = HEAD_DIM, regions: int = REGIONS) -> dict:
    from step_hdl.workloads.gqa import gqa_graph, static_assignment
    batch = len(lens)
    rows = np.repeat(lens, heads)
    table_ = np.stack([np.concatenate([[0], np.cumsum(rows)[:-1]]), rows], 1).astype(np.int32)
    g = gqa_graph(batch, heads, group, head_dim, regions, strategy, DTYPE, total_rows=int(rows.sum()))
    p = measure(g, DTYPE, tensors={"kv_table": table_}, role_of=gqa_role,
                keep=[f"r{r}_store" for r in range(regions)] + [f"r{r}_load_k" for r in range(regions)])
    out = {"strategy": strategy, **{k: v for k, v in p.to_dict().items() if k != "nodes"}, "roles": role_fractions(p),
           "region_finish": [p.nodes[f"r{r}_store"]["finish"] for r in range(regions)],
           "kv_load_busy": [round(p.nodes[f"r{r}_load_k"]["busy"] / p.cycles, 4) for r in range(regions)]}
    if strategy != "dynamic":
        per_region = np.bincount(static_assignment(batch, regions, strategy), weights=lens, minlength=regions)
        out["imbalance"] = round(float(per_region.max() / per_region.mean()), 4)
    return out


def _summary(rows: list[dict]) -> dict:
    return {"batches": len(rows),
            **{f"geomean_{s}_norm": round(geomean(r[f"{s}_norm"] for r in rows), 4) for s in STRATEGIES[:2]},
            "geomean_speedup_vs_best_static": round(geomean(r["speedup_vs_best_static"] for r in rows), 4),
            "max_speedup_vs_best_static": round(max(r["speedup_vs_best_static"] for r in rows), 4),
            "geomean_best_static_imbalance": round(geomean(r[r["best_static"]]["imbalance"] for r in rows), 4)}


def run(batches=BATCHES, scale: int = SCALE, files_of=None, **shape) -> dict:
    """The study; ``files_of(batch)`` picks the trace files (default: all of them), ``shape`` shrinks the graph."""
    from step_hdl.workloads.gqa import scale_lengths
    from step_hdl.workloads.traces import kv_lengths, kv_stdev, kv_traces
    files_of = files_of or kv_traces
    per_batch = []
    for batch in batches:
        for path in files_of(batch):
            lens = scale_lengths(kv_lengths(path), scale)
            row = {"batch": batch, "trace": path.stem, "stdev": kv_stdev(path), "class": spread_class(kv_stdev(path)),
                   "kv_rows": int(lens.sum()) * shape.get("heads", KV_HEADS)}
            for s in STRATEGIES:
                progress(f"b{batch} {path.stem} {s}")
                row[s] = gqa_point(lens, s, **shape)
            dyn = row["dynamic"]["cycles"]
            for s in STRATEGIES[:2]:
                row[f"{s}_norm"] = round(row[s]["cycles"] / dyn, 4)
            row["best_static"] = min(STRATEGIES[:2], key=lambda s: row[s]["cycles"])
            row["speedup_vs_best_static"] = row[f"{row['best_static']}_norm"]
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
    return "\n".join(lines)


def plot(res: dict, path) -> None:
    groups = [(c, v) for c, v in res["by_class"].items()]
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
    args = ap.parse_args(argv)
    quick = lambda: run((16,), args.scale, lambda b: [kv_traces(b)[0], kv_traces(b)[-1]])
    return study_main(args, "dynamic_parallelization", small_graphs, lambda: [kv_traces(b) for b in BATCHES],
                      quick if args.quick else lambda: run(BATCHES, args.scale), report, plot)


if __name__ == "__main__":
    sys.exit(main())
