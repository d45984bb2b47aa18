"""``step-hdl sweep``: the command line of :mod:`step_hdl.flow.sweep`.

    step-hdl sweep moe --grid trace=mixtral_b64,qwen_b64 --grid tile=4,8,16 --set tiling=static \\
        --eval metrics,model --out moe.csv --plot pareto.png --pareto onchip_bytes,model_cycles
    step-hdl sweep --points sweep.json --executor ray --address auto --json

A definition file (``--points``) is a JSON object ``{"workload": ..., "grid":
{name: [values]}, "set": {name: value}, "eval": [...], "group": ...}`` (the
command-line options' meaning), or ``{"points": [point, ...]}`` with explicit
points (``SweepPoint.to_json``), or both.
"""

from __future__ import annotations

import argparse
import json
import sys

from step_hdl.flow.sweep.spec import EVALS, SweepError, grid, SweepPoint

#: the results the summary shows per point (all of them are in --out and --json)
RESULTS = ("offchip_bytes", "onchip_bytes", "model_cycles", "rtl_cycles", "rtl_outputs_match")
EXAMPLE = "e.g. --grid tile-b=4,8 --grid phys-tile=4,16 --grid fabric.mem_inflight=32,64"


def _value(text: str):
    """A command-line value: an integer, true/false, or text."""
    if text.lstrip("-").isdigit():
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def _assignment(many: bool):
    def parse(text: str):
        name, eq, rest = text.partition("=")
        if not eq or not name or not rest:
            raise argparse.ArgumentTypeError(f"expected NAME={'V1,V2,...' if many else 'VALUE'}, got {text!r}")
        if many:
            return name, [_value(v) for v in rest.split(",")]
        return name, _value(rest)
    return parse


def add_parser(sub, workloads) -> None:
    from step_hdl.flow.sweep.executors import EXECUTORS
    p = sub.add_parser("sweep", help="evaluate a grid or list of points (metrics, model, RTL), cached, in parallel",
                       description="Evaluate every point of a grid (or a definition file) with the metrics, the "
                                   "model and/or the RTL, on a local process pool (default) or a Ray cluster; "
                                   "results are cached by content, so a re-run computes only new or changed "
                                   "points and an interrupted sweep resumes.")
    p.add_argument("workload", nargs="?", choices=tuple(workloads), metavar="WORKLOAD",
                   help=f"the workload ({', '.join(workloads)}); or give --points")
    p.add_argument("--grid", action="append", type=_assignment(True), default=[], metavar="NAME=V1,V2",
                   help="an axis: a workload parameter, phys-tile, dram or fabric.<field> and its values "
                        f"({EXAMPLE}); every combination of the axes is a point")
    p.add_argument("--set", action="append", type=_assignment(False), default=[], metavar="NAME=VALUE",
                   help="a value every point takes (same names as --grid)")
    p.add_argument("--points", default=None, metavar="JSON", help="a sweep definition file (see docs/sweep.md)")
    p.add_argument("--eval", default=None, metavar="LIST",
                   help=f"evaluations, comma-separated: {', '.join(EVALS)} (default: model)")
    p.add_argument("--group", default="",
                   help="a name: the points share one fabric sized for all of them (one RTL build)")
    p.add_argument("--executor", default="process", choices=EXECUTORS,
                   help="process: a local pool (default); ray: a Ray cluster (pip install -e .[ray]); serial")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes, or CPUs of a local Ray cluster (default: one per core)")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (auto: the cluster this machine belongs to; default: a local one)")
    p.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"),
                   help="simulator of the sim evaluation (default: verilator)")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="result cache folder (default: $STEP_HDL_SWEEP_CACHE or ~/.cache/step-hdl/sweep)")
    p.add_argument("--no-cache", action="store_true", help="compute every point, store nothing")
    p.add_argument("--out", default=None, metavar="FILE", help="write the table here (.csv or .json)")
    p.add_argument("--plot", default=None, metavar="PNG", help="draw the Pareto front of --pareto here")
    p.add_argument("--pareto", default="onchip_bytes,model_cycles", metavar="X,Y",
                   help="two result fields, smaller is better (default: onchip_bytes,model_cycles)")
    p.add_argument("--force", action="store_true", help="overwrite --out and --plot files that exist")
    p.add_argument("--json", action="store_true", help="print one JSON object (no progress bar)")


