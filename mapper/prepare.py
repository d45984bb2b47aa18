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

from .fabric import Fabric, fabric_for
from .design import Design, Program
from .plan import plan


@dataclass
class Prepared:
    """A program ready to simulate: design, configuration, memory image, expected outputs."""

    design: Design
    program: Program
    image: list                      # memory words
    outputs: dict                    # name -> (first word, words)
    expected: dict                   # name -> numpy array (reference interpreter)
    reference_bytes: int             # off-chip bytes the interpreter moved
    lowered: object = None

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


def _fmt(program: Program, name: str):
    return tile_format(program.tensors[name][3], *program.tiles[name])


def tensor_words(program: Program, name: str, arr) -> list[int]:
    """Memory words of tensor ``name`` holding ``arr``: its tiles in order, ``word_bytes // tile bytes`` per
    word (the first in the low bits), the last word padded with zeros."""
    fmt = _fmt(program, name)
    tiles = pack_tensor(arr, fmt)
    per = program.word_bytes * 8 // fmt.width
    return [sum(t << (fmt.width * j) for j, t in enumerate(tiles[i:i + per])) for i in range(0, len(tiles), per)]


def tensor_of_words(program: Program, name: str, words) -> np.ndarray:
    """Inverse of :func:`tensor_words`."""
    fmt = _fmt(program, name)
    rows, cols = program.tensors[name][1:3]
    per = program.word_bytes * 8 // fmt.width
    mask = (1 << fmt.width) - 1
    tiles = [int(w) >> (fmt.width * j) & mask for w in words for j in range(per)]
    return unpack_tensor(tiles, rows, cols, fmt)


def prepare(workload, fabric: Fabric | int = 4, name: str | None = None, check_passes: bool = False,
            dtype: str | None = None) -> Prepared:
    """Lower ``workload`` (a :class:`~step_hdl.workloads.base.Workload`) onto ``fabric`` (or a tile size)."""
    from step_hdl.interp import run as interp_run
    from .lower import lower
    dt = dtype or workload.dtype.name
    lo = lower(workload.graph, fabric, workload.tensors if check_passes else None, workload.streams, dtype=dt,
               bindings=workload.subs)
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
            arr = np.zeros((rows, cols), dtype=_fmt(program, tname).dtype.numpy)
        first = addr // program.word_bytes
        image += [0] * (first - len(image))
        words = tensor_words(program, tname, arr)
        image += words
        if tname in stores:
            outputs[tname] = (first, len(words))
    return Prepared(design, program, image, outputs, {t: ref.memory[t] for t in outputs}, ref.offchip_bytes, lo)


def shared_fabric(workloads, tile: int, dtype: str | None = None, **overrides) -> Fabric:
    """One fabric that fits every workload's lowered graph: a sweep then needs one build.

    The lowered graphs must have the same structure (they do for a tile-size
    sweep of one schedule); :func:`prepare` with this fabric raises otherwise.
    """
    from .fabric import merge
    from .tiling import tile_physical
    fabs = []
    for w in workloads:
        dt = dtype or w.dtype.name
        fabs.append(fabric_for(tile_physical(w.graph, tile), tile, dt, bindings=w.subs, **overrides))
    return merge(fabs)
