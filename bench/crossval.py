"""Cross-validation of the approximate model against the RTL on every workload.

Runs every point of :data:`POINTS` in RTL (Verilator; one build per design
structure: a SwiGLU sweep shares one fabric; outputs bit-exact against the
interpreter) and the model on the same fabric and DRAM preset, then prints per
point the RTL and model cycles and the error, and per workload and over all
points the Pearson correlation, the mean and the worst error. The points:

* SwiGLU: the paper's 15-point sweep at 16x16 (B=64 H=256 I=512), and the same
  sweep at a quarter of the size on 4x4 tiles (B=16 H=64 I=128);
* MoE on the real ``mixtral_b64`` routing, H=16 I=32 on 4x4 tiles: static token
  tiles of 3, 4, 6, 8, 10, 16 rows and dynamic tiles; and 64 tokens of
  ``mixtral_b1024``, dynamic;
* time-multiplexed MoE (``mixtral_b64``, H=4 I=8): 1, 2, 4 experts per region;
* GQA decode on real KV traces (b16 trace 3, lengths / 64; b64 trace 0, lengths /
  256), 4 regions, each parallelization strategy;
* every one with DRAM preset ``paper`` (8 channels, 256 B/cycle), and the 4x4
  SwiGLU sweep, two MoE tilings, the time-multiplexed MoE and GQA (b16) also with
  ``paper-studies`` (32 channels, 1,024 B/cycle).

RTL results are kept in ``--cache`` (default ``~/.cache/step-hdl/crossval.json``)
as each point finishes, so an interrupted run resumes and a model change is
checked again in seconds (``--rtl-json PATH`` compares measured results without
running anything). The first full run builds 26 fabrics (61 minutes on two cores, 2026-12-04).

    python bench/crossval.py [--json PATH] [--plot PNG] [--only swiglu moe ...] [--rtl-json PATH] [--save-rtl PATH]

``bench/data/crossval-rtl.json`` holds the RTL results of every point, measured at the commit it names
(``--save-rtl``): ``--rtl-json bench/data/crossval-rtl.json`` checks a model change against them in seconds,
and ``tests/test_compare.py`` does so in the default suite. Measure them again when a unit's timing
changes.

``--json`` writes ``{"points": [{workload, params, tile, dram, rtl_cycles, model_cycles, error_pct, and every
parameter}], "pearson", "mape_pct", "worst_pct", "per_workload": {...}, "effects": [...]}``; ``effects``:
the paper studies' effects at reduced size measured both ways (dynamic tiling: each static tile's cycles over
dynamic's; time-multiplexing: 2 and 4 experts per region over 1; dynamic parallelization: the better static
schedule over dynamic), per preset. Goal (issue 19): Pearson >= 0.99,
mean error <= 5 %, worst <= 10 % over all points.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from step_hdl.flow.compare import SWEEPS, CompareError, Point, compare, load_rtl_json, plot, workload_label
from step_hdl.flow.sweep.compare import measure_points
from step_hdl.workloads.traces import TraceNotFound

CACHE = Path.home() / ".cache" / "step-hdl" / "crossval.json"


def points() -> list[Point]:
    pts = [p for name in SWEEPS for p in SWEEPS[name]("paper")]
    studies = (SWEEPS["swiglu-4"]("paper-studies")
               + [p for p in SWEEPS["moe"]("paper-studies") if p.params["tiling"] == "dynamic"
                  or p.params.get("tile") == 4]
               + SWEEPS["moe-tm"]("paper-studies") + SWEEPS["gqa"]("paper-studies"))
    extra = [Point("moe", {"trace": "mixtral_b1024", "tokens": 64, "hidden": 16, "inter": 32, "tile-inter": 16,
                           "tiling": "dynamic"}, 4, "paper", "moe dynamic b1024"),
             Point("gqa", {"batch": 64, "kv-trace": "0", "scale": 256, "group": 4, "head-dim": 4, "regions": 4,
                           "strategy": "dynamic"}, 4, "paper", "gqa b64 dynamic")]
    return pts + studies + extra


POINTS = points()


def effects(points: list[dict]) -> list[dict]:
    """The paper studies' effects at reduced size, in RTL and in the model, from the compared points of each
    preset: dynamic tiling (each static tile's cycles over dynamic's), time-multiplexing (2 and 4 experts per
    region over 1) and dynamic parallelization (the better static schedule over dynamic)."""
    def find(dram, workload, **params):
        for p in points:
            if p["dram"] == dram and p["workload"] == workload and all(p["params"].get(k) == v
                                                                      for k, v in params.items()):
                return p
        return None
    out = []
    for dram in sorted({p["dram"] for p in points}):
        def add(study, name, num, den):
            if num and den and all(num) and den:
                rtl = min(p["rtl_cycles"] for p in num) / den["rtl_cycles"]
                mod = min(p["model_cycles"] for p in num) / den["model_cycles"]
                out.append({"study": study, "effect": name, "dram": dram, "rtl": round(rtl, 4),
                            "model": round(mod, 4), "gap_pct": round(100 * (mod / rtl - 1), 2)})
        moe = dict(trace="mixtral_b64", hidden=16)
        dyn = find(dram, "moe", tiling="dynamic", **moe)
        for t in (3, 4, 6, 8, 10, 16):
            add("dynamic tiling", f"static {t} / dynamic", [find(dram, "moe", tiling="static", tile=t, **moe)], dyn)
        tm1 = find(dram, "moe", hidden=4, **{"experts-per-region": 1})
        for g in (2, 4):
            add("time-multiplexing", f"{g} per region / 1", [find(dram, "moe", hidden=4, **{"experts-per-region": g})],
                tm1)
        gqa = dict(batch=16, scale=64)
        add("dynamic parallelization", "better static / dynamic",
            [find(dram, "gqa", strategy=s, **gqa) for s in ("interleaved", "contiguous")],
            find(dram, "gqa", strategy="dynamic", **gqa))
    return out


def _commit() -> str | None:
    """The repository's commit (with ``+dirty`` for uncommitted changes), or None outside a git checkout."""
    import subprocess
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _flat(p: dict) -> dict:
    """A compared point with its parameters also at the top level (the JSON's 'every parameter')."""
    return {**p, **{k: v for k, v in p["params"].items() if k not in p}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", default=None, metavar="WORKLOAD",
                    help="only these workloads (swiglu, moe, gqa; moe-tm: the time-multiplexed MoE)")
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--cache", default=str(CACHE), help=f"RTL results measured so far (default: {CACHE})")
    ap.add_argument("--rtl-json", default=None, help="compare these measured results; run no RTL")
    ap.add_argument("--json", default=None, help="write the comparison here")
    ap.add_argument("--plot", default=None, metavar="PNG", help="model against RTL cycles, a colour per workload")
    ap.add_argument("--save-rtl", default=None, metavar="JSON",
                    help="write the RTL results (with the commit and back-end they were measured at) here, for "
                         "--rtl-json; bench/data/crossval-rtl.json is the stored set the tests compare the model with")
    args = ap.parse_args(argv)
    from step_hdl.errors import check_writable
    from step_hdl.errors import OutputError
    try:                                # the command line's own check of an output path, before any work
        for flag, path in (("--json", args.json), ("--save-rtl", args.save_rtl), ("--plot", args.plot)):
            check_writable(path, flag)
    except OutputError as exc:
        print(f"crossval: error: {exc}", file=sys.stderr)
        return 2
    chosen = [p for p in POINTS if args.only is None or workload_label(p.to_json()) in args.only
              or p.workload in args.only]
    if not chosen:
        print(f"crossval: no point of {args.only}", file=sys.stderr)
        return 2
    try:
        if args.rtl_json:
            results = load_rtl_json(args.rtl_json)
        else:
            cache = Path(args.cache)
            done = {}
            if cache.exists():
                done = {Point.from_json(r).key(): r for r in load_rtl_json(cache)}

            todo = [p for p in chosen if p.key() not in done]
            if todo:        # through step-hdl sweep: both cores, each point cached as it finishes
                print(f"RTL of {len(todo)} points on {args.backend} ...", file=sys.stderr, flush=True)
                for r in measure_points(todo, args.backend, progress=sys.stderr.isatty()):
                    done[Point.from_json(r).key()] = r
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(list(done.values()), indent=1))
            results = [done[p.key()] for p in chosen]
        if args.save_rtl:
            Path(args.save_rtl).write_text(json.dumps({"rtl_commit": _commit(), "backend": args.backend,
                                                       "points": results}, indent=1) + "\n")
        cmp = compare(results, progress=lambda m: print(m, file=sys.stderr, flush=True))
    except TraceNotFound as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return 0
    except CompareError as exc:
        print(f"crossval: error: {exc}", file=sys.stderr)
        return 2
    print(cmp.table())
    found = effects(cmp.points)
    if found:
        print("\nthe studies' effects at reduced size (RTL, model, model/RTL):")
        for e in found:
            print(f"  {e['study']}, {e['effect']}, {e['dram']}: RTL {e['rtl']:.3f}x, model {e['model']:.3f}x "
                  f"({e['gap_pct']:+.1f} %)")
    if args.plot:
        plot(cmp, args.plot, f"model against RTL, {len(cmp.points)} points")
    if args.json:
        out = cmp.to_dict()
        out["points"] = [_flat(p) for p in out["points"]]
        out["effects"] = found
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
