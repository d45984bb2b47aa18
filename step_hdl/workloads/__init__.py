"""Reference workloads: parameterized builders returning a graph, inputs and a numpy reference.

Names are imported lazily (as in ``step_hdl``): the command line reads the
registry of workloads without importing sympy and the graph builders.
"""

from importlib import import_module

_EXPORTS = {
    "base": ["Workload"],
    "gqa": ["gqa_decode", "gqa_graph", "gqa_reference", "scale_lengths"],
    "moe": ["moe", "moe_graph", "moe_reference"],
    "swiglu": ["swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = ["Workload", "swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference", "moe", "moe_graph",
           "moe_reference", "gqa_decode", "gqa_graph", "gqa_reference", "scale_lengths"]


def __getattr__(name):
    if name in _WHERE:
        value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'step_hdl.workloads' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
