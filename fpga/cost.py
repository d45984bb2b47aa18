"""Resource estimate of a mapped fabric from the committed cost table, without running synthesis.

``cost_table.json`` (package data, written by ``python -m step_hdl.fpga.characterize
--sweep``) holds Yosys ``synth_ecp5`` resource counts of every unit kind the
catalog and the mapper build, at several physical tiles and element types, and
of the edge FIFOs (:class:`~step_hdl.units.stream.Queue`) at several widths and
depths. :func:`estimate` adds up, for a :class:`~step_hdl.mapper.design.Design`:

* each unit: the table's entry of the same kind and variant (class, functions,
  structural parameters) at the same tile and element type; otherwise the same
  kind and variant interpolated in tile (log-log between the nearest measured
  tiles, with one measured tile in proportion to the tile's area) and in
  element width (linear in bits);
* each edge FIFO: per measured depth a least-squares line in payload width,
  linear in depth between the nearest measured depths;
* multipliers beyond the device's DSP blocks: the flow builds them in LUTs
  (:func:`step_hdl.fpga.ecp5.soft_multipliers`), so each costs one DSP less
  and ``soft_mul_luts`` (measured per operand width) LUTs more.

The units' LUT and FF sums are scaled by the table's ``context`` factors: in a
flattened fabric a unit is smaller than alone (Yosys optimizes across unit
boundaries), by a ratio calibrated on one synthesized fabric
(``python -m step_hdl.fpga.characterize --calibrate``: SwiGLU on 2x2 tiles)
and checked on another (4x4, ``--fabric``).

Resources are in :class:`~step_hdl.fpga.tools.SynthReport` units (``synth_luts``:
LUT4 equivalents after synthesis).
"""

from __future__ import annotations

import json
import math
from importlib import resources

METRICS = ("luts", "ffs", "dsps", "brams", "lutrams", "multipliers")

# parameters that follow the tile side; dtype-valued parameters are recorded relative to the fabric's dtype
_TILE_KEYS = {"rows", "cols", "in1_rows", "in1_cols", "ref_rows", "ref_cols", "state_rows", "state_cols",
              "rows0", "cols0", "rows1", "cols1"}


def load_table(path=None) -> dict:
    """The committed cost table (or the one at ``path``)."""
    if path is not None:
        with open(path) as f:
            return json.load(f)
    return json.loads(resources.files("step_hdl.fpga").joinpath("cost_table.json").read_text())


def dtype_bits(name: str) -> int:
    return int("".join(c for c in name if c.isdigit()) or 32)


def kind_of(cls: str, params: dict) -> str:
    """``Map[matmul]``, ``Accum[add]``, ``OnChipBuffer``: the class and its functions."""
    fns = params.get("fns") or params.get("updates")
    return f"{cls}[{'+'.join(fns)}]" if fns else cls


def variant_of(params: dict, dtype: str) -> str:
    """The structural parameters that are not the tile side, dtype-valued ones relative to ``dtype``."""
    out = {}
    for k, v in sorted(params.items()):
        if k in _TILE_KEYS or k in ("fns", "updates"):
            continue
        if isinstance(v, str) and v.startswith("int"):
            v = "D" if v == dtype else v
        out[k] = v
    return json.dumps(out, sort_keys=True)


def _interp(points: list[tuple[float, float]], x: float, log: bool) -> float:
    """Piecewise interpolation through ``(x, y)`` points (log-log if ``log``); the end pairs extrapolate."""
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1 or (x1, y1) == pts[-1]:
            break
    if x == x0:
        return y0
    if log and min(y0, y1) > 0:
        a = math.log(y1 / y0) / math.log(x1 / x0)
        return y0 * (x / x0) ** a
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def unit_cost(table: dict, cls: str, params: dict, tile: int, dtype: str, exclude_tiles=()) -> dict:
    """Estimated resources of one unit (see the module docstring); ``exclude_tiles`` hides table rows."""
    kind, var = kind_of(cls, params), variant_of(params, dtype)
    rows = [r for r in table["units"] if r["kind"] == kind and r["tile"] not in exclude_tiles]
    same = [r for r in rows if r["variant"] == var]
    if not same:
        if not rows:
            raise KeyError(f"no cost-table entry for unit kind {kind}; rerun python -m step_hdl.fpga.characterize")
        # the nearest variant: most parameters in common
        mine = json.loads(var)
        best = max({r["variant"] for r in rows},
                   key=lambda v: sum(json.loads(v).get(k) == x for k, x in mine.items()))
        same = [r for r in rows if r["variant"] == best]
    bits = dtype_bits(dtype)
    out = {}
    for m in METRICS:
        by_bits = {}
        for r in same:
            by_bits.setdefault(dtype_bits(r["dtype"]), []).append((r["tile"], r[m]))
        # one measured tile: scale with the tile's area (the datapath width); else interpolate log-log
        per_bits = [(b, pts[0][1] * (tile / pts[0][0]) ** 2 if len(pts) == 1 else _interp(pts, tile, log=True))
                    for b, pts in by_bits.items()]
        out[m] = max(0.0, _interp(per_bits, bits, log=False))
    return out


