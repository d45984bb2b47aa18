"""docs/status.md: what step-hdl measures today, generated from the benchmarks' committed JSON.

Every figure on the page comes from a file a benchmark or the flow wrote (each section names the command that
writes its file), so a figure cannot drift from its measurement: measure again, commit the JSON, run this.
``tests/test_docs.py`` fails when the page is not what the committed JSON gives.

    python bench/status.py            # write docs/status.md
    python bench/status.py --check    # exit status 1 if docs/status.md is not up to date
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "status.md"
#: the inputs and the commands that write them
QUICKSTART = ("bench/data/quickstart.json", "step-hdl sim swiglu --batch 16 --hidden 64 --inter 128 --tile-b 8 "
                                            "--tile-inter 32 --json > bench/data/quickstart.json")
CROSSVAL = ("bench/data/crossval.json", "python bench/crossval.py --rtl-json bench/data/crossval-rtl.json "
                                        "--json bench/data/crossval.json")
CROSSVAL_RTL = ("bench/data/crossval-rtl.json", "python bench/crossval.py --save-rtl bench/data/crossval-rtl.json")
UNITS = ("fpga/unit_report.json", "python -m step_hdl.fpga.characterize --units")
ESTIMATE = ("fpga/estimate_check.json", "python -m step_hdl.fpga.characterize --fabric")
#: the unit table's clock goal
GOAL_MHZ = 125


def _load(source) -> dict:
    return json.loads((ROOT / source[0]).read_text())


def _n(x) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _pct(x: float) -> str:
    return f"{x:+.1f} %"


def _source(source) -> str:
    return f"`{source[0]}`, written by `{source[1]}`"


def quickstart() -> list[str]:
    q = _load(QUICKSTART)
    b = q["bound"]
    return ["## The quick start", "",
            f"SwiGLU B=16 H=64 I=128, `tile_b` 8, `tile_inter` 32, int16 on {q['tile']}x{q['tile']} tiles, DRAM preset "
            f"`paper`, on {q['backend']} ({_source(QUICKSTART)}).", "",
            "| RTL cycles | outputs | model cycles | lower bound | off-chip bytes | bandwidth |",
            "|---:|---|---:|---|---:|---:|",
            f"| {_n(q['cycles'])} | {'match the interpreter' if q['outputs_match'] else 'DIFFER'} | "
            f"{_n(q['model_cycles'])} ({_pct(100 * q['model_error'])}) | {_n(b['cycles'])}, {b['binding']}-bound "
            f"({b['fraction']:.2f} of it reached) | {_n(q['offchip_bytes'])} (interpreter "
            f"{_n(q['reference_offchip_bytes'])}) | {q['bandwidth_fraction']:.3f} of the peak |", ""]


def _range(points) -> str:
    cycles = [p["rtl_cycles"] for p in points]
    return f"{_n(min(cycles))}–{_n(max(cycles))}" if len(cycles) > 1 else _n(cycles[0])


def crossval() -> list[str]:
    c = _load(CROSSVAL)
    pts = c["points"]
    w = c["worst"]
    out = ["## The model against the RTL", "",
           f"The approximate model's cycles against the RTL's (Verilator, every output bit-exact against the "
           f"interpreter) on {len(pts)} points of every workload, each on the fabric and DRAM preset the RTL ran "
           f"({_source(CROSSVAL)}; the RTL's cycles: {_source(CROSSVAL_RTL)}). Error: model / RTL - 1.", "",
           f"Over all points: Pearson {c['pearson']:.4f}, mean error {c['mape_pct']:.2f} %, worst "
           f"{_pct(c['worst_pct'])} ({w['workload']} "
           + " ".join(f"{k}={v}" for k, v in w["params"].items()) + f", {w['tile']}x{w['tile']}, `{w['dram']}`; "
           "`docs/crossval.md` explains it).", "",
           "| points | DRAM | n | RTL cycles | mean error | worst |", "|---|---|---:|---:|---:|---:|"]
    groups: dict = {}
    for p in pts:
        label = p["group"].split(" static ")[0] + " static" if " static " in p["group"] else p["group"]
        label = label.split(" tm ")[0] + " time-multiplexed" if " tm " in label else label
        groups.setdefault((label, p["dram"]), []).append(p)
    for (label, dram), g in groups.items():
        errs = [p["error_pct"] for p in g]
        worst = max(errs, key=abs)
        mean = sum(abs(e) for e in errs) / len(errs)
        out.append(f"| {label} | `{dram}` | {len(g)} | {_range(g)} | {mean:.2f} % | {_pct(worst)} |")
    out += ["", "The paper studies' effects at reduced size, measured both ways (the ratio of two points' "
                "cycles):", "", "| study | effect | DRAM | RTL | model | gap |", "|---|---|---|---:|---:|---:|"]
    for e in c["effects"]:
        out.append(f"| {e['study']} | {e['effect']} | `{e['dram']}` | {e['rtl']:.3f}x | {e['model']:.3f}x | "
                   f"{_pct(e['gap_pct'])} |")
    return out + [""]


def fpga() -> list[str]:
    u = _load(UNITS)
    rows = [r for r in u["units"] if r.get("fmax_mhz")]
    slow = sorted((r for r in rows if r["fmax_mhz"] < GOAL_MHZ), key=lambda r: r["fmax_mhz"])
    e = _load(ESTIMATE)
    s, est = e["synthesized"], e["estimate"]
    params = " ".join(f"{k}={v}" for k, v in e["params"].items() if k != "seed")
    return ["## FPGA (ECP5-85F)", "",
            f"Every unit build of the unit table at {u['tile']}x{u['tile']} {u['dtype']}, placed and routed out of "
            f"context ({_source(UNITS)}): {len(rows)} builds with a clock path, {len(rows) - len(slow)} at "
            f"{GOAL_MHZ} MHz or more; under it: "
            + ", ".join(f"{r['unit']} {r['fmax_mhz']}" for r in slow) + " MHz (`docs/fpga.md` says why, unit by "
            "unit).", "",
            f"The SwiGLU fabric ({params}, {e['dtype']} on {e['tile']}x{e['tile']} tiles, without `--pipeline`) "
            f"against the cost table's estimate ({_source(ESTIMATE)}):", "",
            "| | logic cells | LUT4 after synthesis | FFs | DSPs | BRAMs | Fmax |", "|---|---:|---:|---:|---:|---:|---:|",
            f"| synthesized | {_n(s['luts'])} | {_n(s['synth_luts'])} | {_n(s['ffs'])} | {s['dsps']} | {s['brams']} | "
            f"{s['fmax_mhz']} MHz |",
            f"| estimated | | {_n(est['luts'])} ({_pct(100 * est['error']['luts_vs_synth'])}) | {_n(est['ffs'])} "
            f"({_pct(100 * est['error']['ffs'])}) | {est['dsps']} | {est['brams']} | |", "",
            "The pipelined fabric's clock over placement seeds: `docs/fpga.md`, *Where the fabric's clock stands*.",
            ""]


def _wrap(lines: list[str]) -> list[str]:
    """Prose lines wrapped at 120 characters (tables and headings as they are)."""
    out = []
    for line in lines:
        if line.startswith(("|", "#")) or len(line) <= 120:
            out.append(line)
        else:
            out += textwrap.wrap(line, 120, break_long_words=False, break_on_hyphens=False)
    return out


def render() -> str:
    lines = ["# Status", "",
             "What step-hdl measures today. Generated by `python bench/status.py` from the committed JSON each "
             "section names; `tests/test_docs.py` checks that it is. Measure again, commit the JSON and run the "
             "script: do not edit this page by hand.", ""]
    lines += quickstart() + crossval() + fpga()
    lines += ["## The paper's dynamic studies", "",
              "At full size on the approximate model: `docs/study-dynamic-tiling.md` (runs), "
              "`docs/study-time-multiplexing.md` and `docs/study-dynamic-parallelization.md` (their programs at "
              "16x16 do not map yet, so the model, which times the mapper's program, refuses them; the pages keep "
              "their last figures and say so).", ""]
    return "\n".join(_wrap(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit status 1 if docs/status.md is not up to date")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/status.md is up to date" if same else "docs/status.md is out of date: run python bench/status.py")
        return 0 if same else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
