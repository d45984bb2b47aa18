"""Reference workloads: parameterized builders returning a graph, inputs and a numpy reference.

Names are imported lazily (as in ``step_hdl``): the command line reads the
registry of workloads without importing sympy and the graph builders.
"""

from step_hdl.lazy import lazy_exports

_EXPORTS = {
    "base": ["Workload"],
    "gqa": ["gqa_decode", "gqa_graph", "gqa_reference", "scale_lengths"],
    "moe": ["moe", "moe_graph", "moe_reference"],
    "swiglu": ["swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference"],
}
__all__ = ["Workload", "swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference", "moe", "moe_graph",
           "moe_reference", "gqa_decode", "gqa_graph", "gqa_reference", "scale_lengths"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
