"""The STeP operators: shape and type inference, token-level behaviour, costs.

Each operator class checks its inputs when the node is built (so a malformed
program fails at construction with a message naming the node and port), infers
its output stream types symbolically, runs as a process in the reference
interpreter (:mod:`step_hdl.interp`), and states its off-chip traffic, on-chip
memory and FLOPs for :mod:`step_hdl.metrics` (spec section 4).

Port names: single-input operators read ``in``; variadic ones (Map, Zip,
Reassemble, EagerMerge) read ``in0``, ``in1``, ...; named roles are ``ref``,
``sel``, ``addr``, ``data``. Outputs are ``out`` (or ``out0``, ``out1``, ...),
plus ``sel`` for EagerMerge and ``pad`` for a padding Reshape.
"""

from .base import OPS, Buffer, Op, StreamRef, register
from .sources import SelectorSource, IndexSource, StreamSource, Output, Feedback, Broadcast
from .memory import (LinearOffChipLoad, LinearOffChipStore, RandomOffChipLoad, RandomOffChipStore, Bufferize,
                     Streamify)
from .routing import Partition, Reassemble, EagerMerge
from .compute import Map, Accum, Scan, FlatMap
from .shape import Flatten, Reshape, Promote, Expand, RepeatStatic, Zip

__all__ = sorted(OPS) + ["OPS", "Buffer", "Op", "StreamRef", "register"]
