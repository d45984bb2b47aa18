"""One self-contained HTML page per RTL run (``step-hdl report``, ``step-hdl sim --report PATH``).

The page shows where the time went: the fabric drawn unit by unit, coloured by
how busy each unit was; a per-unit timeline of activity and stalls from
counters the simulation harness itself samples every ``K`` cycles into a
memory (:class:`~step_hdl.mapper.top.FabricTop` ``samples``; no Python runs per
cycle); the approximate model's per-node timeline over the same bins; the
off-chip bandwidth over time against the DRAM's peak; the cycle bound and what
binds it; and the FPGA resource estimate. Plots are matplotlib SVG inlined in
the page, so it opens anywhere with no network and no script.

This is the top layer: it reads the flow's results (:mod:`step_hdl.flow.api`); nothing below imports it.

    from step_hdl.flow import DEFAULT_SAMPLES, sim
    from step_hdl.flow.report import collect, render, write
    run = sim(workload, 4, samples=DEFAULT_SAMPLES)     # the harness samples its counters
    write("run.html", render(collect(run)))
"""

from __future__ import annotations

import html
import io
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from step_hdl.errors import OutputError, StepError
from step_hdl.sim.model.dram import preset_name

from .api import model

#: the first line of every page this module writes: a file that starts otherwise is the user's, never
#: overwritten without ``force``
MARK = "<!-- step-hdl report -->"

@dataclass
class ReportData:
    """Everything a page shows, as plain data (``to_json`` is the ``--json`` output)."""

    title: str
    params: dict
    backend: str
    dram: str
    peak_bytes_per_cycle: float
    design: dict                   # Design.to_json(): units, edges, fabric
    rtl: dict                      # RtlResult.to_json(design, dram)
    timeline: dict                 # {"every", "times", "names", "rows"}: the harness's samples, cumulative
    model: dict | None = None      # ModelResult.to_dict() with "timeline": {"every", "busy": {node: [...]}}
    estimate: dict | None = None   # fpga.cost.estimate(design), or {"error": ...}
    wall_s: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"title": self.title, "params": self.params, "backend": self.backend, "dram": self.dram,
                "rtl": self.rtl, "timeline": self.timeline, "model": self.model, "estimate": self.estimate,
                "wall_s": self.wall_s}


def collect(run, title: str = "", params: dict | None = None) -> ReportData:
    """The page's data from ``run`` (a :class:`~step_hdl.flow.api.SimRun` whose harness sampled its counters,
    :func:`~step_hdl.flow.api.sim` with ``samples``): the model again with a timeline of the same bins, and the
    FPGA resource estimate."""
    if not run.rtl.timeline:
        raise ValueError("collect: the run was not sampled (step_hdl.flow.sim(..., samples=N))")
    prep, every = run.prepared, run.rtl.timeline["every"]
    wall = {}
    t0 = time.perf_counter()
    model_result = model(run.workload, dram=run.dram, timeline=every, lowered=prep.lowered)
    wall["model_s"] = round(time.perf_counter() - t0, 3)
    wall["rtl_s"] = round(run.rtl.wall_s, 3)
    wall["build_s"] = round(run.rtl.build_s, 3)
    try:
        from step_hdl.fpga.cost import estimate
        est = estimate(prep.design)
    except (StepError, KeyError, OSError) as exc:   # the page still shows the run and says why there is none
        est = {"error": f"{type(exc).__name__}: {exc}"}
    md = model_result.to_dict()
    md["timeline"] = model_result.timeline
    return ReportData(title or prep.design.name, params or {}, run.rtl.backend, preset_name(run.dram),
                      run.dram.peak_bytes_per_cycle, prep.design.to_json(), run.rtl.to_json(prep.design, run.dram),
                      run.rtl.timeline, md, est, wall)


# ----------------------------------------------------------------------------- the timeline's arithmetic

def intervals(timeline: dict) -> tuple[np.ndarray, dict]:
    """``(edges, deltas)`` of the sampled counters: interval ``k`` runs from cycle ``edges[k]`` to
    ``edges[k + 1]``; ``deltas[name][k]``: the counter's increase over it. The counters at the end of the
    run (``timeline["final"]``) close the last interval."""
    names = timeline["names"]
    rows = [[0] * len(names)] + [list(r) for r in timeline["rows"]]
    last = list(timeline["final"])
    if last != rows[-1]:
        rows.append(last)
    a = np.array(rows, dtype=np.int64)
    t = a[:, names.index("cycles")]
    keep = np.concatenate([[True], np.diff(t) > 0])      # a sample at the very end repeats the final row
    a, t = a[keep], t[keep]
    return t, {n: np.diff(a[:, k]) for k, n in enumerate(names)}