def points_of(args) -> list:
    """The points the arguments define."""
    from step_hdl.errors import read_text
    evals = tuple(e for e in args.eval.split(",") if e) if args.eval is not None else None
    defn: dict = {}
    if args.points is not None:
        try:
            defn = json.loads(read_text(args.points, "sweep definition", SweepError))
        except json.JSONDecodeError as exc:
            raise SweepError(f"--points {args.points}: not valid JSON: {exc}") from None
        if not isinstance(defn, dict):
            raise SweepError(f"--points {args.points}: expected a JSON object, got {type(defn).__name__}")
        unknown = sorted(set(defn) - {"workload", "grid", "set", "eval", "group", "points"})
        if unknown:
            raise SweepError(f"--points {args.points}: unknown field(s) {', '.join(unknown)}; a definition has "
                             f"workload, grid, set, eval, group, points")
    workload = args.workload or defn.get("workload")
    axes = {**defn.get("grid", {}), **dict(args.grid)}
    fixed = {**defn.get("set", {}), **dict(args.set)}
    evals = evals or tuple(defn.get("eval", ("model",)))
    group = args.group or defn.get("group", "")
    points = []
    for i, obj in enumerate(defn.get("points", [])):
        points.append(SweepPoint.from_json(obj, f"--points {args.points}: point {i}", evals))
    if axes or fixed or not points:
        if not workload:
            raise SweepError("name a workload (step-hdl sweep WORKLOAD ...) or give --points with a workload or "
                             "points")
        points += grid(workload, axes, fixed, evals, group)
    return points


def cmd_sweep(args) -> int:
    from step_hdl.errors import check_writable
    from step_hdl.errors import OutputError
    from step_hdl.flow.sweep.cache import ResultCache
    from step_hdl.flow.sweep.run import run_sweep
    from step_hdl.flow.sweep.table import plot_pareto, write_table
    from pathlib import Path
    for path, opt in ((args.out, "--out"), (args.plot, "--plot")):
        check_writable(path, opt)
        if path is not None and Path(path).exists() and not args.force:
            raise OutputError(f"{opt} {path}: the file exists; give --force to overwrite it")
    if args.out is not None and not str(args.out).endswith((".csv", ".json")):
        raise SweepError(f"--out {args.out}: expected a file name ending in .csv or .json")
    if args.workers is not None and args.workers < 1:
        raise SweepError(f"--workers: expected an integer >= 1, got {args.workers}")
    x, _, y = args.pareto.partition(",")
    if not x or not y:
        raise SweepError(f"--pareto: expected two result fields X,Y, got {args.pareto!r}")
    points = points_of(args)
    cache = False if args.no_cache else ResultCache(args.cache)
    show = not args.json and sys.stderr.isatty()
    if not args.json:
        print(f"sweep: {len(points)} points on the {args.executor} executor", file=sys.stderr, flush=True)
    try:
        res = run_sweep(points, args.executor, args.workers, args.address, cache, args.backend, progress=show)
    except KeyboardInterrupt:
        print("step-hdl: sweep interrupted: the points finished so far are cached; run the same command again "
              "to resume", file=sys.stderr)
        return 130
    if args.out:
        write_table(res, args.out)
    front = plot_pareto(res.rows, x, y, args.plot) if args.plot else None
    if args.json:
        out = res.to_json()
        if front is not None:
            out["pareto"] = front
        print(json.dumps(out, indent=1))
        return 0
    print(f"{len(res.rows)} points: {res.computed} computed, {res.cached} from the cache, {res.failed} failed, "
          f"{res.wall_s:.1f} s")
    if len(res.rows) <= 30:
        varying = [k for k in _param_names(res.rows[0]) if len({repr(r.get(k)) for r in res.rows}) > 1]
        shown = [k for k in RESULTS if any(k in r for r in res.rows)]
        for r in res.rows:
            vals = " ".join(f"{k}={r.get(k)}" for k in varying)
            got = "  ".join(f"{k} {r[k]:,}" if isinstance(r.get(k), int) else f"{k} {r.get(k)}"
                            for k in shown if k in r)
            print(f"  {vals or r['workload']}: {got if r['status'] == 'ok' else 'failed'}"
                  + (" (cached)" if r["cached"] else ""))
    for r in [r for r in res.rows if r["status"] != "ok"][:5]:
        print(f"  failed: {' '.join(f'{k}={v}' for k, v in r.items() if k in _param_names(r))}: {r['error'][:300]}")
    if args.out:
        print(f"  table: {args.out}")
    if front is not None:
        print(f"  Pareto front of {x} and {y}: {len(front)} points, drawn in {args.plot}")
    return 0


def _param_names(row: dict) -> list:
    from step_hdl.workloads.registry import WORKLOADS
    return [p.flag for p in WORKLOADS[row["workload"]][1]] + ["phys-tile", "dram"]
