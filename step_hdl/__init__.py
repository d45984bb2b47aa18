"""step-hdl: Streaming Tensor Programs (STeP) to hardware.

The language lives here (types, operators, graph, interpreter, metrics,
workloads); hardware units, the mapper, simulation drivers and the FPGA flow
live in the subpackages ``step_hdl.units``, ``step_hdl.mapper``,
``step_hdl.sim`` and ``step_hdl.fpga``.
"""

from .errors import (StepDeadlockError, StepError, StepGraphError, StepRuntimeError, StepShapeError,
                     StepTypeError)
from .functions import Fn, fn
from .graph import Graph, TensorSpec
from .interp import RunResult, run
from .token import DONE, Token, data, decode, encode, stop
from .types import (DTYPES, BufferRef, Index, Ragged, Selector, StreamType, Tile, TupleType, dtype, dyn,
                    ragged)

__version__ = "0.1.0"

__all__ = [
    "StepError", "StepShapeError", "StepTypeError", "StepGraphError", "StepRuntimeError", "StepDeadlockError",
    "Fn", "fn", "Graph", "TensorSpec", "run", "RunResult", "Token", "DONE", "data", "stop", "encode", "decode",
    "DTYPES", "dtype", "Tile", "Index", "Selector", "BufferRef", "TupleType", "StreamType", "Ragged", "dyn",
    "ragged",
]
