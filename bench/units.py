"""Latency and steady-state throughput of every hardware unit, measured in RTL.

For each unit of the catalog (units/catalog.py) and each physical tile size,
drive a long stimulus with no valid gaps into the unit with an always-ready
sink, check the outputs against the reference interpreter, and report

* ``latency``: cycles from the cycle the first input token is offered to the
  cycle the first output token transfers (0 for a combinational path);
* ``tokens_per_cycle``: output tokens on the unit's main output divided by the
  cycles from its first to its last transfer;
* ``claimed_ii``: what the unit's docstring claims (cycles per output token).

    python bench/units.py [--tiles 4 16] [--backend verilator] [--tokens 400] [--json out.json]

Every unit must reach 0.99 of its claimed rate (units that claim II 1: >= 0.99
tokens per cycle).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.base import lang_port
from step_hdl.units.catalog import CATALOG


def measure(entry, tile: int, dtype: str, backend: str, n: int) -> dict:
    unit = entry.make(tile, tile, dtype)
    kind, inputs, op_params, *rest = entry.stimulus(unit, n)
    extra = rest[0] if rest else {}
    expected = entry.run_reference(kind, inputs, op_params, extra)
    packed = unit.pack_inputs(inputs)
    outs = unit.output_done_bits()
    component, config = entry.component(unit, op_params, inputs, extra)
    timing: dict = {}
    t0 = time.perf_counter()
    got, cycles = run_scenario(component, Scenario(packed, outs, config, p_gap=0, p_drop=0), backend,
                               f"{entry.name.lower()}_t{tile}", timing=timing)
    wall = time.perf_counter() - t0
    ok = all(unit.fmt(p).unpack_all(got[p]) == expected[lang_port(p)] for p in outs)
    when = timing["out_cycles"][entry.main_output]
    span = when[-1] - when[0] + 1 if when else 0
    return {"unit": entry.name, "tile": f"{tile}x{tile}", "dtype": dtype, "backend": backend,
            # both counters advance at each edge: an output in the cycle the input is
            # offered (a combinational path) is latency 0
            # (a unit with no input stream, e.g. a load, counts from the end of configuration)
            "latency": (when[0] - (timing["first_in"] + 1 if timing["first_in"] is not None else 0)
                        if when else None),
            "claimed_ii": entry.claimed_ii, "tokens": len(when),
            "tokens_per_cycle": round(len(when) / span, 4) if span else 0.0,
            "cycles": cycles, "outputs_match": ok, "wall_s": round(wall, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, nargs="+", default=[4, 16], help="square physical tile sizes")
    ap.add_argument("--dtype", default="int16")
    ap.add_argument("--backend", default="verilator", choices=("amaranth", "verilator", "icarus"))
    ap.add_argument("--tokens", type=int, default=400, help="data tokens per stimulus")
    ap.add_argument("--units", nargs="*", help="only these units (default: all)")
    ap.add_argument("--json", metavar="PATH", help="write the records as JSON")
    args = ap.parse_args(argv)
    names = args.units or [n for n, e in CATALOG.items() if e.stimulus is not None]
    unknown = [n for n in names if n not in CATALOG or CATALOG[n].stimulus is None]
    if unknown:
        ap.error(f"--units: no timed unit {', '.join(map(repr, unknown))}; units: "
                 + ", ".join(n for n, e in CATALOG.items() if e.stimulus is not None))
    records = []
    print(f"{'unit':26s} {'tile':>6s} {'latency':>8s} {'claimed II':>10s} {'tokens/cycle':>12s} {'match':>6s} "
          f"{'wall s':>7s}")
    for tile in args.tiles:
        for name in names:
            entry = CATALOG[name]
            print(f"{name:26s} {tile:>3d}x{tile:<2d} ", end="", flush=True, file=sys.stdout)
            rec = measure(entry, tile, args.dtype, args.backend, args.tokens)
            records.append(rec)
            print(f"{rec['latency']!s:>8s} {rec['claimed_ii']:>10.2f} {rec['tokens_per_cycle']:>12.4f} "
                  f"{'yes' if rec['outputs_match'] else 'NO':>6s} {rec['wall_s']:>7.1f}")
    # a unit meets its claim with >= 0.99 of the claimed rate (tokens per cycle = 1 / II)
    bad = [r for r in records if not r["outputs_match"] or r["tokens_per_cycle"] < 0.99 / r["claimed_ii"]]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    if bad:
        print(f"\n{len(bad)} record(s) miss their claim or mismatch: "
              + ", ".join(f"{r['unit']} {r['tile']}" for r in bad))
        return 1
    print(f"\nall {len(records)} records meet their claimed II and match the interpreter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
