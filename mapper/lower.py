"""The mapping flow: named, ordered lowering passes, each checked by the interpreter.

``lower(graph, fabric, tensors=...)`` runs the passes in order, on a given
:class:`~step_hdl.mapper.fabric.Fabric` or on one sized to fit
(:class:`~step_hdl.mapper.sizing.FitFabric`). With input tensors given, every
pass's output graph is run by the reference interpreter and must produce the
same off-chip results as the graph before it (bit-exact for integer types), so
a broken pass is caught at the pass that broke it.

The :class:`Lowered` program is what everything after the mapper reads: the plan
builds it, the approximate model times it (its FIFO depths, :meth:`Lowered.depths`,
and off-chip layout, :meth:`Lowered.layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from step_hdl.errors import StepError
from step_hdl.graph import Graph
from step_hdl.interp import run

from .binding import Binding, bind
from .fabric import Fabric
from .fifo import edge_fifos
from .plan import offchip_layout
from .sizing import FitFabric
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
    """A graph lowered onto a fabric: the lowered ``graph`` (``graph.origin``: each node's node of ``source``),
    the ``fabric`` it fits and the ``binding`` of its nodes to units; ``bindings``: the dynamic sizes'
    values; ``stages``: ``(pass name, graph)`` after each pass."""

    graph: Graph
    fabric: Fabric
    binding: Binding
    stages: list = field(default_factory=list)
    source: Graph | None = None
    bindings: dict = field(default_factory=dict)

    def fifos(self, bindings: dict | None = None) -> dict:
        """Every edge's FIFO as the plan builds it, ``(depth built, safe depth)`` keyed ``producer.port``
        (:func:`~step_hdl.mapper.fifo.edge_fifos` on the lowered graph, ``bindings`` beside its own): the
        source graph's edges keep their labels, so the model reads its FIFOs here."""
        return edge_fifos(self.graph, self.fabric.fifo_depth, self.fabric.max_fifo_depth,
                          {**self.bindings, **(bindings or {})}, self.fabric.chunk_fifo_depth)

    def depths(self, bindings: dict | None = None) -> dict:
        """The depth of every edge's FIFO (keyed ``producer.port``), as the plan builds it (:meth:`fifos`)."""
        return {label: built for label, (built, _) in self.fifos(bindings).items()}

    def layout(self, bindings: dict | None = None) -> dict | None:
        """Tensor name -> byte address where the program lays the tensor out off chip
        (:func:`~step_hdl.mapper.plan.offchip_layout`, ``bindings`` beside its own), or None for a program no
        off-chip unit touches; a :class:`~step_hdl.mapper.fabric.FabricError` where it cannot be laid out."""
        return offchip_layout(self.graph, self.fabric.tile, {**self.bindings, **(bindings or {})})


def _compare(name, before, after, outputs):
    for t in outputs:
        a, b = before.memory[t], after.memory[t]
        same = np.array_equal(a, b) if a.dtype.kind in "iu" else np.allclose(a, b, rtol=1e-5, atol=1e-6)
        if not same:
            raise PassCheckError(f"pass {name!r} changed tensor {t!r}: the lowered graph computes a "
                                 f"different result")


def run_passes(graph: Graph, tile: int, dtype: str = "int16", tensors: dict | None = None,
               streams: dict | None = None) -> list:
    """``(pass name, graph)`` after each pass of :data:`PASSES` on ``tile x tile`` physical tiles; with
    ``tensors`` (and ``streams``) every pass's graph is run by the interpreter and must give the same outputs."""
    probe = Fabric(tile=tile, dtype=dtype)
    stages = []
    reference = run(graph, tensors, streams) if tensors is not None else None
    outputs = graph.stored_tensors()
    g = graph
    for p in PASSES:
        g = p.run(g, probe)
        stages.append((p.name, g))
        if reference is not None:
            _compare(p.name, reference, run(g, tensors, streams), outputs)
    return stages


def lower(graph: Graph, fabric: Fabric | FitFabric, tensors: dict | None = None, streams: dict | None = None,
          dtype: str = "int16", bindings: dict | None = None) -> Lowered:
    """Run the mapping flow onto ``fabric``: a :class:`Fabric` the graph must fit, or a :class:`FitFabric` (a
    fabric sized to fit, with ``dtype`` unless it names one, and ``bindings`` for the dynamic sizes). With
    ``tensors`` (and ``streams``) every pass is checked by the interpreter."""
    if not isinstance(fabric, (Fabric, FitFabric)):
        raise TypeError(f"lower: fabric must be a Fabric or a FitFabric, got {fabric!r}")
    dt = fabric.dtype if isinstance(fabric, Fabric) else fabric.dtype or dtype
    stages = run_passes(graph, fabric.tile, dt, tensors, streams)
    g = stages[-1][1]
    fab = fabric if isinstance(fabric, Fabric) else fabric.size(g, dtype, bindings)
    return Lowered(g, fab, bind(g, fab), stages, graph, dict(bindings or {}))
