"""Characterize the units on ECP5: the cost table, the per-unit report and the estimate's error.

    python -m step_hdl.fpga.characterize [--sweep] [--units] [--fabric] [--fabric-units] [--baseline]
                                         [--tiles 2 4 8] [--dtypes int8 int16] [--workdir DIR]

``--sweep``
    Yosys ``synth_ecp5`` (no place-and-route, DSPs unlimited) of every unit kind
    of the catalog and of the units the mapper builds for SwiGLU, at each tile
    and element type; the edge FIFOs at several widths and depths; the LUT
    cost of a multiplier built in LUTs. Writes ``fpga/cost_table.json``
    (package data read by :func:`step_hdl.fpga.cost.estimate`) and
    ``docs/fpga-cost-table.md``.
``--units``
    Synthesis, place and route of every unit family at 4x4 int8 on ECP5-85F
    (100 MHz constraint): resources, Fmax and critical path, each unit under
    the 125 MHz goal linked to its note in ``docs/fpga.md``. Writes
    ``docs/fpga-units.md`` and ``fpga/unit_report.json``.
``--units-page``
    Writes the ECP5 part of ``docs/fpga-units.md`` again from the saved
    ``fpga/unit_report.json``, without synthesis (after a note in
    ``docs/fpga.md`` was added or renamed).
``--fabric``
    The SwiGLU fabric of the acceptance command through the whole flow (or
    ``--fabric-json``: a saved ``step-hdl synth swiglu ... --json`` result),
    against the cost-table estimate. Appends the comparison to ``docs/fpga-cost-table.md``
    and writes ``fpga/estimate_check.json``.
``--fabric-units``
    Every distinct unit build of the pipelined SwiGLU acceptance fabric (its buffers' affine reads, its
    loads' credits and dimensions: not the unit table's builds), placed and routed out of context as
    ``--units`` does. Writes the "The SwiGLU fabric's own unit builds" section of ``docs/fpga-units.md``
    and ``fpga/fabric_unit_report.json``.
``--floats``
    The units with float hardware (``units.floats``) at 4x4 bf16 (an fp32 running
    sum where they keep one), placed and routed as ``--units`` does, beside their
    int8 and int16 counterparts. Writes the "Float units" section of
    ``docs/fpga-units.md`` and ``fpga/float_unit_report.json``.
``--baseline``
    Records the two small units of the ``synth`` tests for the installed tool
    versions in ``fpga/baselines.json``.

Without a mode flag it runs ``--sweep --units --fabric``. Only one tool
process runs at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from step_hdl.types import dtype as make_dtype

from .cost import dtype_bits, estimate, kind_of, load_table, variant_of
from .synth import NextpnrError, synthesize, tool_versions
from .yosys import YosysError
from step_hdl.units.base import not_elaborated

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs"
SWIGLU = {"batch": 16, "hidden": 32, "inter": 64, "tile_b": 8, "tile_inter": 16, "seed": 0}
QUEUE_DEPTHS = (2, 8, 64)

#: the Fmax goal of every unit family at 4x4 int8 (issue 22); the report explains each unit under it
GOAL_MHZ = 125


class CharacterizeError(ValueError):
    """A command-line request the characterization cannot carry out (the message says why)."""

#: the page whose "## Units under {GOAL_MHZ} MHz" section explains each unit table row under the goal: a "### <unit>"
#: heading per unit (its critical path and what the pipelined build does about it); the generated unit report
#: links each slow row to its heading there
NOTES_DOC = DOCS / "fpga.md"


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def _params_json(unit) -> dict:
    return unit.params.to_json() if hasattr(unit, "params") and hasattr(unit.params, "to_json") else {}


def swiglu_prepared(tile: int = 4, dtype: str = "int8"):
    import argparse as ap
    from step_hdl.mapper.prepare import prepare
    from step_hdl.mapper.sizing import FitFabric
    from step_hdl.workloads.registry import build
    return prepare(build("swiglu", ap.Namespace(**SWIGLU, dtype=dtype)), FitFabric(tile))


def sweep_items(tiles, dtypes):
    """``(kind, variant, cls, tile, dtype, params, component)`` of every unit to characterize."""
    from step_hdl.mapper.design import make_unit
    from step_hdl.units.catalog import CATALOG
    seen = set()
    for dtype in dtypes:
        for tile in tiles:
            found = []
            for entry in CATALOG.values():
                u = entry.hardware(entry.make(tile, tile, dtype))
                found.append((type(u).__name__, _params_json(u), u))
            for spec in swiglu_prepared(tile, dtype).design.units:
                found.append((spec.cls, spec.to_json()["params"], make_unit(spec)))     # as estimate() sees it
            for cls, params, u in found:
                key = (kind_of(cls, params), variant_of(params, dtype), tile, dtype)
                if key in seen:
                    not_elaborated(u)  # a duplicate: not synthesized, no "never used" warning
                    continue
                seen.add(key)
                yield (*key[:2], cls, tile, dtype, params, u)


def queue_items(tiles, dtypes):
    from step_hdl.units.layout import TokenFormat, tile_format
    from step_hdl.units.stream import Queue
    widths = set()
    for dtype in (*dtypes, "int32"):
        for tile in tiles:
            fmt = TokenFormat(tile_format(dtype, tile, tile), 4)
            if fmt.width in widths:
                continue
            widths.add(fmt.width)
            for depth in QUEUE_DEPTHS:
                yield fmt.width, depth, Queue(fmt.layout, depth)


def _synth(component, name, workdir, **kw):
    work = Path(workdir) / name if workdir else Path(tempfile.mkdtemp(prefix=f"char-{name}-"))
    try:
        return synthesize(component, name, workdir=work, **kw)
    finally:
        if not workdir:
            shutil.rmtree(work, ignore_errors=True)


def _wall(row: dict) -> float:
    """A row's wall time in seconds: its stages (nextpnr's placer and router times are part of its own)."""
    return sum(row["wall_s"].get(k, 0) for k in ("rtlil_s", "yosys_s", "nextpnr_s", "abc9_stopped_s"))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_").lower()


def run_sweep(tiles, dtypes, workdir=None, checkpoint=None) -> dict:
    t_start = time.perf_counter()
    table = {"tools": tool_versions(), "target": "ecp5-85f", "tiles": list(tiles), "dtypes": list(dtypes),
             "units": [], "queues": [], "soft_mul_luts": {}, "glue": {}}
    if checkpoint and Path(checkpoint).exists():      # resume an interrupted sweep
        table = json.loads(Path(checkpoint).read_text())
    done = {(r["kind"], r["variant"], r["tile"], r["dtype"]) for r in table["units"]}
    done |= {(r["width"], r["depth"]) for r in table["queues"]}

    prior = table.get("wall_s", 0.0)

    def save():
        table["wall_s"] = round(prior + time.perf_counter() - t_start, 1)
        if checkpoint:
            Path(checkpoint).write_text(json.dumps(table))

    for kind, var, cls, tile, dtype, params, u in sweep_items(tiles, dtypes):
        if (kind, var, tile, dtype) in done:
            not_elaborated(u)
            continue
        t0 = time.perf_counter()
        r = _synth(u, _safe(f"{kind}_{tile}_{dtype}"), workdir, place=False, dsp_budget=None)
        table["units"].append({"kind": kind, "variant": var, "cls": cls, "tile": tile, "dtype": dtype,
                               "params": params, "luts": r.synth_luts, "ffs": r.ffs, "dsps": r.dsps,
                               "brams": r.brams, "lutrams": r.lutrams, "multipliers": r.dsps,
                               "wall_s": round(time.perf_counter() - t0, 1)})
        _say(f"{kind:28s} {tile}x{tile} {dtype:5s} luts {r.synth_luts:6d} ffs {r.ffs:5d} dsps {r.dsps:4d} "
             f"brams {r.brams:3d}  ({time.perf_counter() - t0:.0f} s)")
        save()
    table["tiles"] = sorted({r["tile"] for r in table["units"]})
    table["dtypes"] = sorted({r["dtype"] for r in table["units"]}, key=dtype_bits)
    for width, depth, q in queue_items(tiles, dtypes):
        if (width, depth) in done:
            not_elaborated(q)
            continue
        t0 = time.perf_counter()
        r = _synth(q, f"queue_{width}_{depth}", workdir, place=False, dsp_budget=None)
        table["queues"].append({"width": width, "depth": depth, "luts": r.synth_luts, "ffs": r.ffs,
                                "brams": r.brams, "lutrams": r.lutrams, "wall_s": round(time.perf_counter() - t0, 1)})
        _say(f"Queue width {width:5d} depth {depth:3d}         luts {r.synth_luts:6d} ffs {r.ffs:5d} "
             f"brams {r.brams:3d} lutrams {r.lutrams:3d}  ({time.perf_counter() - t0:.0f} s)")
        save()
    from step_hdl.units.catalog import CATALOG
    entry = CATALOG["Map[matmul]"]
    for dtype in dtypes:
        if dtype in table["soft_mul_luts"]:
            continue
        hard = _synth(entry.make(2, 2, dtype), f"mm_dsp_{dtype}", workdir, place=False, dsp_budget=None)
        soft = _synth(entry.make(2, 2, dtype), f"mm_soft_{dtype}", workdir, place=False, dsp_budget=0)
        table["soft_mul_luts"][dtype] = round((soft.synth_luts - hard.synth_luts) / max(1, hard.dsps), 1)
        _say(f"multiplier in LUTs, {dtype}: {table['soft_mul_luts'][dtype]} LUTs")
        save()
    save()
    return table


def write_cost_table(table, path=HERE / "cost_table.json", doc=DOCS / "fpga-cost-table.md"):
    Path(path).write_text(json.dumps(table, indent=1) + "\n")
    tools = ", ".join(f"{k} {v}" for k, v in table["tools"].items())
    cover = "; ".join(f"{dt}: tiles " + ", ".join(f"{t}x{t} ({n} units)" for t, n in sorted(
        {t: sum(1 for r in table["units"] if (r["tile"], r["dtype"]) == (t, dt)) for t in
         {r["tile"] for r in table["units"] if r["dtype"] == dt}}.items()))
        for dt in sorted({r["dtype"] for r in table["units"]}, key=dtype_bits))
    lines = ["# ECP5 cost table", "",
             f"Generated by `python -m step_hdl.fpga.characterize --sweep` ({tools}; "
             f"{table['wall_s'] / 60:.0f} minutes of tool time on a shared two-core machine; rows: {cover}): "
             f"Yosys `synth_ecp5` of every unit kind of the catalog and of "
             f"the SwiGLU fabric, no place-and-route, DSP blocks unlimited. LUTs are LUT4 equivalents "
             f"(`LUT4 + 2*CCU2C + 2*TRELLIS_DPR16X4`), FFs `TRELLIS_FF`, DSPs `MULT18X18D`, BRAMs `DP16KD`. "
             f"The data is `fpga/cost_table.json`; `step_hdl.fpga.cost.estimate(design)` uses it.", "",
             "| unit | variant | tile | dtype | LUTs | FFs | DSPs | BRAMs |", "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in sorted(table["units"], key=lambda r: (r["kind"], r["variant"], dtype_bits(r["dtype"]), r["tile"])):
        var = ", ".join(f"{k} {v}" for k, v in json.loads(r["variant"]).items())
        lines.append(f"| {r['kind']} | {var} | {r['tile']} | {r['dtype']} | {r['luts']} | {r['ffs']} | "
                     f"{r['dsps']} | {r['brams']} |")
    lines += ["", "Edge FIFOs (`Queue`, payload width in bits incl. stop and done):", "",
              "| width | depth | LUTs | FFs | BRAMs | LUTRAMs |", "|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(table["queues"], key=lambda r: (r["width"], r["depth"])):
        lines.append(f"| {r['width']} | {r['depth']} | {r['luts']} | {r['ffs']} | {r['brams']} | {r['lutrams']} |")
    lines += ["", "A multiplier built in LUTs (beyond the device's DSP blocks): "
              + ", ".join(f"{k} {v} LUTs" for k, v in table["soft_mul_luts"].items()) + ".", ""]
    if "context" in table:
        c = table["context"]
        lines += [f"Context factors (units in a flattened fabric against the sum of the units alone; "
                  f"`--calibrate`): LUTs x{c['luts']}, FFs x{c['ffs']}, from the {c['calibrated_on']}.", ""]
    Path(doc).write_text("\n".join(lines))


# ----------------------------------------------------------------------------- per-unit report

def _row_of(r) -> dict:
    """A unit report row's resources, Fmax and critical path, from synthesis report ``r``."""
    cp = r.critical_path
    return {"luts": r.luts, "ffs": r.ffs, "dsps": r.dsps, "brams": r.brams,
            "fmax_mhz": round(r.fmax_mhz, 1) if r.fmax_mhz else None,
            "critical_path": None if cp is None else {
                "start": cp.start_signal, "end": cp.end_signal, "delay_ns": cp.delay_ns, "logic_ns": cp.logic_ns,
                "routing_ns": cp.routing_ns, "levels": cp.levels, "start_cell": cp.start, "end_cell": cp.end}}


