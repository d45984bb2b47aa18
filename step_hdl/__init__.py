"""step-hdl: Streaming Tensor Programs (STeP) to hardware.

The language lives here (types, operators, graph, interpreter, metrics,
workloads); the flow that joins everything (the Python API, the command line,
the report, the sweeps) in ``step_hdl.flow``; hardware units, the mapper, the
simulations and the FPGA flow in ``step_hdl.units``, ``step_hdl.mapper``,
``step_hdl.sim`` and ``step_hdl.fpga`` (``docs/architecture.md``).

Names are imported lazily: ``import step_hdl.sim.cocotb_streams`` inside a
simulator must not pull in sympy, whose import takes over ten seconds in
cocotb's embedded Python.
"""

from .lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "errors": ["StepError", "StepShapeError", "StepTypeError", "StepGraphError", "StepRuntimeError",
               "StepDeadlockError"],
    "functions": ["Fn", "fn"],
    "graph": ["Graph", "TensorSpec"],
    "interp": ["run", "RunResult"],
    "token": ["Token", "DONE", "data", "stop", "encode", "decode"],
    "types": ["DTYPES", "dtype", "Tile", "Index", "Selector", "BufferRef", "TupleType", "StreamType", "Ragged",
              "dyn", "ragged"],
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
