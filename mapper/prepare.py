"""A program ready to run: the lowered graph planned onto a fabric, its off-chip image laid out, and the
reference interpreter's outputs to check it against.

:func:`prepare` is the mapping half of the flow (``step_hdl.flow`` joins it to
emission and simulation); :func:`tensor_words` and :func:`tensor_of_words`
convert a tensor to and from the memory words of the program's layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from step_hdl.units.layout import tile_format
from step_hdl.units.memport import pack_tensor, unpack_tensor

from .design import Design, Program
from .fabric import Fabric
from .lower import Lowered, lower, run_passes
from .plan import plan
from .sizing import FitFabric


@dataclass
class Prepared:
    """A program ready to simulate: design, configuration, memory image, expected outputs."""

    design: Design
    program: Program
    image: list                      # memory words
    outputs: dict                    # name -> (first word, words)
    expected: dict                   # name -> numpy array (reference interpreter)
    reference_bytes: int             # off-chip bytes the interpreter moved
    lowered: Lowered | None = None   # the lowering the plan came from (the model times the same)

    def depth(self) -> int:
        return 1 << max(4, (len(self.image) - 1).bit_length())

    def job(self, max_cycles: int = 100_000_000, with_expected: bool = False) -> dict:
        job = {"image": [format(w, "x") for w in self.image], "config": list(self.program.config),
               "counters": self.design.counter_names(), "outputs": {k: list(v) for k, v in self.outputs.items()},
               "max_cycles": max_cycles}
        if with_expected:
            job["expected"] = {k: [format(w, "x") for w in self.expected_words(k)] for k in self.outputs}
        return job

    def expected_words(self, name) -> list[int]:
        return tensor_words(self.program, name, self.expected[name])


def token_format(program: Program, name: str):
    """The token format of tensor ``name``'s physical tiles in ``program``."""
    return tile_format(program.tensors[name][3], *program.tiles[name])


def tensor_words(program: Program, name: str, arr) -> list[int]:
    """Memory words of tensor ``name`` holding ``arr``: its tiles in order, ``word_bytes // tile bytes`` per
    word (the first in the low bits), the last word padded with zeros."""
    fmt = token_format(program, name)
    tiles = pack_tensor(arr, fmt)
    per = program.word_bytes * 8 // fmt.width
    return [sum(t << (fmt.width * j) for j, t in enumerate(tiles[i:i + per])) for i in range(0, len(tiles), per)]


def tensor_of_words(program: Program, name: str, words) -> np.ndarray:
    """Inverse of :func:`tensor_words`."""
    fmt = token_format(program, name)
    rows, cols = program.tensors[name][1:3]
    per = program.word_bytes * 8 // fmt.width
    mask = (1 << fmt.width) - 1
    tiles = [int(w) >> (fmt.width * j) & mask for w in words for j in range(per)]
    return unpack_tensor(tiles, rows, cols, fmt)


def lowered_for(workload, fabric: Fabric | FitFabric, check_passes: bool = False) -> Lowered:
    """``workload``'s graph lowered onto ``fabric`` (a :class:`Fabric`, or a :class:`FitFabric` sized to fit
    with the workload's element type and dynamic sizes); with ``check_passes`` the interpreter checks every
    pass."""
    return lower(workload.graph, fabric, workload.tensors if check_passes else None, workload.streams,
                 dtype=workload.dtype.name, bindings=workload.subs)


def prepare(workload, fabric: Fabric | FitFabric | Lowered, name: str | None = None,
            check_passes: bool = False) -> Prepared:
    """Lower ``workload`` (a :class:`~step_hdl.workloads.base.Workload`) onto ``fabric`` (or take its lowering,
    a :class:`Lowered` of its graph), plan it, lay out its memory image and run the interpreter for the
    outputs to check."""
    from step_hdl.interp import run as interp_run
    lo = fabric if isinstance(fabric, Lowered) else lowered_for(workload, fabric, check_passes)
    fab = lo.fabric
    ref = interp_run(workload.graph, workload.tensors, workload.streams)
    # selector sources: this program's masks (configuration data), as the interpreter produced them
    sources = {n.name: [t.payload for t in ref.edges[f"{n.name}.out"] if t.is_data]
               for n in lo.graph.nodes.values() if n.kind == "SelectorSource"}
    design, program = plan(lo.graph, fab, name or workload.graph.name, bindings=workload.subs, sources=sources)
    stores = workload.graph.stored_tensors()
    image, outputs = [], {}
    for tname, (addr, rows, cols, tdt) in program.tensors.items():
        arr = workload.tensors.get(tname)
        if arr is None:
            arr = np.zeros((rows, cols), dtype=token_format(program, tname).dtype.numpy)
        first = addr // program.word_bytes
        image += [0] * (first - len(image))
        words = tensor_words(program, tname, arr)
        image += words
        if tname in stores:
            outputs[tname] = (first, len(words))
    return Prepared(design, program, image, outputs, {t: ref.memory[t] for t in outputs}, ref.offchip_bytes, lo)


def shared_fabric(workloads, fabric: FitFabric) -> Fabric:
    """One fabric that fits every workload's lowered graph (each sized by ``fabric``, then merged,
    :meth:`Fabric.merge`): a sweep then needs one build.

    The lowered graphs must have the same structure (they do for a tile-size
    sweep of one schedule); :func:`prepare` with this fabric raises otherwise.
    """
    return Fabric.merge(fabric.size(run_passes(w.graph, fabric.tile, fabric.dtype or w.dtype.name)[-1][1],
                                    w.dtype.name, w.subs) for w in workloads)
