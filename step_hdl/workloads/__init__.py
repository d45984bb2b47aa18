"""Reference workloads: parameterized builders returning a graph, inputs and a numpy reference."""

from .base import Workload
from .gqa import gqa_decode, gqa_graph, gqa_reference, scale_lengths
from .moe import moe, moe_graph, moe_reference
from .swiglu import swiglu, swiglu_graph, swiglu_offchip_bytes, swiglu_reference

__all__ = ["Workload", "swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference", "moe", "moe_graph",
           "moe_reference", "gqa_decode", "gqa_graph", "gqa_reference", "scale_lengths"]
