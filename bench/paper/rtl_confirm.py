"""RTL confirmation of the paper studies: reduced-size configurations in RTL beside the approximate model.

Each study builds its fabrics (Verilator by default), runs them on a DRAM
preset (``--dram``, default ``paper``), checks the outputs bit for bit against the interpreter
(and numpy) and the RTL's off-chip bytes against the interpreter's, runs the
approximate model on the same graphs, and prints per variant: RTL cycles,
model cycles and error; then the study's effect measured both ways and how far
apart they are:

* ``parallelization`` (dynamic parallelization): fixed-point GQA decode
  (``G = d = 4``, int16, 4x4 tiles) on a real b16 KV trace with the lengths
  scaled down, 4 regions; static ``interleaved`` and ``contiguous`` against
  ``dynamic`` (the first free region takes the next request through a credit
  cycle). Effect: the better static schedule's cycles / dynamic's.
* ``time-multiplexing`` (configuration time-multiplexing): the MoE layer with
  dynamic tiling on the real ``mixtral_b64`` routing trace (8 experts, top-2,
  hidden 4, intermediate 8 in tiles of 4), 1 (dedicated), 2 and 4 experts per
  region. Effect: slowdown of each shared configuration against dedicated
  regions (cycles / dedicated cycles).

* ``dynamic-tiling``: the MoE layer on the real ``mixtral_b64`` routing trace
  (8 experts, top-2, hidden 16, intermediate 32 in tiles of 16) with static
  token tiles of ``--tiles`` rows (padded; the padding rows are computed and
  dropped) against dynamic tiling (one ``[N_e, H]`` tile per expert). Effect:
  each static tiling's cycles / dynamic's. Every token tile, static or
  dynamic, is packed into blocks of 4 rows (the physical tile), the last one
  partial.

    python bench/paper/rtl_confirm.py parallelization [--trace 3] [--scale 64] [--json PATH]
    python bench/paper/rtl_confirm.py time-multiplexing [--groups 1 2 4] [--json PATH]
    python bench/paper/rtl_confirm.py dynamic-tiling [--tiles 3 6 10] [--json PATH]
    ... [--dram paper|paper-studies|paper-interval1] [--units PREFIX] [--backend verilator|icarus|amaranth]

Besides the cycles each point reports both sides' off-chip bytes per cycle and,
per graph node that is one RTL unit of the same name, the RTL's active and
stalled counters beside the model's busy, stalled and idle cycles
(``--units PREFIX`` prints those of the units named ``PREFIX...``): where the
model's cycles go wrong, they show which units it sees waiting differently.

Each fabric's first Verilator build takes a few minutes (cached under
``~/.cache/step-hdl``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.flow import DRAM_PRESETS, model, prepare, run_rtl as run
from step_hdl.mapper.design import buffer_bytes
from step_hdl.workloads.traces import TraceNotFound

TILE = 4


def measure(variants: dict, backend: str, dram_name: str) -> tuple[dict, bool]:
    """RTL and model cycles of each ``{name: workload}``; ``(points, every output and byte count right)``."""
    dram = DRAM_PRESETS[dram_name]
    points, ok = {}, True
    for name, w in variants.items():
        t0 = time.time()
        prep = prepare(w, TILE)
        print(f"{name}: {len(prep.design.units)} units, prepared in {time.time() - t0:.1f} s; simulating on "
              f"{backend} ...", file=sys.stderr, flush=True)
        res = run(prep, backend, dram, progress=True)
        t0 = time.perf_counter()
        m = model(w, prep.design.fabric, dram)
        points[name] = {
            "units": len(prep.design.units), "rtl_cycles": res.cycles, "model_cycles": m.cycles,
            "model_error_pct": round(100 * (m.cycles / res.cycles - 1), 2), "outputs_match": res.outputs_match,
            "rtl_offchip_bytes": res.offchip_bytes, "reference_offchip_bytes": prep.reference_bytes,
            "build_s": round(res.build_s, 1), "run_s": round(res.run_s, 2),
            "model_s": round(time.perf_counter() - t0, 3),
            # the fabric's on-chip tile storage: buffers' own SRAMs and tile pools (mapper.design.buffer_bytes)
            "buffer_bytes": buffer_bytes(prep.design), "pools": res.pools(prep.design),
            "offchip_bytes_per_cycle": {"rtl": round(res.offchip_bytes / res.cycles, 2),
                                        "model": round(m.offchip_bytes / m.cycles, 2)},
            "unit_cycles": breakdown(prep.design, res, m)}
        ok &= res.outputs_match and res.offchip_bytes == prep.reference_bytes
    return points, ok


def breakdown(design, res, m) -> dict:
    """Per graph node that is one RTL unit of the same name: the RTL's counters (cycles with a transfer,
    cycles stalled on a full output or an unaccepted memory request) beside the model's busy, stalled and
    idle cycles. Where the model's cycles go wrong, this shows which units it sees waiting differently."""
    out = {}
    for u in design.units:
        node = m.nodes.get(u.name)
        if node is not None:
            out[u.name] = {"rtl_active": res.counters[f"{u.name}.active"],
                           "rtl_stalled": res.counters[f"{u.name}.stalled"],
                           "model_busy": node["busy"], "model_stalled": node["stalled"], "model_idle": node["idle"]}
    return out


def print_units(points: dict, prefix: str) -> None:
    for name, p in points.items():
        print(f"  {name}: units starting with {prefix!r} (RTL active/stalled, model busy/stalled/idle)")
        for u, c in p["unit_cycles"].items():
            if u.startswith(prefix):
                print(f"    {u:<24}{c['rtl_active']:>7,}{c['rtl_stalled']:>7,}   {c['model_busy']:>7,}"
                      f"{c['model_stalled']:>7,}{c['model_idle']:>7,}")


