"""The flow, the top layer: the Python API that joins mapping, emission, simulation and the model, and the
command line, report and sweeps built on it. ``docs/flow.md`` is its guide.

    from step_hdl.flow import workload, prepare, run_rtl, model, build
    w = workload(graph, {"x": x, "w": w})      # the inputs; the reference is the interpreter's result
    prep = prepare(w, 4)                       # lower to 4x4 tiles, size a fabric, plan, lay out memory
    res = run_rtl(prep, "verilator", "paper")  # cycles, output tensors read back, checked, unit counters
    m = model(w, prep.design.fabric)           # the approximate model on the same fabric and DRAM preset
    build(prep, "out/")                        # Verilog, configuration image, standalone testbench

The package holds :mod:`.api` (those functions), :mod:`.cli` (the ``step-hdl`` command), :mod:`.report` (the
HTML page of a run), :mod:`.compare` (the model against measured RTL cycles), :mod:`.sweep`
(design-space sweeps) and :mod:`.functions_page` (``docs/functions.md``, generated from the function registry). Names are imported when first used, so the command line's parser stays cheap.
"""

from step_hdl.lazy import lazy_exports

#: the API's names (``api.__all__``; tests/test_flow_api.py checks they agree)
_EXPORTS = {"api": [
    "DEFAULT_SAMPLES", "DEFAULT_TILE", "DRAM_PRESETS", "Deadlock", "DramParams", "Fabric", "FabricError",
    "FitFabric", "InputError", "Lowered", "Metrics", "ModelResult", "Prepared", "RtlResult", "SimRun",
    "Workload", "build", "check_build_dir", "dram_params", "load_workload", "lower", "metrics", "model",
    "prepare", "run_rtl", "sample_every", "save_workload", "shared_fabric", "sim", "synthesize",
    "synthesize_unit", "target", "workload"
]}
__all__ = sorted(_EXPORTS["api"])
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
