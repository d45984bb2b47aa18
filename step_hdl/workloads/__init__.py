"""Reference workloads: parameterized builders returning a graph, inputs and a numpy reference."""

from .base import Workload
from .swiglu import swiglu, swiglu_graph, swiglu_offchip_bytes, swiglu_reference

__all__ = ["Workload", "swiglu", "swiglu_graph", "swiglu_offchip_bytes", "swiglu_reference"]
from .moe import moe, moe_graph, moe_reference  # noqa: E402
from .gqa import gqa_decode, gqa_graph, gqa_reference, scale_lengths  # noqa: E402
