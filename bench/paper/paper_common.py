"""Shared pieces of the paper studies (``bench/paper/*.py``).

* :func:`measure` runs one graph on the approximate model (timing-only) and
  returns a :class:`Point`: cycles, off-chip traffic, bandwidth and compute
  utilization, allocated matmul compute, wall time and per-node statistics
  summarized by role. It is the one place a study touches the model, so an RTL
  back end (issue 6, item 4: reduced-size configurations through
  ``sim.fabric``) can be added as a second ``measure`` with the same result.
* :func:`onchip_bytes` / :func:`offchip_bytes`: the symbolic metrics of a
  graph substituted with concrete sizes (e.g. per-expert token counts).
* :func:`cli` (the options every study takes) and :func:`study_main` (the
  flow every script follows: ``--dot`` draws small instances, otherwise check
  the traces — a clear message and exit status 0 when they are absent — run,
  print the table, plot, write the JSON);
* :func:`geomean`, :func:`table`, :func:`progress` (stderr), :func:`write_json`,
  :func:`figure` / :func:`save` (matplotlib on Agg).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "out"

#: physical tile of the fabric the model times (16 x 16, as bench/model_scale.py and the paper sweep)
PHYS_TILE = 16
#: the DRAM preset the studies time with: the paper's dynamic studies' memory (32 channels of 64 B every 2
#: cycles, 1,024 B/cycle; ``sim.dram_timing.DRAM_PRESETS``); every script's ``--dram`` sets it
DRAM = "paper-studies"


@dataclass
class Point:
    """One model run."""

    cycles: int
    offchip_bytes: int
    bandwidth_utilization: float
    compute_utilization: float          # executed matmul FLOPs / (cycles x allocated FLOPs per cycle)
    matmul_units: int
    allocated_flops_per_cycle: int      # matmul units x 2 P^3
    matmul_flops: int
    wall_s: float                       # the model run alone (graph build and metrics not included)
    roles: dict = field(default_factory=dict)   # role -> summed busy / stalled / idle cycles and node count
    nodes: dict = field(default_factory=dict)   # name -> busy / stalled / idle / finish of the nodes asked for

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bandwidth_utilization"] = round(d["bandwidth_utilization"], 4)
        d["compute_utilization"] = round(d["compute_utilization"], 6)
        d["wall_s"] = round(d["wall_s"], 2)
        return d


#: the full-size study fabrics build every reconvergent FIFO as deep as its stream (its safe bound,
#: ``mapper.fifo.fifo_depths``): at batch 1024 the routing selector's fan-out holds thousands of tokens,
#: and the default cap of 64 (``Fabric.max_fifo_depth``, what the reduced-size RTL confirmations build)
#: deadlocks there in the model as it would in RTL. A selector FIFO of a few thousand entries of a few bits
#: is cheap; the study pages say so.
STUDY_MAX_FIFO_DEPTH = 1 << 30


def measure(graph, dtype: str, tensors=None, streams=None, role_of=None, keep=(), tile: int = PHYS_TILE,
            dram=None, bindings=None) -> Point:
    """Run ``graph`` on the approximate model in timing-only mode, on a fabric of ``tile x tile`` physical tiles
    sized to fit it (its reconvergent FIFOs as deep as their streams, :data:`STUDY_MAX_FIFO_DEPTH`).

    ``bindings``: the values of its dynamic sizes (what the mapper sizes the buffers for).
    ``role_of(node_name) -> str | None`` groups nodes for the per-node
    statistics (summed busy, stalled = output FIFO full, idle = input empty);
    nodes mapped to ``None`` are left out. The nodes named in ``keep`` are also
    reported one by one (with their finish cycle). ``dram``: a preset name or
    ``DramParams`` (default: the study's, :data:`DRAM`).
    """
    from step_hdl.flow import FitFabric, Workload, model
    from step_hdl.types import dtype as make_dtype
    w = Workload(graph, tensors or {}, streams or {}, {}, make_dtype(dtype), subs=dict(bindings or {}))
    t0 = time.perf_counter()
    res = model(w, FitFabric(tile, dtype, {"max_fifo_depth": STUDY_MAX_FIFO_DEPTH}), dram or DRAM)
    wall = time.perf_counter() - t0
    units = sum(1 for n in graph.nodes.values() if n.kind == "Map" and n.p("fn").name == "matmul")
    roles: dict = {}
    if role_of is not None:
        for name, s in res.nodes.items():
            role = role_of(name)
            if role is None:
                continue
            r = roles.setdefault(role, {"nodes": 0, "busy": 0, "stalled": 0, "idle": 0})
            r["nodes"] += 1
            for k in ("busy", "stalled", "idle"):
                r[k] += s[k]
    nodes = {name: {k: v for k, v in res.nodes[name].items() if k != "kind"} for name in keep}
    return Point(res.cycles, res.offchip_bytes, res.bandwidth_utilization, res.compute_utilization, units,
                 units * 2 * tile ** 3, res.matmul_flops, wall, roles, nodes)


def role_fractions(point: Point) -> dict:
    """Per role: busy / stalled / idle as fractions of (nodes x cycles)."""
    out = {}
    for role, r in point.roles.items():
        denom = r["nodes"] * point.cycles or 1
        out[role] = {k: round(r[k] / denom, 4) for k in ("busy", "stalled", "idle")}
    return out


def _metric(graph, subs: dict, which: str) -> int:
    """Sum of the nodes' ``which`` expressions (``step_hdl.metrics``) with ``subs`` put in.

    The same number as ``metrics(graph).subs(subs).<which>``, without sympy's
    simplification of a thousand-term symbolic sum (a 128-expert MoE layer).
    """
    import sympy

    from step_hdl.metrics import metrics
    total = 0
    for n in metrics(graph).nodes:
        expr = sympy.sympify(getattr(n, which))
        value = expr.xreplace({s: subs[s.name] for s in expr.free_symbols if s.name in subs})
        if not value.is_number:
            raise ValueError(f"{graph.name}: {which} of node {n.name} still symbolic after substitution: {value}")
        total += value
    return int(total)


def onchip_bytes(graph, subs: dict) -> int:
    """Symbolic on-chip memory requirement (spec section 4) with ``subs`` substituted."""
    return _metric(graph, subs, "onchip_bytes")


def offchip_bytes(graph, subs: dict) -> int:
    """Symbolic off-chip traffic with ``subs`` substituted."""
    return _metric(graph, subs, "offchip_bytes")


def geomean(values) -> float:
    values = [float(v) for v in values]
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


_T0 = time.perf_counter()


def progress(msg: str) -> None:
    """One progress line on stderr, with the time since the script started."""
    print(f"[{time.perf_counter() - _T0:7.1f} s] {msg}", file=sys.stderr, flush=True)


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Fixed-width text table; ``columns`` are (key, header, format spec)."""
    cells = [[format(r[k], f) if r.get(k) is not None else "-" for k, _, f in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (_, h, _), w in zip(columns, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def write_json(path, obj) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)


def figure(*args, **kwargs):
    """``matplotlib.pyplot.subplots`` on the Agg back end."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt.subplots(*args, **kwargs)


def save(fig, path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)


def cli(name: str, doc: str) -> argparse.ArgumentParser:
    """The options every study takes: ``--json``, ``--plot``, ``--quick``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH", help="write the results (points and summary) as JSON")
    ap.add_argument("--plot", metavar="PATH", default=str(OUT_DIR / f"{name}.png"),
                    help="PNG figure (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="a smoke run on a few points")
    from step_hdl.sim.model.dram import DRAM_PRESETS
    ap.add_argument("--dram", default=DRAM, choices=tuple(DRAM_PRESETS),
                    help="DRAM preset (default: %(default)s, the paper's dynamic studies: 1,024 B/cycle)")
    ap.add_argument("--workers", type=int, default=None,
                    help="points evaluated at once, one process each (default: one per core)")
    ap.add_argument("--no-cache", action="store_true",
                    help="compute every point (default: points whose model code, trace and script are unchanged "
                         "come from the sweep cache, ~/.cache/step-hdl/sweep)")
    ap.add_argument("--dot", metavar="DIR", help="only write the Graphviz DOT of small instances of the study's "
                    "graphs to DIR (render: dot -Tsvg FILE.dot -o FILE.svg)")
    return ap


def write_dots(directory, name: str, graphs: dict) -> None:
    """``graphs``: variant -> Graph; writes ``DIR/study-<name>-<variant>.dot``."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    for variant, g in graphs.items():
        path = Path(directory) / f"study-{name.replace('_', '-')}-{variant}.dot"
        path.write_text(g.to_dot())
        print(f"wrote {path} ({len(g.nodes)} nodes)")


def study_main(args, name: str, small_graphs, check_traces, run_study, report, plot) -> int:
    """The flow of every study script: ``--dot`` only draws; else check the traces, run, print, plot, write."""
    if args.dot:
        write_dots(args.dot, name, small_graphs())
        return 0
    traces_or_exit(check_traces)
    global DRAM, WORKERS, CACHE
    DRAM = getattr(args, "dram", DRAM)
    WORKERS = getattr(args, "workers", None)
    CACHE = not getattr(args, "no_cache", False)
    from step_hdl.errors import StepError
    try:
        res = run_study()
    except StepError as exc:      # a program the mapper (and so the model) refuses: said in one line
        print(f"{name}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    res["dram"] = DRAM
    print(report(res))
    plot(res, args.plot)
    print(f"plot: {args.plot}")
    if args.json:
        write_json(args.json, res)
    return 0


#: the study's process pool (``--workers``; None: one per core) and whether points come from the sweep cache
WORKERS = None
CACHE = True


def run_points(fn, calls: list, label, files_of=lambda call: ()) -> list:
    """``[fn(**c) for c in calls]`` on a process pool of :data:`WORKERS`, each from the sweep cache
    (``step_hdl.flow.sweep.tasks``) when the model's code, this folder's scripts and ``files_of(call)`` (the
    call's own trace) are unchanged; one progress line per point."""
    from step_hdl.flow.sweep.tasks import run_tasks
    here = Path(__file__).resolve().parent
    scripts = sorted(here.glob("*.py"))
    return run_tasks(fn, calls, "process", WORKERS, CACHE, lambda c: [*scripts, *files_of(c)], label=label,
                     progress=progress)


def traces_or_exit(check) -> None:
    """Call ``check()`` (which reads a trace); when the traces are absent, say so and exit with status 0."""
    from step_hdl.workloads.traces import TraceNotFound
    try:
        check()
    except TraceNotFound as exc:
        print(f"skipped: {exc}", file=sys.stderr)
        sys.exit(0)