def _timing_cells(r) -> str:
    """A report row's ``Fmax | critical path | delay | levels`` table cells, the Fmax marked under the goal."""
    cp = r["critical_path"]
    path_s = f"`{cp['start']}` -> `{cp['end']}`" if cp else "-"
    delay = f"{cp['delay_ns']:.2f} ({cp['logic_ns']:.2f}/{cp['routing_ns']:.2f})" if cp else "-"
    mark = " *" if r["fmax_mhz"] and r["fmax_mhz"] < GOAL_MHZ else ""
    fmax = r["fmax_mhz"] if r["fmax_mhz"] else "- (no register path)"
    return f"{fmax}{mark} | {path_s} | {delay} | {cp['levels'] if cp else '-'}"


def run_units(tile=4, dtype="int8", workdir=None, target="ecp5-85f", only=None) -> list:
    """One row per unit of the unit table (``only``: just these names)."""
    from .unit_table import units
    from step_hdl.units.catalog import CATALOG
    rows = []
    for name, params, u in units(tile, dtype):
        if only is not None and name not in only:
            not_elaborated(u)
            continue
        t0 = time.perf_counter()
        r = _synth(u, _safe(name), workdir, place=True, target=target)
        base = name.removesuffix(" pipelined")
        family = (CATALOG[base].family if base in CATALOG else
                  "compute" if base.startswith(("Map[", "Accum[")) else "plumbing")
        rows.append({"unit": name, "family": family, "params": params, **_row_of(r),
                     **({"lutrams": r.lutrams} if target != "ecp5-85f" else {}),
                     "wall_s": r.wall_s,
                     **({"fmax_placed_mhz": r.fmax_placed_mhz} if target != "ecp5-85f" else {})})
        _say(f"{name:26s} luts {r.luts:6d} ffs {r.ffs:5d} dsps {r.dsps:3d} brams {r.brams:3d} "
             f"fmax {r.fmax_mhz or 0:6.1f} MHz  ({time.perf_counter() - t0:.0f} s)")
    return rows