def model_bins(busy: list, every: int, n: int) -> np.ndarray:
    """A model node's busy cycles per bin, as fractions of the bin, padded or cut to ``n`` bins."""
    out = np.zeros(n)
    b = np.asarray(busy[:n], dtype=float)
    out[:len(b)] = b / every
    return out


# ----------------------------------------------------------------------------- drawing

def _svg(fig) -> str:
    import matplotlib.pyplot as plt
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})     # the same run, the same page
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]          # inline: without the XML prolog and DOCTYPE


def _figure(w, h):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(figsize=(w, h))


def _layers(units: list, edges: list) -> dict:
    """A layer per unit (longest path from a unit with no input; a cycle's back edges are ignored)."""
    succ = {u: [] for u in units}
    indeg = {u: 0 for u in units}
    for a, b in edges:
        if a in succ and b in succ and a != b:
            succ[a].append(b)
            indeg[b] += 1
    layer = {u: 0 for u in units}
    ready = [u for u in units if indeg[u] == 0]
    seen = set()
    while ready:
        u = ready.pop()
        seen.add(u)
        for v in succ[u]:
            layer[v] = max(layer[v], layer[u] + 1)
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    for u in units:                  # on a cycle: after what feeds it from outside
        if u not in seen:
            layer[u] = max([layer[a] + 1 for a, b in edges if b == u and a in seen] or [0])
    return layer


def draw_fabric(design: dict, active: dict) -> str:
    """The fabric's units in layers (data flows left to right), each coloured by its active fraction."""
    import matplotlib
    units = [u["name"] for u in design["units"]]
    kinds = {u["name"]: u["cls"] for u in design["units"]}
    edges = [(e["src"], e["dst"]) for e in design["edges"]]
    layer = _layers(units, edges)
    cols: dict = {}
    for u in units:
        cols.setdefault(layer[u], []).append(u)
    height = max(len(v) for v in cols.values())
    pos = {u: (lx, -(k - (len(col) - 1) / 2)) for lx, col in cols.items() for k, u in enumerate(col)}
    fig, ax = _figure(max(6, 1.9 * len(cols)), max(3, 0.55 * height + 1))
    for a, b in edges:
        if a in pos and b in pos:
            (x0, y0), (x1, y1) = pos[a], pos[b]
            ax.annotate("", (x1 - 0.32, y1), (x0 + 0.32, y0),
                        arrowprops=dict(arrowstyle="->", color="#888", lw=0.6, shrinkA=0, shrinkB=0))
    cmap = matplotlib.colormaps["YlGn"]
    small = len(units) > 60
    for u, (x, y) in pos.items():
        a = active.get(u, 0.0)
        ax.add_patch(_box(x, y, cmap(0.15 + 0.85 * a)))
        if not small:
            ax.text(x, y + 0.08, u if len(u) <= 18 else u[:17] + "…", ha="center", va="center", fontsize=6)
            ax.text(x, y - 0.16, f"{kinds[u]} {a:.0%}", ha="center", va="center", fontsize=5, color="#333")
    ax.set_xlim(-0.6, max(cols) + 0.6)
    ax.set_ylim(-(height / 2) - 0.6, height / 2 + 0.6)
    ax.axis("off")
    ax.set_title("the fabric: units in data-flow order, coloured by the fraction of cycles each moved a token",
                 fontsize=8)
    return _svg(fig)


def _box(x, y, colour):
    from matplotlib.patches import FancyBboxPatch
    return FancyBboxPatch((x - 0.32, y - 0.3), 0.64, 0.6, boxstyle="round,pad=0.02", fc=colour, ec="#555", lw=0.5)


def draw_timeline(names: list, matrix: np.ndarray, edges: np.ndarray, title: str, cmap: str) -> str:
    """A heatmap: one row per name, one column per interval (cycles ``edges[k]`` .. ``edges[k + 1]``)."""
    fig, ax = _figure(10, max(1.6, 0.16 * len(names) + 1.0))
    # rasterized: a cell per unit and interval as SVG paths would make the page megabytes
    im = ax.pcolormesh(edges, np.arange(len(names) + 1), matrix, cmap=cmap, vmin=0, vmax=1, shading="flat",
                       rasterized=True)
    ax.set_yticks(np.arange(len(names)) + 0.5)
    ax.set_yticklabels(names, fontsize=5 if len(names) > 40 else 6)
    ax.invert_yaxis()
    ax.set_xlabel("cycle", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01).ax.tick_params(labelsize=6)
    return _svg(fig)


