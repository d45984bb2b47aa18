"""Sweeps at scale (issue 23): a 1,000-point model sweep over MoE tile sizes and traces, and the paper's
15-point SwiGLU sweep in the model and in RTL, each on 1 and 2 workers, on Ray, from the cache, and
interrupted and resumed.

MoE part (``--points``, default 1,000, metrics and model): the ``mixtral_b64`` and
``mixtral_b1024`` routing traces, windows of their first 16 to 96 tokens, H=16 I=32
on 4x4 tiles, intermediate tiles 4 to 32, static token tiles of 1 to 24 rows and
dynamic tiles. It runs

1. on a local process pool of 1 worker and of 2 workers, without the cache
   (``wall_1_worker_s``, ``wall_2_workers_s``, ``speedup``, ``identical_1_2``);
2. on a local Ray cluster of 2 CPUs into a fresh cache (``wall_ray_s``;
   ``identical_to_serial``: every field of every row equals the 1-worker run's,
   wall times aside; null when Ray is not installed);
3. again from that cache (``cached_rerun_s``, ``cached_rerun_computed``);
4. as ``step-hdl sweep --points`` in a subprocess killed (SIGTERM to its process
   group) once half the points are cached, then restarted: ``resumed_recomputed``
   is the points the restart computed that had finished before the kill (0:
   none), ``resumed_identical`` compares the restart's rows with step 1's.

It writes the table (``moe_sweep.csv``) and the Pareto plot of on-chip bytes
against model cycles (``moe_pareto.png``) into ``--out``.

SwiGLU part (``--no-rtl`` skips it): the paper's 15 points (B=64 H=256 I=512,
16x16 tiles, ``paper`` preset) with ``model`` and ``sim`` (Verilator; one shared
fabric, one build, cached per machine), serially, on Ray with 2 CPUs, from the
cache, and killed and resumed as above.

    python bench/sweep_scale.py [--json PATH] [--points N] [--out DIR] [--no-rtl] [--no-moe]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from step_hdl.flow.sweep import ResultCache, grid, identical, plot_pareto, run_sweep, write_table
from step_hdl.flow.sweep.executors import default_workers

OUT = Path(__file__).resolve().parent / "out"
MOE = {"hidden": 16, "inter": 32}


def moe_points(n: int) -> list:
    """``n`` MoE points (at most 1,000): per trace, token window and intermediate tile, static tiles of 1 to
    24 rows and dynamic tiles."""
    pts = []
    for trace in ("mixtral_b64", "mixtral_b1024"):
        for tokens in (16, 32, 48, 64, 96):
            for ti in (4, 8, 16, 32):
                fixed = {**MOE, "trace": trace, "tokens": tokens, "tile-inter": ti}
                pts += grid("moe", {"tile": list(range(1, 25))}, {**fixed, "tiling": "static"},
                            ("metrics", "model"))
                pts += grid("moe", {}, {**fixed, "tiling": "dynamic"}, ("metrics", "model"))
    return pts[:n]


def swiglu_points() -> list:
    return grid("swiglu", {"tile-b": [16, 32, 64], "tile-inter": [16, 32, 64, 128, 256]},
                {"batch": 64, "hidden": 256, "inter": 512, "phys-tile": 16}, ("model", "sim"), "paper-swiglu")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _timed(points, executor, workers, cache):
    t0 = time.perf_counter()
    res = run_sweep(points, executor, workers, cache=cache, progress=sys.stderr.isatty())
    return res, round(time.perf_counter() - t0, 2)


def _interrupted(points, cache_dir: Path, workers: int) -> dict:
    """Run ``points`` with ``step-hdl sweep --points`` in a subprocess, kill it when half are cached, run
    them again here: what the restart recomputed."""
    defn = cache_dir.parent / f"{cache_dir.name}-points.json"
    defn.write_text(json.dumps({"points": [p.to_json() for p in points]}))
    cmd = [sys.executable, "-m", "step_hdl.flow.cli", "sweep", "--points", str(defn), "--cache", str(cache_dir),
           "--workers", str(workers), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    half = len(points) // 2
    while proc.poll() is None and len(list(cache_dir.rglob("*.json"))) < half:
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    time.sleep(1)       # the pool's workers end with their parent
    finished = len(list(cache_dir.rglob("*.json")))
    res, wall = _timed(points, "process", workers, ResultCache(cache_dir))
    return {"killed_after": finished, "restart_computed": res.computed, "restart_cached": res.cached,
            "resumed_recomputed": res.computed - (len(points) - finished), "restart_s": wall, "rows": res.rows}


def _ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        _say("Ray is not installed (pip install -e .[ray]): the Ray runs are skipped")
        return False
    return True


def run_part(name: str, points, workers: int, tmp: Path, one_worker: bool = True) -> dict:
    """The runs of one part; its report and the rows of the reference (1-worker or serial) run."""
    out: dict = {"points": len(points)}
    _say(f"{name}: {len(points)} points, 1 worker ...")
    ref, out["wall_1_worker_s"] = _timed(points, "process" if one_worker else "serial", 1, False)
    out["failed"] = ref.failed
    if one_worker:
        _say(f"{name}: {workers} workers ...")
        two, out["wall_2_workers_s"] = _timed(points, "process", workers, False)
        out["speedup"] = round(out["wall_1_worker_s"] / out["wall_2_workers_s"], 2)
        out["identical_1_2"] = identical(ref.rows, two.rows)
    cache = ResultCache(tmp / f"{name}-cache")
    if _ray_available():
        _say(f"{name}: Ray, {workers} CPUs ...")
        ray_res, out["wall_ray_s"] = _timed(points, "ray", workers, cache)
        out["identical_to_serial"] = identical(ref.rows, ray_res.rows)
    else:
        out["wall_ray_s"] = out["identical_to_serial"] = None
        run_sweep(points, "process", workers, cache=cache)
    _say(f"{name}: again, from the cache ...")
    again, out["cached_rerun_s"] = _timed(points, "process", workers, cache)
    out["cached_rerun_computed"] = again.computed
    _say(f"{name}: killed halfway and restarted ...")
    res = _interrupted(points, tmp / f"{name}-resume", workers)
    rows = res.pop("rows")
    out.update(res)
    out["resumed_identical"] = identical(ref.rows, rows)
    return out, ref


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, metavar="PATH", help="write the measurements as JSON")
    ap.add_argument("--points", type=int, default=1000, help="MoE points (default: 1000)")
    ap.add_argument("--workers", type=int, default=2, help="workers of the parallel runs (default: 2)")
    ap.add_argument("--out", default=str(OUT), help=f"folder for the table and the Pareto plot (default: {OUT})")
    ap.add_argument("--no-rtl", action="store_true", help="skip the SwiGLU model-and-RTL part")
    ap.add_argument("--no-moe", action="store_true", help="skip the 1,000-point MoE part")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"cores": default_workers(), "workers": args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.no_moe:
            report["moe"], ref = run_part("moe", moe_points(args.points), args.workers, tmp)
            write_table(ref, out / "moe_sweep.csv")
            front = plot_pareto(ref.rows, "onchip_bytes", "model_cycles", out / "moe_pareto.png",
                                f"MoE, {len(ref.rows)} points: on-chip bytes against model cycles")
            report["moe"]["pareto_points"] = len(front)
        if not args.no_rtl:
            report["swiglu_rtl"], sw = run_part("swiglu", swiglu_points(), args.workers, tmp, one_worker=False)
            report["swiglu_rtl"]["rtl_cycles"] = [r.get("rtl_cycles") for r in sw.rows]
            report["swiglu_rtl"]["model_cycles"] = [r.get("model_cycles") for r in sw.rows]
    for part in ("moe", "swiglu_rtl"):
        r = report.get(part)
        if not r:
            continue
        print(f"{part}: {r['points']} points, {r['failed']} failed")
        if "wall_2_workers_s" in r:
            print(f"  1 worker {r['wall_1_worker_s']:.1f} s, {args.workers} workers {r['wall_2_workers_s']:.1f} s "
                  f"({r['speedup']:.2f}x), identical {r['identical_1_2']}")
        else:
            print(f"  serial {r['wall_1_worker_s']:.1f} s")
        if r["wall_ray_s"] is not None:
            print(f"  Ray, {args.workers} CPUs: {r['wall_ray_s']:.1f} s, identical to serial {r['identical_to_serial']}")
        print(f"  from the cache: {r['cached_rerun_s']:.2f} s ({r['cached_rerun_computed']} computed)")
        print(f"  killed after {r['killed_after']} points cached; the restart computed {r['restart_computed']} "
              f"and took {r['restart_cached']} from the cache (recomputed {r['resumed_recomputed']} finished "
              f"before), identical {r['resumed_identical']}")
    if "moe" in report:
        print(f"table {out / 'moe_sweep.csv'}, Pareto plot {out / 'moe_pareto.png'} "
              f"({report['moe']['pareto_points']} points on the front)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