def fabric_unit_builds(prep) -> list:
    """``[(instances, class, parameters, component)]``: the distinct unit designs of a prepared fabric (the
    mapper's shared modules: one per class and structural parameters), each with the instances that use it."""
    from step_hdl.mapper.design import built_units
    from step_hdl.mapper.shared import design_groups
    units = built_units(prep.design)
    out = []
    for specs in design_groups(prep.design.units):
        u = units[specs[0].name]
        for other in specs[1:]:
            not_elaborated(units[other.name])  # the same design: synthesized once
        out.append(([sp.name for sp in specs], specs[0].cls, _params_json(u), u))
    return out


def run_fabric_units(workdir=None, only=None) -> list:
    """One row per distinct unit build of the pipelined SwiGLU acceptance fabric (``SWIGLU`` at 4x4 int8),
    each placed and routed out of context on ECP5 as the unit table's are: the builds the fabric has (its
    buffers' affine reads, its loads' 64 credits and five dimensions, rank 4), which the unit table's rows
    are not. ``only``: instance names (``accum_down``); just the builds they use (a
    :class:`CharacterizeError` names an instance the fabric does not have, before any synthesis)."""
    import argparse
    from step_hdl.mapper.prepare import prepare
    from step_hdl.mapper.sizing import FitFabric
    from step_hdl.workloads.registry import build
    w = build("swiglu", argparse.Namespace(**SWIGLU, dtype="int8"))     # as step-hdl synth ... --pipeline
    prep = prepare(w, FitFabric(4, fields={"pipeline": True}))
    builds = fabric_unit_builds(prep)
    if only is not None:
        known = sorted(n for names, *_ in builds for n in names)
        bad = [n for n in only if n not in known]
        if bad:
            for *_, u in builds:
                not_elaborated(u)
            raise CharacterizeError(f"--only: no instance {', '.join(map(repr, bad))} in the SwiGLU fabric; its "
                                    f"instances: {', '.join(known)}")
    rows = []
    for names, cls, params, u in builds:
        if only is not None and not set(names) & set(only):
            not_elaborated(u)
            continue
        r = _synth(u, _safe(names[0]), workdir, place=True)
        rows.append({"instances": names, "unit": cls, "params": params, **_row_of(r)})
        _say(f"{', '.join(names)[:40]:40s} {cls:20s} fmax {r.fmax_mhz or 0:6.1f} MHz")
    return rows


def merge_fabric_rows(rows, path) -> list:
    """``rows`` in place of the rows of the same instances in the fabric's unit report at ``path``, in its
    order (a build the report does not have is added at the end)."""
    new = {tuple(r["instances"]): r for r in rows}
    saved = json.loads(Path(path).read_text())["units"]
    return [new.pop(tuple(r["instances"]), r) for r in saved] + list(new.values())


def write_fabric_units(rows, path=HERE / "fabric_unit_report.json", doc=DOCS / "fpga-units.md") -> None:
    tools = ", ".join(f"{k} {v}" for k, v in tool_versions().items())
    Path(path).write_text(json.dumps({"fabric": "swiglu", **SWIGLU, "tile": 4, "dtype": "int8",
                                      "pipeline": True, "tools": tool_versions(), "units": rows}, indent=1) + "\n")
    args = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in SWIGLU.items() if k != "seed")
    lines = ["## The SwiGLU fabric's own unit builds", "",
             f"Generated by `python -m step_hdl.fpga.characterize --fabric-units` ({tools}): every distinct unit "
             f"design of the pipelined acceptance fabric (`step-hdl synth swiglu {args} --dtype int8 "
             f"--pipeline`), out of context as above, each with the instances that use it. These are the "
             f"builds the fabric places, and they differ from the table's rows: the buffers read by an affine "
             f"walk of three dimensions, the loads hold 64 credits over five dimensions, the streams are of "
             f"rank 4. Each unit has the device's DSP blocks to itself (in the fabric the down projection's "
             f"multipliers are in LUTs).", "",
             "| instances | unit | LUTs | FFs | DSPs | BRAMs | Fmax (MHz) | critical path | delay (ns) "
             "logic/routing | levels |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        lines.append(f"| {', '.join(r['instances'])} | {r['unit']} | {r['luts']} | {r['ffs']} | {r['dsps']} | "
                     f"{r['brams']} | {_timing_cells(r)} |")
    slow = [r for r in rows if r["fmax_mhz"] and r["fmax_mhz"] < GOAL_MHZ]
    lines += ["", f"Under {GOAL_MHZ} MHz (`*`): " + (", ".join(f"{r['unit']} ({', '.join(r['instances'])})"
                                                       for r in slow) if slow else "none") + "."]
    _replace_section(doc, lines[0], lines)


