"""``docs/functions.md``: the function library as a user reads it, generated from the registry.

Every function of :data:`step_hdl.functions.FUNCTIONS` with what it takes and gives (its docstring), its
parameters with their defaults (what :meth:`FnSpec.check_params` fills in), whether it computes on float
tiles, where it runs in hardware (a Map unit's function, an Accum's update or init, a FlatMap the mapper
lowers) and its FLOPs per call, as symbolic expressions of the operand shapes. ``tests/test_docs.py`` checks
the page is what this gives; ``python -m step_hdl.flow.functions_page`` writes it again.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import sympy

from step_hdl.functions import FUNCTIONS, fn
from step_hdl.types import Tile
from step_hdl.units.functions import HW_FUNCTIONS, UPDATES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "functions.md"

#: values for the required parameters, to show the type rule and the FLOPs of a call
_SAMPLE = {"requantize": {"shift": 4, "dtype": "int8"}, "convert": {"dtype": "fp32"},
           "zeros": {"rows": "R", "cols": "C", "dtype": "int32"}, "lowest": {"rows": "R", "cols": "C", "dtype": "int32"}}

R, C, K, N = sympy.symbols("R C K N", positive=True, integer=True)


def _first_paragraph(doc: str) -> str:
    """A docstring's first paragraph on one line, its reStructuredText roles and literals as Markdown code."""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    return re.sub(r":(?:func|mod|class):`~?([^`]+)`", r"`\1`", text).replace("``", "`")


def _defaults(name: str, spec) -> str:
    """The optional parameters with what ``check_params`` fills in (``-`` where it leaves one unset)."""
    if not spec.optional:
        return ""
    try:
        filled = spec.check_params(dict(_SAMPLE.get(name, {})))
    except Exception:         # a parameter whose default depends on the others: no default shown
        filled = {}
    return ", ".join(f"`{k}`" + (f" = `{filled[k]!r}`" if k in filled else "") for k in spec.optional)


def _operands(name: str, spec) -> tuple:
    if name == "matmul":
        return Tile("int16", R, K), Tile("int16", K, N)
    if name in ("sel_index", "keep_if_zero", "pair", "range"):
        return ()
    if name == "add_groups":
        return Tile("fp32", R, C), Tile("fp32", R, 4 * C)
    if name == "retile_row":
        return Tile("int16", R, C), Tile("int16", 1, C)
    return tuple(Tile("bf16" if name in ("convert", "row_group_sums") else "int16", R, C) for _ in range(spec.arity))


def _flops(name: str, spec) -> str:
    if spec.kind != "map":
        return "0"
    ops = _operands(name, spec)
    if not ops:
        return "0"
    try:
        f = fn(name, **_SAMPLE.get(name, {}))
        return f"`{sympy.simplify(spec.flops(f, *ops))}`".replace("`0`", "0")
    except Exception:
        return "-"


def _hardware(name: str, spec) -> str:
    if name in HW_FUNCTIONS:
        formats = HW_FUNCTIONS[name].float_formats
        return "Map unit" + (f" (floats: {', '.join(formats)})" if formats else " (integers)")
    if name in UPDATES:
        return "Accum update"
    if spec.kind == "init":
        return "an Accum's initial state"
    if spec.kind == "flatmap":
        return "FlatMap (lowered by the mapper)"
    if name in ("sel_index", "keep_if_zero", "pair"):
        return "index arithmetic (lowered by the mapper)"
    return "-"


def render() -> str:
    lines = [
        "# Functions",
        "",
        "What `fn` of a Map, Accum, Scan or FlatMap can be (`step_hdl.functions`), generated from the function",
        "registry by `python -m step_hdl.flow.functions_page` (`tests/test_docs.py` checks it). Integer arithmetic",
        "is exact and wraps to int32 where the result is int32; float arithmetic is bit for bit `docs/floats.md`.",
        "Parameters are given as keywords: `fn(\"requantize\", shift=4, dtype=\"int8\")`, or on the node:",
        "`g.map(x, \"exp\", frac=8)`. FLOPs are per call, for operands `[R, C]` (a matmul's `[R, K] x [K, N]`);",
        "symbolic metrics add them up over a stream (`docs/language.md`).",
        "",
        "| function | kind | what it does | required | optional (default) | floats | in hardware | FLOPs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(FUNCTIONS):
        spec = FUNCTIONS[name]
        doc = _first_paragraph(type(spec).__doc__ or "").replace("|", "\\|")
        req = ", ".join(f"`{k}`" for k in spec.required)
        floats = ("yes" if spec.has_float else "any type (moves data)" if name == "retile_row"
                  else "integers only" if spec.kind == "map" and spec.arity else "-")
        kind = {"map": "update" if name in UPDATES and name not in HW_FUNCTIONS else "map"}.get(spec.kind, spec.kind)
        lines.append(f"| `{name}` | {kind} | {doc} | {req} | {_defaults(name, spec)} | {floats} | "
                     f"{_hardware(name, spec)} | {_flops(name, spec)} |")
    lines += ["", "A function the mapper cannot place on the fabric in use, or that has no unit for a float",
              "format (fp32 `exp` and `silu`), is refused at mapping with a `FabricError` naming the node;",
              "`docs/flow.md` lists what lowers.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["render"]
