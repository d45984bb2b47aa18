"""How long a fabric takes to become a simulation: Verilog, Verilator build, cycles per second, with one
Verilog module per unit instance compiled unoptimized (the old way, the issue's baseline) beside one module
per distinct unit design (``mapper/shared.py``) at the optimization the flow chooses (``-O3``: Verilator's
own slow optimizations, the C++ at ``-O2``), at ``-O2`` without Verilator's, and compiled twice, the second
time guided by the profile of the first run (``pgo``; ``$STEP_HDL_VERILATOR_OPT``).

    python bench/build_speed.py [--workloads moe [gqa swiglu]] [--ways WAY ...] [--no-rtl] [--repeat N]
                                [--json PATH]

By default the 8-expert MoE fabric (349 units); each workload with the command line's default options
(``step-hdl build <workload>``; ``swiglu`` at the README's quick-start sizes). Each measurement runs in a child
process of its own with an empty build cache (``$STEP_HDL_BUILD``), so nothing is reused between the ways and
the child's peak memory is its own. Per workload and way: the Verilog's generation time, peak memory, lines
and modules; with RTL (default) the Verilator build's time and C++ optimization level, the run's cycles,
whether the outputs match, and the simulated cycles per second (the fastest run and the median). The ratios
against the first way are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

WORKLOADS = {"moe": ["build", "moe"], "gqa": ["build", "gqa"],
             "swiglu": ["build", "swiglu", "--batch", "16", "--hidden", "64", "--inter", "128", "--tile-b", "8",
                        "--tile-inter", "32"]}
#: (label, shared modules, $STEP_HDL_VERILATOR_OPT)
WAYS = (("per instance -O0", False, "-O0"), ("shared", True, ""), ("shared -O2", True, "-O2"),
        ("shared pgo", True, "pgo"))


def measure(workload: str, shared: bool, rtl: bool, repeat: int = 1) -> dict:
    """In this process (a child with its own cache): Verilog, then the Verilator build and ``repeat`` runs of
    the built simulator (the fastest counts, the median beside it: the MoE fabric's run of under a second
    varies by up to 35 % from run to run on the two-core machine, even with nothing else running)."""
    import re
    from step_hdl.flow.cli import parser
    from step_hdl.flow import DRAM_PRESETS, prepare, run_rtl
    from step_hdl.workloads.registry import build
    from step_hdl.sim.fabric import verilog_for
    from step_hdl.sim.rtl import verilator_opt
    args = parser("build").parse_args(WORKLOADS[workload])
    w = build(args.workload, args)
    prep = prepare(w, args.phys_tile)
    t0 = time.perf_counter()
    text, _, _ = verilog_for(prep.design, DRAM_PRESETS[args.dram], prep.depth(), shared=shared)
    out = {"units": len(prep.design.units), "verilog_s": round(time.perf_counter() - t0, 1),
           "verilog_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "verilog_lines": text.count("\n"), "verilog_modules": len(re.findall(r"^module ", text, re.M)),
           "verilator_opt": verilator_opt()}
    if rtl:
        res = run_rtl(prep, "verilator", args.dram, shared=shared)
        # a pgo build's first run is its instrumented profiling run: it does not count
        profiling = verilator_opt() == "pgo"
        runs = [res] * (not profiling) + [run_rtl(prep, "verilator", args.dram, shared=shared)
                                          for _ in range(repeat - (not profiling))]
        if len({(r.cycles, r.outputs_match) for r in runs}) > 1:
            raise SystemExit(f"the runs of one build differ: {[(r.cycles, r.outputs_match) for r in runs]}")
        best = min(runs, key=lambda r: r.run_s)
        speeds = sorted(r.cycles_per_s for r in runs)
        out.update(build_s=round(res.build_s, 1), cycles=res.cycles, outputs_match=res.outputs_match,
                   runs=repeat, run_s=round(best.run_s, 2), cycles_per_s=round(best.cycles_per_s),
                   cycles_per_s_median=round(speeds[len(speeds) // 2]))
    return out


def child(workload: str, shared: bool, opt: str, rtl: bool, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="build-speed-") as cache:
        env = {**os.environ, "STEP_HDL_BUILD": cache}
        env.pop("STEP_HDL_VERILATOR_OPT", None)
        if opt:
            env["STEP_HDL_VERILATOR_OPT"] = opt
        cmd = [sys.executable, __file__, "--child", workload, str(int(shared)), str(int(rtl)), str(repeat)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{workload} ({'shared' if shared else 'per instance'} {opt}) failed:\n"
                             f"{r.stderr[-3000:]}")
        out = json.loads(r.stdout.strip().splitlines()[-1])
        out["wall_s"] = round(time.perf_counter() - t0, 1)
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=["moe"], choices=tuple(WORKLOADS),
                    help="default: moe, the 8-expert MoE fabric (about 16 minutes for the four ways)")
    ap.add_argument("--no-rtl", action="store_true", help="Verilog only: no Verilator build and run")
    ap.add_argument("--json", metavar="PATH", help="write the measurements here")
    ap.add_argument("--repeat", type=int, default=5, metavar="N",
                    help="runs of each built simulator; the fastest counts, the median is reported beside it "
                         "(default: 5)")
    ap.add_argument("--ways", nargs="+", default=[w[0] for w in WAYS], choices=[w[0] for w in WAYS],
                    metavar="WAY", help=f"the ways to measure (default: all: {', '.join(w[0] for w in WAYS)}); "
                                        "the first is the base of the ratios")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.child:
        workload, shared, rtl, repeat = args.child
        print(json.dumps(measure(workload, bool(int(shared)), bool(int(rtl)), int(repeat))))
        return 0
    results = {}
    for wl in args.workloads:
        results[wl] = {}
        for label, shared, opt in sorted((w for w in WAYS if w[0] in args.ways), key=lambda w: args.ways.index(w[0])):
            if opt and args.no_rtl:
                continue            # the same Verilog as "shared"
            print(f"{wl}: {label} ...", file=sys.stderr, flush=True)
            results[wl][label] = r = child(wl, shared, opt, not args.no_rtl, args.repeat)
            print(f"  {json.dumps(r)}", file=sys.stderr, flush=True)
        runs = [r for r in results[wl].values() if "cycles" in r]
        if len({(r["cycles"], r["outputs_match"]) for r in runs}) > 1:
            raise SystemExit(f"{wl}: the ways differ: {[(r['cycles'], r['outputs_match']) for r in runs]}")
    # each ratio says how many times better the way is than per instance (less time and memory, more cycles/s)
    keys = [("verilog_s", "Verilog (s)", False), ("verilog_peak_mb", "peak memory (MB)", False),
            ("verilog_lines", "lines", False), ("verilog_modules", "modules", False),
            ("build_s", "Verilator build (s)", False), ("cycles_per_s", "cycles/s (fastest run)", True),
            ("cycles_per_s_median", "cycles/s (median run)", True)]
    for wl, ways in results.items():
        labels = list(ways)
        base = ways[labels[0]]
        print(f"\n{wl} ({base['units']} units)".ljust(34) + "".join(f"{lb:>24s}" for lb in labels))
        for k, name, higher in keys:
            if k not in base:
                continue
            cells = []
            for lb in labels:
                v = ways[lb][k]
                ratio = (v / base[k] if higher else base[k] / v) if v and base[k] else 0.0
                cells.append(f"{v:>12,} ({ratio:4.1f}x)" if lb != labels[0] else f"{v:>24,}")
            print(f"  {name:30s}" + "".join(f"{c:>24s}" for c in cells))
        print(f"  {'C++ optimization':30s}" + "".join(f"{ways[lb]['verilator_opt']:>24s}" for lb in labels))
        if "cycles" in base:
            print(f"  {'cycles, outputs match':30s}" + "".join(
                f"{ways[lb]['cycles']:>18,} {'yes' if ways[lb]['outputs_match'] else 'NO':>5s}" for lb in labels))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workloads": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