def table_names() -> list[str]:
    """The unit table's names in its order: every unit, then the pipelined builds."""
    from .unit_table import PIPELINED, unit_names
    return [*unit_names(), *(f"{n} pipelined" for n in PIPELINED)]


def check_only(only, path, tile=4, dtype="int8", target="ecp5-85f") -> None:
    """``--only``: the names must be the table's, and the report they are merged into must come from the same
    tools, tile and type (else the merged table would mix flows)."""
    names = table_names()
    bad = [n for n in only if n not in names]
    if bad:
        raise CharacterizeError(f"--only: no unit {', '.join(map(repr, bad))} in the unit table; its units: "
                                f"{', '.join(names)}")
    if not Path(path).exists():
        raise CharacterizeError(f"--only: no report at {path} to merge into; run --units without --only first")
    rep = json.loads(Path(path).read_text())
    want = (tile, dtype, tool_versions(target))
    if (rep.get("tile"), rep.get("dtype"), rep.get("tools")) != want:
        raise CharacterizeError(f"--only: {path} was made at {rep.get('tile')}x{rep.get('tile')} {rep.get('dtype')} "
                                f"with {rep.get('tools')}, not {tile}x{tile} {dtype} with {want[2]}; run --units "
                                f"without --only")


def merge_rows(rows, path) -> list:
    """``rows`` in place of the same units' rows of the report at ``path``, in the unit table's order (a unit
    the report does not have yet is added)."""
    old = {r["unit"]: r for r in json.loads(Path(path).read_text())["units"]}
    old.update({r["unit"]: r for r in rows})
    order = {n: k for k, n in enumerate(table_names())}
    return sorted(old.values(), key=lambda r: order.get(r["unit"], len(order)))


def write_units(rows, tile=4, dtype="int8", path=HERE / "unit_report.json", doc=DOCS / "fpga-units.md",
                notes=NOTES_DOC):
    """Save the unit table's ``rows`` (``--units``) at ``path`` and write the page from them."""
    report = {"tile": tile, "dtype": dtype, "tools": tool_versions(), "units": rows}
    Path(path).write_text(json.dumps(report, indent=1) + "\n")
    write_units_page(report, doc, notes)


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def unit_notes(notes=NOTES_DOC) -> dict[str, str]:
    """The unit notes of ``notes`` (``docs/fpga.md``): the ``### <unit>`` headings of its ``## Units under
    {GOAL_MHZ} MHz`` section, each unit name with its text (empty when the heading has none)."""
    text = Path(notes).read_text() if Path(notes).exists() else ""
    out, name, inside = {}, None, False
    for line in text.splitlines():
        if line.startswith("## "):
            inside, name = line == f"## Units under {GOAL_MHZ} MHz", None
        elif inside and line.startswith("### "):
            name = line[4:].strip()
            out[name] = ""
        elif inside and name is not None and line.strip():
            out[name] = (out[name] + " " + line.strip()).strip()
    return out


