"""The mapping flow: named, ordered lowering passes, each checked by the interpreter.

``lower(graph, fabric_or_tile, tensors=...)`` runs the passes in order. With
input tensors given, every pass's output graph is run by the reference
interpreter and must produce the same off-chip results as the graph before it
(bit-exact for integer types), so a broken pass is caught at the pass that
broke it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from step_hdl.errors import StepError
from step_hdl.graph import Graph
from step_hdl.interp import run

from .binding import Binding, bind
from .fabric import Fabric, fabric_for
from .tiling import tile_physical


class PassCheckError(StepError):
    """A lowering pass changed what the program computes."""


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph, Fabric], Graph]
    doc: str = ""


PASSES = [
    Pass("tile_physical", lambda g, f: tile_physical(g, f.tile),
         "logical tiles -> streams of physical tiles (mapper/tiling.py)"),
]


@dataclass
class Lowered:
    graph: Graph
    fabric: Fabric
    binding: Binding
    stages: list = field(default_factory=list)   # (pass name, graph) after each pass


def _compare(name, before, after, outputs):
    for t in outputs:
        a, b = before.memory[t], after.memory[t]
        same = np.array_equal(a, b) if a.dtype.kind in "iu" else np.allclose(a, b, rtol=1e-5, atol=1e-6)
        if not same:
            raise PassCheckError(f"pass {name!r} changed tensor {t!r}: the lowered graph computes a "
                                 f"different result")


def lower(graph: Graph, fabric: Fabric | int, tensors: dict | None = None, streams: dict | None = None,
          dtype: str = "int16", bindings: dict | None = None) -> Lowered:
    """Run the mapping flow; ``fabric`` may be a Fabric or a tile size (fabric sized to fit, with
    ``bindings`` for the dynamic sizes)."""
    tile = fabric.tile if isinstance(fabric, Fabric) else fabric
    probe = Fabric(tile=tile, dtype=dtype, units={}) if not isinstance(fabric, Fabric) else fabric
    stages = []
    reference = run(graph, tensors, streams) if tensors is not None else None
    outputs = graph.stored_tensors()
    g = graph
    for p in PASSES:
        g = p.run(g, probe)
        stages.append((p.name, g))
        if reference is not None:
            _compare(p.name, reference, run(g, tensors, streams), outputs)
    fab = fabric if isinstance(fabric, Fabric) else fabric_for(g, tile, dtype, bindings=bindings)
    return Lowered(g, fab, bind(g, fab), stages)