def effect(points: dict, num: str | list, den: str) -> dict:
    """``cycles(num) / cycles(den)`` in RTL and in the model (``num`` a list: its smallest), and their gap."""
    out = {}
    for side in ("rtl", "model"):
        top = min(points[n][f"{side}_cycles"] for n in ([num] if isinstance(num, str) else num))
        out[side] = round(top / points[den][f"{side}_cycles"], 4)
    out["gap_pct"] = round(100 * (out["model"] / out["rtl"] - 1), 2)
    out["same_direction"] = (out["rtl"] - 1) * (out["model"] - 1) > 0 or out["rtl"] == out["model"] == 1
    return out


def parallelization(args) -> tuple[dict, bool]:
    from step_hdl.workloads.gqa import STRATEGIES, gqa_decode, scale_lengths
    from step_hdl.workloads.traces import kv_lengths, kv_stdev, kv_traces
    path = kv_traces(16)[args.trace]
    lens = scale_lengths(kv_lengths(path, 16), args.scale)
    print(f"{path.name} (stdev {kv_stdev(path):.0f}): KV lengths / {args.scale} = {lens.tolist()}", file=sys.stderr)
    variants = {s: gqa_decode(lens, group=4, head_dim=4, regions=4, strategy=s, dtype="int16") for s in STRATEGIES}
    points, ok = measure(variants, args.backend, args.dram)
    title = (f"GQA decode, {path.name}, {len(lens)} requests (KV lengths / {args.scale}), 4 regions, G=d=4, "
             f"4x4 tiles, int16")
    return {"study": "parallelization", "title": title, "trace": path.name, "scale": args.scale,
            "kv_lengths": lens.tolist(), "points": points,
            "effects": {"speedup_vs_best_static": effect(points, ["interleaved", "contiguous"], "dynamic")}}, ok


def time_multiplexing(args) -> tuple[dict, bool]:
    from step_hdl.workloads.moe import moe
    from step_hdl.workloads.traces import routing_trace
    routing = routing_trace("mixtral_b64")
    variants = {f"{g} per region": moe(routing, 8, hidden=4, inter=8, tile_inter=4, dtype="int16",
                                       tiling="dynamic", experts_per_region=g) for g in args.groups}
    points, ok = measure(variants, args.backend, args.dram)
    base = f"{args.groups[0]} per region"
    title = "MoE, mixtral_b64 (8 experts, top-2, 64 tokens), H=4 I=8 ti=4, dynamic tiling, 4x4 tiles, int16"
    return {"study": "time-multiplexing", "title": title, "points": points,
            "effects": {f"slowdown {n}": effect(points, n, base) for n in points if n != base}}, ok


def dynamic_tiling(args) -> tuple[dict, bool]:
    from step_hdl.workloads.moe import moe
    from step_hdl.workloads.traces import routing_trace
    routing = routing_trace("mixtral_b64")
    common = dict(hidden=16, inter=32, tile_inter=16, dtype="int16")
    variants = {f"static {t}": moe(routing, 8, tiling="static", tile=t, **common) for t in args.tiles}
    variants["dynamic"] = moe(routing, 8, tiling="dynamic", **common)
    points, ok = measure(variants, args.backend, args.dram)
    title = "MoE, mixtral_b64 (8 experts, top-2, 64 tokens), H=16 I=32 ti=16, 4x4 tiles, int16"
    return {"study": "dynamic-tiling", "title": title, "points": points,
            "effects": {f"{n} / dynamic": effect(points, n, "dynamic") for n in points if n != "dynamic"}}, ok


STUDIES = {"parallelization": parallelization, "time-multiplexing": time_multiplexing,
           "dynamic-tiling": dynamic_tiling}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", choices=tuple(STUDIES))
    ap.add_argument("--trace", type=int, default=3, help="parallelization: index into the sorted b16 KV traces")
    ap.add_argument("--scale", type=int, default=64, help="parallelization: divide the KV lengths by this")
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4],
                    help="time-multiplexing: experts per region (the first is the baseline)")
    ap.add_argument("--tiles", type=int, nargs="+", default=[3, 6, 10],
                    help="dynamic-tiling: static token-tile sizes (rows)")
    ap.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"))
    ap.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS), help="DRAM preset (default: paper)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--units", default=None, metavar="PREFIX",
                    help="also print, per variant, the RTL's and the model's cycles of the units named PREFIX...")
    args = ap.parse_args(argv)
    try:
        out, ok = STUDIES[args.study](args)
    except TraceNotFound as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        return 0
    out["dram"] = args.dram
    print(f"{out['title']}, DRAM preset {args.dram}")
    print(f"  {'variant':<14}{'units':>6}{'RTL cycles':>12}{'model':>9}{'error':>9}  match  off-chip B (ref)"
          f"  B/cycle RTL, model")
    for s, p in out["points"].items():
        bw = p["offchip_bytes_per_cycle"]
        print(f"  {s:<14}{p['units']:>6}{p['rtl_cycles']:>12,}{p['model_cycles']:>9,}{p['model_error_pct']:>+8.1f}%"
              f"  {str(p['outputs_match']):<5}  {p['rtl_offchip_bytes']:,} ({p['reference_offchip_bytes']:,})"
              f"  {bw['rtl']:.1f}, {bw['model']:.1f}")
    if args.units is not None:
        print_units(out["points"], args.units)
    for name, e in out["effects"].items():
        print(f"  {name}: RTL {e['rtl']:.3f}x, model {e['model']:.3f}x (model/RTL {e['gap_pct']:+.1f} %, "
              f"{'same' if e['same_direction'] else 'OPPOSITE'} direction)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