def write_units_page(report: dict, doc=DOCS / "fpga-units.md", notes=NOTES_DOC) -> None:
    """The ECP5 unit table of ``doc`` and its "Units under {GOAL_MHZ} MHz" section from a unit report (the dict
    :func:`write_units` saves: ``tile``, ``dtype``, ``tools``, ``units``), without synthesis; the sections after
    them (``--floats``, ``--target gw2a-18``, ``--fabric-units``) stay. Each unit under the goal links to its note
    in ``notes`` (:func:`unit_notes`); a unit without one is named in a warning and in the page."""
    rows, tile, dtype = report["units"], report["tile"], report["dtype"]
    tools = ", ".join(f"{k} {v}" for k, v in report["tools"].items())
    total = sum(map(_wall, rows))
    lines = ["# Units on ECP5-85F", "",
             f"Generated by `python -m step_hdl.fpga.characterize --units` ({tools}; {total / 60:.0f} minutes). "
             f"Every unit family at physical tile {tile}x{tile} {dtype}, max rank 3: Yosys `synth_ecp5`, "
             f"nextpnr `--85k --package CABGA381 --out-of-context --freq 100 --seed 1`. LUTs are placed "
             f"logic cells (`TRELLIS_COMB`), FFs `TRELLIS_FF`, DSPs `MULT18X18D`, BRAMs `DP16KD`; Fmax is "
             f"the register-to-register maximum of `clk`, and the critical path is named by the Amaranth "
             f"signals at its start and end (levels: LUTs, carry cells and DSPs on the path). "
             f"`docs/fpga.md` describes the flow.", "",
             "| unit | family | parameters | LUTs | FFs | DSPs | BRAMs | Fmax (MHz) | critical path | delay (ns) "
             "logic/routing | levels |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
    slow = []
    for r in rows:
        lines.append(f"| {r['unit']} | {r['family']} | {r['params']} | {r['luts']} | {r['ffs']} | {r['dsps']} | "
                     f"{r['brams']} | {_timing_cells(r)} |")
        if r["fmax_mhz"] and r["fmax_mhz"] < GOAL_MHZ:
            slow.append(r)
    link = Path(os.path.relpath(Path(notes).resolve(), Path(doc).resolve().parent)).as_posix()
    section = f"Units under {GOAL_MHZ} MHz"
    lines += ["", f"## {section}", "",
              "The `pipelined` rows are the builds of a fabric with `pipeline` (`Fabric.pipeline`, `--pipeline`: "
              "the function stages, the buffer's SRAM output register and the linear load's request slice and "
              "registered order-queue head, "
              "`docs/units.md`), each a few cycles "
              "more latency at the same II; the other units are the same on both fabrics.", ""]
    fast = {r["unit"] for r in rows if r.get("fmax_mhz") and r["fmax_mhz"] >= GOAL_MHZ}
    twins = [r["unit"] for r in slow if f"{r['unit']} pipelined" in fast]
    if slow and len(twins) == len(slow):
        lines += [f"Each of them has a pipelined build at or above {GOAL_MHZ} MHz (its `pipelined` row).", ""]
    elif twins:
        lines += [f"{', '.join(twins)}: a pipelined build at or above {GOAL_MHZ} MHz (its `pipelined` row); "
                  f"the others have none.", ""]
    if not slow:
        lines.append("None.")
    else:
        lines += [f"Why each is under the goal, and what its pipelined build does about it: the unit's note in "
                  f"[{section}]({link}#{_anchor(section)}).", ""]
    have = unit_notes(notes)
    for r in slow:
        cp = r["critical_path"]
        head = f"* **{r['unit']}** ({r['fmax_mhz']} MHz" + (f", `{cp['start']}` -> `{cp['end']}`" if cp else "")
        if have.get(r["unit"]):
            lines.append(f"{head}): [note]({link}#{_anchor(r['unit'])})")
        else:
            _say(f"warning: {r['unit']} is under {GOAL_MHZ} MHz and has no note in {notes} (a '### {r['unit']}' "
                 f"heading with its text under '## {section}')")
            lines.append(f"{head}): no note in `{link}` yet")
    for name in sorted(set(have) - {r["unit"] for r in slow}):
        _say(f"warning: {notes} has a note for {name}, which is not a unit under {GOAL_MHZ} MHz in the report")
    old = Path(doc).read_text() if Path(doc).exists() else ""
    cut = min([old.index(m) for m in ("\n## Float units", "\n## Gowin GW2A-18") if m in old] or [len(old)])
    Path(doc).write_text("\n".join(lines) + "\n" + old[cut:])     # --floats' and --target's sections stay


def _replace_section(doc, heading: str, lines: list) -> None:
    """Put ``lines`` (starting with ``heading``, a ``## `` line) in ``doc`` in place of the section of that
    heading, up to the next ``## `` heading; at the end if there is none."""
    text = Path(doc).read_text()
    marker = "\n" + heading
    if marker in text:
        start = text.index(marker)
        nxt = text.find("\n## ", start + len(marker))
        text = text[:start] + "\n" + "\n".join(lines) + ("\n" + text[nxt:] if nxt >= 0 else "\n")
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    Path(doc).write_text(text)


#: a routed Fmax this many times nextpnr's estimate after placement has lost the unit's paths (Gowin)
LOST_FACTOR = 2


def _lost(row) -> bool:
    placed = row.get("fmax_placed_mhz")
    return bool(placed and row["fmax_mhz"] and row["fmax_mhz"] > LOST_FACTOR * placed)


def write_units_gowin(rows, tile=4, dtype="int8", path=HERE / "unit_report_gw2a-18.json",
                      doc=DOCS / "fpga-units.md", ecp5=HERE / "unit_report.json"):
    """The unit table on the second family beside the ECP5 one (``--units --target gw2a-18``)."""
    tools = tool_versions("gw2a-18")
    Path(path).write_text(json.dumps({"tile": tile, "dtype": dtype, "tools": tools, "units": rows}, indent=1)
                          + "\n")
    other = {r["unit"]: r for r in json.loads(Path(ecp5).read_text())["units"]} if Path(ecp5).exists() else {}
    total = sum(map(_wall, rows))
    timed = [r for r in rows if not r["dsps"] and r["fmax_mhz"] and not _lost(r)
             and other.get(r["unit"], {}).get("fmax_mhz")]
    ratio = sorted(r["fmax_mhz"] / other[r["unit"]]["fmax_mhz"] for r in timed)
    lines = ["## Gowin GW2A-18", "",
             f"Generated by `python -m step_hdl.fpga.characterize --units --target gw2a-18` "
             f"({', '.join(f'{k} {v}' for k, v in tools.items())}, apycula; {total / 60:.0f} minutes): the same "
             f"units at {tile}x{tile} {dtype} on a second open flow, Yosys `synth_gowin` and nextpnr-himbaechel "
             f"on a GW2A-LV18PG256C8/I7 (`fpga/gowin.py`). Resources are the unit's own synthesis (LUTs: "
             f"`LUT1`-`LUT4` and `ALU` carry cells; LUT RAMs: `RAM16*` cells, the small FIFOs' storage; "
             f"multipliers: `MULT*` cells, an int8 product a `MULT9X9`; BSRAMs: 18-kbit block RAMs). "
             f"nextpnr's Gowin flow has no out-of-context mode, so the Fmax comes from the unit inside a "
             f"three-pin register harness (`fpga/harness.py`): unlike the ECP5 runs, paths from and to the "
             f"unit's ports are timed too. **nextpnr-himbaechel 0.11 has no timing arcs through Gowin's "
             f"multiplier blocks** (a registered 18x18 product alone reports 1,501 MHz), so the Fmax of a unit "
             f"with multipliers (marked †) leaves its multiplier paths out and is not comparable. On some "
             f"units its routed timing loses the unit's own paths as well: where the routed Fmax is more than "
             f"{LOST_FACTOR}x nextpnr's estimate after placement, the row gives both (marked ‡) and is not "
             f"compared either.", "",
             f"Over the {len(timed)} units without multipliers timed on both families, Gowin's Fmax is "
             f"{ratio[0]:.2f}x to {ratio[-1]:.2f}x the ECP5's (median {ratio[len(ratio) // 2]:.2f}x)."
             if ratio else "", "",
             "| unit | LUTs | LUT RAMs | FFs | multipliers | BSRAMs | Fmax (MHz) | ECP5-85F Fmax | critical path |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        cp = r["critical_path"]
        path_s = f"`{cp['start']}` -> `{cp['end']}`" if cp else "-"
        mark = (" †" if r["dsps"] else "") + (f" ‡ (placed {r['fmax_placed_mhz']:.1f})" if _lost(r) else "")
        e = other.get(r["unit"], {}).get("fmax_mhz") or "-"
        lines.append(f"| {r['unit']} | {r['luts']} | {r.get('lutrams', '-')} | {r['ffs']} | {r['dsps']} | "
                     f"{r['brams']} | {r['fmax_mhz'] or '-'}{mark} | {e} | {path_s} |")
    _replace_section(doc, "## Gowin GW2A-18", lines)


# ----------------------------------------------------------------------------- float units

def float_units(tile: int = 4):
    """``(name, dtype, component)`` of the units with float hardware, each beside its integer twins: the
    element-wise Map functions, the rounded and the group-sum matmul, the MatMul unit's fp32 running sum,
    exp and SiLU, the conversion, an Accum adding bf16 tiles into an fp32 state."""
    from step_hdl.units.compute import Accum, AccumParams, Map, MapParams
    from step_hdl.units.matmul import MatMul, MatMulParams
    for dt in ("int8", "int16", "bf16"):
        yield "Map[add]", dt, Map(MapParams(tile, tile, dt, 3, fns=("add",)))
        yield "Map[mul]", dt, Map(MapParams(tile, tile, dt, 3, fns=("mul",)))
        yield "Map[matmul]", dt, Map(MapParams(tile, tile, dt, 3, fns=("matmul",), matmul_transpose_a=False))
        yield "MatMul", dt, MatMul(MatMulParams(tile, tile, dt, 3, matmul_transpose_a=False,
                                                matmul_groups=not make_dtype(dt).is_int))
        yield "Accum[add]", dt, Accum(AccumParams(tile, tile, dt, 3, updates=("add",),
                                                  state_dtype=None if make_dtype(dt).is_int else "fp32"))
    for f in ("exp", "silu"):
        yield f"Map[{f}]", "int16", Map(MapParams(tile, tile, "int16", 3, fns=(f,)))
        yield f"Map[{f}]", "bf16", Map(MapParams(tile, tile, "bf16", 3, fns=(f,)))
    yield "Map[convert]", "fp32 -> bf16", Map(MapParams(tile, tile, "fp32", 3, fns=("convert",), out_dtype="bf16"))
    # the units whose 4x4 bf16 build Yosys does not finish in minutes (its SAT-based `share` pass and ABC on
    # 150,000-190,000 AND gates), at 2x2 beside their integer twins: a quarter of the lanes
    small = tile // 2
    for dt in ("int16", "bf16"):
        yield f"Map[matmul] {small}x{small}", dt, Map(MapParams(small, small, dt, 3, fns=("matmul",),
                                                                matmul_transpose_a=False))
        yield f"MatMul {small}x{small}", dt, MatMul(MatMulParams(small, small, dt, 3, matmul_transpose_a=False,
                                                                 matmul_groups=not make_dtype(dt).is_int))
        yield f"Map[silu] {small}x{small}", dt, Map(MapParams(small, small, dt, 3, fns=("silu",)))


def run_float_units(tile=4, workdir=None, checkpoint=None, timeout_min=None) -> list:
    """One row per unit of :func:`float_units`. With ``timeout_min`` a unit whose Yosys run (ABC9) takes longer
    is synthesized again with classic ABC (its row says ``"lut_mapper": "abc"``); one that does not finish that
    way either is stopped and its row says so (``unfinished``) instead of holding the table up."""
    rows = json.loads(Path(checkpoint).read_text()) if checkpoint and Path(checkpoint).exists() else []
    done = {(r["unit"], r["dtype"]) for r in rows}      # resume an interrupted run
    for name, dt, u in float_units(tile):
        if (name, dt) in done:
            not_elaborated(u)
            continue
        t0 = time.perf_counter()
        stopped = []
        unplaced = None
        for mapper in ("abc9", "abc") if timeout_min is not None else ("abc9",):
            try:
                r = _synth(u, _safe(f"{name}_{dt}"), workdir, place=True, lut_mapper=mapper,
                           yosys_timeout_s=None if timeout_min is None else 60 * timeout_min)
                break
            except YosysError as exc:
                if "did not finish" not in str(exc):
                    raise
                step = re.search(r"stopped in: (.*)\); log ", str(exc)).group(1)
                stopped.append(f"{mapper} in {step}")
                _say(f"{name:14s} {dt:12s} Yosys with {mapper} did not finish in {timeout_min:g} minutes")
            except NextpnrError as exc:
                # synthesized, but more than the device holds: the row has Yosys's counts and says so
                log = re.search(r"log (\S+):", str(exc))
                full = re.findall(r"(\w+): +(\d+)/ *(\d+) +(\d+)%", Path(log.group(1)).read_text()) if log else []
                over = [f"{c} {int(pct)} %" for c, _, _, pct in full if int(pct) > 100]
                unplaced = f"does not fit the device ({', '.join(over) or str(exc).splitlines()[-1].strip()})"
                r = _synth(u, _safe(f"{name}_{dt}"), workdir, place=False, lut_mapper=mapper)
                break
        else:
            rows.append({"unit": name, "dtype": dt, "unfinished": f"Yosys did not finish in {timeout_min:g} "
                         f"minutes ({'; '.join(stopped)})", "wall_s": {"yosys_s": round(time.perf_counter() - t0, 1)}})
            if checkpoint:
                Path(checkpoint).write_text(json.dumps(rows))
            continue
        cp = r.critical_path
        rows.append({"unit": name, "dtype": dt, "luts": r.luts, "ffs": r.ffs, "dsps": r.dsps, "brams": r.brams,
                     "fmax_mhz": round(r.fmax_mhz, 1) if r.fmax_mhz else None, "lut_mapper": mapper,
                     **({"unplaced": unplaced} if unplaced else {}),
                     "critical_path": None if cp is None else {"start": cp.start_signal, "end": cp.end_signal,
                                                               "levels": cp.levels, "delay_ns": cp.delay_ns},
                     "wall_s": dict(r.wall_s, **({"abc9_stopped_s": 60 * timeout_min} if stopped else {}))})
        _say(f"{name:14s} {dt:12s} luts {r.luts:6d} ffs {r.ffs:5d} dsps {r.dsps:3d} fmax {r.fmax_mhz or 0:6.1f} MHz "
             f"{mapper} ({time.perf_counter() - t0:.0f} s)")
        if checkpoint:
            Path(checkpoint).write_text(json.dumps(rows))
    return rows


def write_float_units(rows, tile=4, path=HERE / "float_unit_report.json", doc=DOCS / "fpga-units.md"):
    Path(path).write_text(json.dumps({"tile": tile, "tools": tool_versions(), "units": rows}, indent=1) + "\n")
    total = sum(map(_wall, rows))
    lines = ["## Float units", "",
             f"Generated by `python -m step_hdl.fpga.characterize --floats` ({total / 60:.0f} minutes), the same "
             f"flow at {tile}x{tile}: each unit with float hardware (`units/floats.py`, bit for bit "
             f"`step_hdl/floats.py`) beside its integer twins. bf16 operands; the MatMul unit and the Accum keep "
             f"an fp32 running sum (the MatMul unit adds each pair's group sums to it, the Accum adds bf16 tiles "
             f"into an fp32 state); the plain Map matmul sums in fp32 and rounds once to bf16. Every unit here "
             f"is built without `pipeline`: each function is combinational in front of the output register (a "
             f"fabric with `pipeline` cuts the integer matmul, mul, SiLU and exp into stages, the float functions "
             f"not yet). LUT mapping by ABC9 (as every other table here) unless the row says ABC: with "
             f"`--unit-timeout` a unit whose ABC9 run does not finish in that time is mapped by classic ABC "
             f"instead (on the bf16 Map mul ABC gave 3,461 LUTs at 36.6 MHz, ABC9 3,277 at 42.3). The units "
             f"whose 4x4 bf16 build Yosys does not finish (its SAT-based `share` pass, then ABC, on 150,000 to "
             f"190,000 AND gates) are also here at 2x2, beside their int16 twins: a quarter of the lanes.", "",
             "| unit | type | LUTs | FFs | DSPs | Fmax (MHz) | LUT mapper | critical path | levels |",
             "|---|---|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        if r.get("unfinished"):
            lines.append(f"| {r['unit']} | {r['dtype']} | - | - | - | - | - | {r['unfinished']} | - |")
            continue
        cp = r["critical_path"]
        path_s = f"`{cp['start']}` -> `{cp['end']}`" if cp else r.get("unplaced", "-")
        lines.append(f"| {r['unit']} | {r['dtype']} | {r['luts']} | {r['ffs']} | {r['dsps']} | "
                     f"{r['fmax_mhz'] or '-'} | {r.get('lut_mapper', 'abc9').upper()} | {path_s} | "
                     f"{cp['levels'] if cp else '-'} |")
    _replace_section(doc, "## Float units", lines)


# ----------------------------------------------------------------------------- fabric check

def run_fabric(fabric_json=None, workdir=None) -> dict:
    from step_hdl.mapper.top import FabricTop
    prep = swiglu_prepared(4, "int8")
    d = prep.design
    if fabric_json:
        rep = json.loads(Path(fabric_json).read_text())
    else:
        rep = _synth(FabricTop(d, counters=False), f"{d.name}_top", workdir, place=True, progress=_say).to_json()
    table = load_table(HERE / "cost_table.json")
    out = {"design": d.name, "params": SWIGLU, "tile": 4, "dtype": "int8",
           "synthesized": {k: rep[k] for k in ("luts", "synth_luts", "ffs", "dsps", "brams", "lutrams",
                                                "soft_multipliers", "fmax_mhz")},
           "tools": rep["tools"], "wall_s": rep["wall_s"]}
    for k in ("router", "critical_path", "post_placement_fmax_mhz", "note"):
        if rep.get(k) is not None:
            out[k] = rep[k]
    for label, excl in (("estimate", ()),):
        est = estimate(d, table, exclude_tiles=excl)
        out[label] = {k: est[k] for k in ("luts", "ffs", "dsps", "brams", "lutrams", "soft_multipliers")}
        out[label]["error"] = {
            "luts_vs_synth": round(est["luts"] / rep["synth_luts"] - 1, 4),
            "luts_vs_placed": round(est["luts"] / rep["luts"] - 1, 4),
            "ffs": round(est["ffs"] / rep["ffs"] - 1, 4)}
    return out


def write_fabric(check, path=HERE / "estimate_check.json", doc=DOCS / "fpga-cost-table.md"):
    Path(path).write_text(json.dumps(check, indent=1) + "\n")
    s = check["synthesized"]
    lines = ["", "## Estimate against real synthesis", "",
             f"SwiGLU (batch {SWIGLU['batch']}, hidden {SWIGLU['hidden']}, inter {SWIGLU['inter']}, tile_b "
             f"{SWIGLU['tile_b']}, tile_inter {SWIGLU['tile_inter']}) on 4x4 int8 tiles, the fabric of "
             f"`step-hdl synth swiglu --batch 16 --hidden 32 --inter 64 --tile-b 8 --tile-inter 16 --dtype int8 --target "
             f"ecp5-85f`; `fpga/estimate_check.json` has the numbers.", "",
             "| | LUTs (synthesis) | LUTs (placed) | FFs | DSPs | BRAMs | multipliers in LUTs |",
             "|---|---:|---:|---:|---:|---:|---:|",
             f"| synthesized | {s['synth_luts']} | {s['luts']} | {s['ffs']} | {s['dsps']} | {s['brams']} | "
             f"{s['soft_multipliers']} |"]
    for label in ("estimate",):
        e = check[label]
        err = e["error"]
        lines.append(f"| {label.replace('_', ' ')} | {e['luts']} ({100 * err['luts_vs_synth']:+.1f} %) | "
                     f"({100 * err['luts_vs_placed']:+.1f} %) | {e['ffs']} ({100 * err['ffs']:+.1f} %) | "
                     f"{e['dsps']} | {e['brams']} | {e['soft_multipliers']} |")
    lines += ["", f"Context factors in use: LUTs x{load_table(HERE / 'cost_table.json')['context']['luts']}, FFs "
              f"x{load_table(HERE / 'cost_table.json')['context']['ffs']} (calibrated on the 2x2 fabric, not "
              f"this one)."]
    if s.get("fmax_mhz") is not None:
        w, cp = check.get("wall_s", {}), check.get("critical_path")

        def mins(*keys):
            return f"{sum(w.get(k, 0) for k in keys) / 60:.1f} min"
        line = (f"Place and route: routed (nextpnr {check.get('router') or 'router1'}, seed 1): Fmax "
                f"{s['fmax_mhz']} MHz at the 100 MHz constraint")
        if cp:
            line += (f"; critical path `{cp['start_signal']}` -> `{cp['end_signal']}`, {cp['delay_ns']} ns "
                     f"({cp['logic_ns']} logic, {cp['routing_ns']} routing, {cp['levels']} levels)")
        if "nextpnr_s" in w:
            line += (f"; wall time: Yosys {mins('yosys_s')}, nextpnr {mins('nextpnr_s')} (placement "
                     f"{mins('heap_placer_s', 'sa_placer_s')}, routing {mins('router2_s', 'router1_s')})")
        lines += ["", line + "."]
    elif check.get("note"):
        lines += ["", f"Place and route: {check['note']}; nextpnr's timing estimate after placement: "
                      f"{check.get('post_placement_fmax_mhz')} MHz."]
    text = Path(doc).read_text()
    marker = "\n## Estimate against real synthesis"
    if marker in text:
        text = text[: text.index(marker)]
    Path(doc).write_text(text.rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def run_calibration(fabric_json=None, workdir=None, tile=2) -> dict:
    """The ``context`` factors: synthesized SwiGLU fabric at ``tile`` over the sum of its units' table costs."""
    from .cost import queue_cost, unit_cost
    from step_hdl.mapper.top import FabricTop
    d = swiglu_prepared(tile, "int8").design
    if fabric_json:
        rep = json.loads(Path(fabric_json).read_text())
    else:
        rep = _synth(FabricTop(d, counters=False), f"{d.name}_top", workdir, place=False, progress=_say).to_json()
    table = load_table(HERE / "cost_table.json")
    units = {k: 0.0 for k in ("luts", "ffs")}
    rest = dict(units)
    for u in d.units:
        c = unit_cost(table, u.cls, u.to_json()["params"], tile, "int8")
        for k in units:
            units[k] += c[k]
    for e in d.edges:
        c = queue_cost(table, e.width, e.depth)
        for k in rest:
            rest[k] += c[k]
    rest["luts"] += rep["soft_multipliers"] * table["soft_mul_luts"]["int8"]
    synth = {"luts": rep["synth_luts"], "ffs": rep["ffs"]}
    table["context"] = {k: round((synth[k] - rest[k]) / units[k], 4) for k in units}
    table["context"]["calibrated_on"] = (f"SwiGLU {SWIGLU} on {tile}x{tile} int8 tiles: synthesized LUTs "
                                         f"{synth['luts']}, FFs {synth['ffs']}")
    write_cost_table(table)
    _say(f"context factors: {table['context']}")
    return table


# ----------------------------------------------------------------------------- baselines

#: the units the ``synth`` tests run through the whole flow against their baseline: two small ones, and the
#: pipelined builds of issue 22 (their Fmax floors)
BASELINE_UNITS = (("Map[add]", 4, "int8"), ("Queue", 4, "int8"), ("Map[matmul] pipelined", 4, "int8"),
                  ("Map[silu] pipelined", 4, "int8"), ("OnChipBuffer pipelined", 4, "int8"),
                  ("MatMul pipelined", 4, "int8"), ("LinearOffChipLoad pipelined", 4, "int8"),
                  ("Map[requantize] pipelined", 4, "int8"), ("Accum[add,kept] pipelined", 4, "int8"),
                  ("Reshape", 4, "int8"), ("EagerMerge", 4, "int8"))


def baseline_key(tools: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(tools.items()))


def run_baseline(path=HERE / "baselines.json", workdir=None):
    from .unit_table import unit
    data = json.loads(Path(path).read_text()) if Path(path).exists() else {
        "tolerances": {"luts": 0.10, "ffs": 0.05, "dsps": 0, "brams": 0, "fmax_mhz": 0.15}, "versions": {}}
    entry = {}
    report = json.loads((HERE / "unit_report.json").read_text()) if (HERE / "unit_report.json").exists() else {}
    for name, tile, dtype in BASELINE_UNITS:
        rows = [r for r in report.get("units", []) if r["unit"] == name]
        if rows and (report["tile"], report["dtype"], report["tools"]) == (tile, dtype, tool_versions()):
            r = rows[0]         # the same flow already ran for the unit report
            got = {k: r[k] for k in ("luts", "ffs", "dsps", "brams", "fmax_mhz")}
        else:
            r = _synth(unit(name, tile, dtype), _safe(name), workdir, place=True)
            got = {"luts": r.luts, "ffs": r.ffs, "dsps": r.dsps, "brams": r.brams, "fmax_mhz": round(r.fmax_mhz, 1)}
        entry[f"{name} {tile}x{tile} {dtype}"] = got
        _say(f"{name}: {got}")
    data["versions"][baseline_key(tool_versions())] = entry
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true", help="resource sweep -> fpga/cost_table.json")
    ap.add_argument("--units", action="store_true", help="per-unit report at 4x4 int8 -> docs/fpga-units.md")
    ap.add_argument("--units-page", action="store_true",
                    help="docs/fpga-units.md's ECP5 table and slow-unit links again from fpga/unit_report.json, "
                         "without synthesis (after editing the unit notes in docs/fpga.md)")
    ap.add_argument("--target", default="ecp5-85f", choices=("ecp5-85f", "gw2a-18"),
                    help="--units on this FPGA (gw2a-18: its own section of docs/fpga-units.md)")
    ap.add_argument("--only", nargs="+", metavar="UNIT", default=None,
                    help="--units: run just these units (names as in the table, e.g. 'LinearOffChipLoad "
                         "pipelined'); --fabric-units: just the builds these instances use (e.g. accum_down); "
                         "their rows replace theirs in the saved report")
    ap.add_argument("--fabric", action="store_true", help="SwiGLU fabric vs the estimate")
    ap.add_argument("--fabric-units", action="store_true",
                    help="every distinct unit build of the pipelined SwiGLU fabric, out of context "
                         "-> docs/fpga-units.md")
    ap.add_argument("--fabric-json", default=None, help="saved `step-hdl synth swiglu ... --json` output")
    ap.add_argument("--calibrate", action="store_true", help="the context factors, from the 2x2 SwiGLU fabric")
    ap.add_argument("--calibrate-json", default=None, help="saved `step-hdl synth swiglu ... --phys-tile 2 "
                                                           "--no-place --json` output")
    ap.add_argument("--floats", action="store_true", help="the float units at 4x4 bf16 -> docs/fpga-units.md")
    ap.add_argument("--baseline", action="store_true", help="record fpga/baselines.json for these tools")
    ap.add_argument("--unit-timeout", type=float, default=None, metavar="MINUTES",
                    help="--floats: stop a unit's Yosys run after this long; its row says so")
    ap.add_argument("--tiles", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--dtypes", nargs="+", default=["int8", "int16"])
    ap.add_argument("--workdir", default=None, help="keep every run's files here")
    ap.add_argument("--checkpoint", default=None,
                    help="--sweep, --floats: save progress here after every unit, resume from it")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except CharacterizeError as e:
        print(f"characterize: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    """What :func:`main`'s arguments ask for; a request it cannot carry out raises :class:`CharacterizeError`."""
    if not (args.sweep or args.units or args.fabric or args.baseline or args.calibrate or args.floats
            or args.fabric_units or args.units_page):
        args.sweep = args.units = args.calibrate = args.fabric = True
    if args.only and args.units and args.fabric_units:
        raise CharacterizeError("--only names units of the table (--units) or instances of the fabric "
                                "(--fabric-units), not both: give one of them")
    t0 = time.perf_counter()
    if args.sweep:
        write_cost_table(run_sweep(args.tiles, args.dtypes, args.workdir, args.checkpoint))
    if args.units:
        gowin = args.target == "gw2a-18"
        report = HERE / ("unit_report_gw2a-18.json" if gowin else "unit_report.json")
        if args.only:
            check_only(args.only, report, target=args.target)
        rows = run_units(workdir=args.workdir, target=args.target, only=args.only)
        if args.only:
            rows = merge_rows(rows, report)
        (write_units_gowin if gowin else write_units)(rows)
    if args.units_page:
        write_units_page(json.loads((HERE / "unit_report.json").read_text()))
    if args.floats:
        write_float_units(run_float_units(workdir=args.workdir, checkpoint=args.checkpoint,
                                          timeout_min=args.unit_timeout))
    if args.calibrate:
        run_calibration(args.calibrate_json, args.workdir)
    if args.fabric:
        check = run_fabric(args.fabric_json, args.workdir)
        write_fabric(check)
        _say(json.dumps({k: check[k] for k in ("synthesized", "estimate")}))
    if args.fabric_units:
        rows = run_fabric_units(args.workdir, args.only)
        if args.only:
            rows = merge_fabric_rows(rows, HERE / "fabric_unit_report.json")
        write_fabric_units(rows)
    if args.baseline:
        run_baseline(workdir=args.workdir)
    _say(f"done in {(time.perf_counter() - t0) / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