def draw_bandwidth(edges: np.ndarray, nbytes: np.ndarray, peak: float) -> str:
    fig, ax = _figure(10, 2.4)
    rate = nbytes / np.maximum(1, np.diff(edges))
    ax.stairs(rate, edges, fill=True, alpha=0.5, color="#3a7bd5", label="RTL, bytes per cycle in each interval")
    ax.axhline(peak, color="#c0392b", lw=1, ls="--", label=f"the DRAM's peak ({peak:g} B/cycle)")
    total = nbytes.sum() / max(1, edges[-1] - edges[0])
    ax.axhline(total, color="#555", lw=0.8, ls=":", label=f"the run's mean ({total:.1f} B/cycle)")
    ax.set_xlabel("cycle", fontsize=7)
    ax.set_ylabel("B/cycle", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="upper right")
    ax.set_title("off-chip bandwidth over time (read and written bytes, from the harness's samples)", fontsize=8)
    return _svg(fig)


# ----------------------------------------------------------------------------- the page

_STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; } td, th { padding: 2px 10px; border-bottom: 1px solid #eee; }
th { text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #1e7b34; font-weight: bold; } .bad { color: #b3261e; font-weight: bold; }
.note { color: #555; font-size: 0.85em; } svg { max-width: 100%; height: auto; }
"""


def _row(*cells, head=False) -> str:
    tag = "th" if head else "td"
    out = []
    for c in cells:
        if isinstance(c, (int, float)) and not isinstance(c, bool):
            out.append(f'<td class="n">{c:,}</td>' if isinstance(c, int) else f'<td class="n">{c:,.3f}</td>')
        else:
            out.append(f"<{tag}>{html.escape(str(c))}</{tag}>")
    return "<tr>" + "".join(out) + "</tr>"


def render(data: ReportData) -> str:
    """The page (a string of HTML with every figure inline)."""
    rtl, design = data.rtl, data.design
    util = rtl.get("utilization", {})
    units = [u["name"] for u in design["units"]]
    edges, deltas = intervals(data.timeline)
    widths = np.maximum(1, np.diff(edges))
    active = np.array([deltas[f"{u}.active"] / widths for u in units]) if units else np.zeros((0, len(widths)))
    stalled = np.array([deltas[f"{u}.stalled"] / widths for u in units]) if units else np.zeros((0, len(widths)))
    nbytes = deltas["bytes_read"] + deltas["bytes_written"]
    m = data.model
    ok = rtl["outputs_match"]
    parts = [MARK, "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>step-hdl report: {html.escape(data.title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(data.title)}</h1>",
             '<p class="note">' + html.escape(", ".join(f"{k} {v}" for k, v in data.params.items())) + "</p>",
             "<h2>The run</h2><table>",
             _row("RTL cycles", rtl["cycles"]),
             _row("simulator", data.backend),
             "<tr><td>outputs</td><td>" + ('<span class="ok">match the interpreter bit for bit</span>' if ok else
                                          '<span class="bad">DIFFER: ' + html.escape(
                                              "; ".join(rtl["mismatches"].values()) or rtl["status"]) + "</span>")
             + "</td></tr>",
             _row("off-chip bytes", rtl["offchip_bytes"]),
             _row(f"bandwidth reached (of the '{data.dram}' preset's {data.peak_bytes_per_cycle:g} B/cycle)",
                  rtl.get("bandwidth_fraction", 0.0)),
             _row("units / FIFOs", f"{len(units)} / {len(design['edges'])} on "
                  f"{design['fabric']['tile']}x{design['fabric']['tile']} {design['fabric'].get('dtype', '')} tiles"
                  + (", pipelined" if design["fabric"].get("pipeline") else ""))]
    if m is not None:
        err = (m["cycles"] - rtl["cycles"]) / max(1, rtl["cycles"])
        parts.append(_row("approximate model", f"{m['cycles']:,} cycles ({100 * err:+.1f} % of the RTL's)"))
        b = m.get("bound")
        if b:
            frac = b["cycles"] / max(1, rtl["cycles"])
            port = f" ({b['busiest_port']})" if b.get("busiest_port") else ""
            parts.append(_row("cycle bound", f"{b['cycles']:,} cycles, {b['binding']}-bound: compute "
                              f"{b['compute']:,}, DRAM {b['dram']:,}, busiest memory port{port} {b['port']:,}; "
                              f"the run reached {frac:.2f} of it"))
    parts.append("</table>")
    parts.append("<h2>The fabric</h2>" + draw_fabric(design, {u: v["active"] for u, v in util.items()}))
    every = data.timeline["every"]
    cover = f"every {every:,} cycles ({len(widths)} intervals"
    if len(data.timeline["rows"]) >= data.timeline.get("capacity", 1 << 30):
        cover += f"; the harness's {data.timeline['capacity']} samples ended before the run did: the last " \
                 f"interval runs to the end"
    cover += ")"
    parts.append(f'<h2>Unit timeline</h2><p class="note">From counters the harness samples {cover}, no Python '
                 f"per cycle. Active: the fraction of the interval in which the unit moved a token on some port; "
                 f"stalled: it moved none while an output was blocked by a full FIFO.</p>")
    parts.append('<div id="timeline">' + draw_timeline(units, active, edges, "RTL: active fraction per unit",
                                                       "Greens") + "</div>")
    parts.append(draw_timeline(units, stalled, edges, "RTL: stalled fraction per unit", "Reds"))
    if m is not None and m.get("timeline"):
        tl = m["timeline"]
        names = list(tl["busy"])
        n = max(1, math.ceil(max(m["cycles"], 1) / tl["every"]))
        mat = np.array([model_bins(tl["busy"][k], tl["every"], n) for k in names]) if names else np.zeros((0, n))
        medges = np.arange(n + 1) * tl["every"]
        medges[-1] = max(medges[-2] + 1, m["cycles"]) if n else 1
        mat[:, -1] *= tl["every"] / max(1, medges[-1] - medges[-2])
        parts.append(f'<h2>Model timeline</h2><p class="note">The approximate model on the same fabric and DRAM '
                     f"preset, per node of the graph: the fraction of each {tl['every']:,}-cycle interval it spent "
                     f"computing ({m['cycles']:,} cycles in all, beside the RTL's {rtl['cycles']:,}).</p>")
        parts.append(draw_timeline(names, np.minimum(mat, 1.0), medges, "model: busy fraction per node", "Blues"))
    parts.append("<h2>Off-chip bandwidth</h2>" + draw_bandwidth(edges, nbytes, data.peak_bytes_per_cycle))
    parts.append("<h2>Where the time went</h2><table>" + _row("unit", "kind", "active", "stalled",
                                                               "last transfer at cycle", head=True))
    kinds = {u["name"]: u["cls"] for u in design["units"]}
    for u, v in sorted(util.items(), key=lambda kv: -kv[1]["active"]):
        parts.append(_row(u, kinds.get(u, ""), f"{v['active']:.1%}", f"{v['stalled']:.1%}", int(v["finish"])))
    parts.append("</table>")
    est = data.estimate or {}
    parts.append("<h2>FPGA estimate</h2>")
    if "error" in est:
        parts.append(f'<p class="note">No estimate: {html.escape(est["error"])}</p>')
    else:
        parts.append('<p class="note">From the ECP5 cost table (<code>docs/fpga-cost-table.md</code>): the '
                     "fabric without its testbench counters.</p><table>"
                     + "".join(_row(k, int(est[k])) for k in ("luts", "ffs", "dsps", "brams") if k in est)
                     + (_row("not estimated", ", ".join(map(str, est["not_estimated"])))
                        if est.get("not_estimated") else "") + "</table>")
    parts.append(f'<p class="note">step-hdl {_version()}; RTL run {data.wall_s.get("rtl_s", 0):.1f} s (build '
                 f'{data.wall_s.get("build_s", 0):.1f} s), model {data.wall_s.get("model_s", 0):.1f} s.</p>'
                 "</body></html>")
    return "\n".join(parts) + "\n"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("step-hdl")
    except PackageNotFoundError:
        return ""


def check_target(path, force: bool = False, option: str = "--report") -> None:
    """An :class:`OutputError` unless a page can go to ``path``: a file the command line's outputs may write
    (not a folder, in a writable folder that exists), and not an existing file other than a step-hdl report
    (unless ``force``). Called before the run."""
    from step_hdl.errors import check_writable
    check_writable(path, option)
    p = Path(path)
    if p.exists() and not force:
        with open(p, "rb") as f:
            head = f.read(len(MARK))
        if head != MARK.encode():
            raise OutputError(f"{option} {path}: the file exists and is not a step-hdl report; choose another "
                              f"name, or --force to replace it")


def write(path, text: str, force: bool = False, option: str = "--report") -> None:
    """Write the page to ``path`` (whole or not at all), after :func:`check_target`."""
    check_target(path, force, option)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(p)