def queue_cost(table: dict, width: int, depth: int) -> dict:
    """Estimated resources of one edge FIFO of ``depth`` tokens of ``width`` bits."""
    by_depth = {}
    for r in table["queues"]:
        by_depth.setdefault(r["depth"], []).append(r)
    out = {}
    for m in ("luts", "ffs", "brams", "lutrams"):
        per_depth = []
        for d, rs in by_depth.items():
            xs, ys = [r["width"] for r in rs], [r[m] for r in rs]
            n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if n > 1 and sxx else 0.0
            per_depth.append((d, my + b * (width - mx)))
        out[m] = max(0.0, _interp(per_depth, depth, log=False))
    return out


def estimate(design, table: dict | None = None, target: str = "ecp5-85f", exclude_tiles=()) -> dict:
    """Estimated resources of a :class:`~step_hdl.mapper.design.Design` (its ``FabricTop``, ``counters=False``).

    Parameters
    ----------
    design : step_hdl.mapper.design.Design
        The mapped program's structure.
    table : dict, optional
        A cost table (default: the committed one).
    target : str
        The FPGA (for its DSP count).
    exclude_tiles : iterable of int
        Ignore the table's rows at these tiles (to test interpolation).

    Returns
    -------
    dict
        ``luts``, ``ffs``, ``dsps``, ``brams``, ``lutrams`` (rounded),
        ``soft_multipliers``, ``units``/``queues``: the per-item estimates, and
        ``not_estimated``: what the table has no entry for (tile pools).
    """
    from .tools import TARGETS
    table = table or load_table()
    fab = design.fabric
    totals = dict.fromkeys(("luts", "ffs", "dsps", "brams", "lutrams"), 0.0)
    per_unit, per_queue = {}, {}
    for u in design.units:
        params = u.params.to_json() if hasattr(u.params, "to_json") else dict(u.params)
        c = unit_cost(table, u.cls, params, fab.tile, fab.dtype, exclude_tiles)
        per_unit[u.name] = {k: round(v, 1) for k, v in c.items()}
        for k in totals:
            totals[k] += c[k]
    # units lose some logic to their neighbours in a flattened fabric (calibrated on a fabric: "context")
    ctx = table.get("context", {})
    for k in ("luts", "ffs"):
        totals[k] *= ctx.get(k, 1.0)
    for e in design.edges:
        c = queue_cost(table, e.width, e.depth)
        per_queue[e.label] = {k: round(v, 1) for k, v in c.items()}
        for k in c:
            totals[k] += c[k]
    glue = table.get("glue", {})
    for k in totals:
        totals[k] += glue.get(k, 0.0) * len(design.units)
    cap = TARGETS[target].dsps
    soft = 0
    if totals["dsps"] > cap:
        soft = round(totals["dsps"] - cap)
        per_mul = table["soft_mul_luts"].get(fab.dtype) or max(table["soft_mul_luts"].values())
        totals["luts"] += soft * per_mul
        totals["dsps"] = cap
    out = {k: round(v) for k, v in totals.items()}
    # the characterization measures no tile pool yet: say so rather than leave the estimate silently short
    # (and its pooled buffers are costed as the nearest private variant, SRAM included)
    not_estimated = [f"tile pool {p.name}: {p.params.pages} pages of {p.params.page_entries} x {p.params.width} bits "
                     f"and its crossbar to {p.params.clients} buffers (no cost-table entry)" for p in design.pools]
    out.update(soft_multipliers=soft, units=per_unit, queues=per_queue, not_estimated=not_estimated)
    return out
