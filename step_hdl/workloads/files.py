"""A user's own program as a workload: a :class:`~step_hdl.graph.Graph` (or its JSON file, as
``step-hdl export`` writes it) with its inputs (or a ``.npz`` of them).

The ``.npz`` holds one array per input tensor under the tensor's name, the data
of source nodes under ``stream.<key>`` (``<key>`` is the source's ``data``
parameter, or its name) and, optionally, the expected outputs under
``expected.<tensor>``, and the values of dynamic dimensions to size on-chip
buffers for under ``binding.<symbol>`` (scalars). Without expected outputs the
reference is the interpreter's own result; without bindings, the sizes observed
in an interpreter run are used (a schedule that routes by timing, such as
dynamic parallelization, may send a region more in RTL than in that run: give
bindings then, as ``step-hdl export --inputs`` does for the built-in workloads).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..errors import InputError, StepError, read_text
from ..graph import Graph
from ..types import dtype as make_dtype
from .base import Workload

STREAM, EXPECTED, BINDING = "stream.", "expected.", "binding."


def from_graph(graph: Graph, tensors: dict, streams: dict | None = None, expected: dict | None = None,
               subs: dict | None = None, params: dict | None = None) -> Workload:
    """A workload from a graph and its inputs.

    ``expected`` (per stored tensor) defaults to the interpreter's result; ``subs``
    (values of the graph's dynamic dimensions, used to size on-chip buffers) to
    those observed in that run. Integer outputs are checked bit-exactly, floating
    point ones to a relative 1e-5.
    """
    from ..interp import check_inputs, run
    from ..metrics import observed_symbols
    graph.validate()
    inputs = graph.input_tensors()
    streams = dict(streams or {})
    check_inputs(graph, tensors, streams)
    stored = graph.stored_tensors()
    if expected is not None:
        unknown = sorted(set(expected) - set(stored))
        if unknown:
            raise InputError(f"expected output(s) {', '.join(map(repr, unknown))} are not stored by graph "
                             f"'{graph.name}' (it stores: {', '.join(stored) or 'nothing'})")
    need_run = expected is None or subs is None
    res = run(graph, tensors, streams) if need_run else None
    if expected is None:
        expected = {t: res.memory[t] for t in stored}
    if subs is None:
        subs = {str(k): int(v) for k, v in observed_symbols(graph, res).items()}
    # the workload's element type: floating point if any tensor is, else its first input's (the fabric's
    # default word), else its first output's
    types = [graph.tensors[t].dtype for t in inputs + stored] or [make_dtype("int32")]
    dt = next((t for t in (graph.tensors[n].dtype for n in graph.tensors) if not t.is_int), types[0])
    return Workload(graph, dict(tensors), streams, dict(expected), dt, subs, dict(params or {}))


def load_graph(graph_path) -> Graph:
    """Read a graph file (``Graph.dumps``'s JSON)."""
    text = read_text(graph_path, "graph file", InputError)
    try:
        return Graph.from_json(text)
    except StepError as exc:
        raise type(exc)(f"graph file {str(graph_path)!r}: {exc}") from None


def load(graph_path, inputs_path=None) -> Workload:
    """Read a graph file and its inputs (a ``.npz``, see the module docstring)."""
    graph = load_graph(graph_path)
    tensors, streams, expected, subs = {}, {}, None, None
    if inputs_path is not None:
        try:
            with np.load(inputs_path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise InputError(f"cannot read inputs {str(inputs_path)!r} (a .npz of named arrays): {exc}") from None
        for key, arr in arrays.items():
            if key.startswith(STREAM):
                streams[key[len(STREAM):]] = arr
            elif key.startswith(BINDING):
                if arr.shape != () or arr.dtype.kind not in "iu" or int(arr) < 0:
                    raise InputError(f"inputs {str(inputs_path)!r}: {key!r} must be a non-negative integer "
                                     f"scalar, got {arr.dtype} of shape {arr.shape}")
                subs = subs or {}
                subs[key[len(BINDING):]] = int(arr)
            elif key.startswith(EXPECTED):
                expected = expected or {}
                expected[key[len(EXPECTED):]] = arr
            elif key in graph.tensors:
                tensors[key] = arr
            else:
                raise InputError(f"inputs {str(inputs_path)!r}: array {key!r} is neither a tensor of graph "
                                 f"'{graph.name}' ({', '.join(sorted(graph.tensors))}) nor a '{STREAM}<key>' or "
                                 f"'{EXPECTED}<tensor>' entry")
    params = {"graph": str(graph_path), "inputs": None if inputs_path is None else str(inputs_path)}
    return from_graph(graph, tensors, streams, expected, subs, params=params)


def save_inputs(workload: Workload, path) -> None:
    """Write ``workload``'s inputs and expected outputs as the ``.npz`` :func:`load` reads."""
    arrays = {k: np.asarray(v) for k, v in workload.tensors.items()}
    for key, v in workload.streams.items():
        arr = np.asarray(v)
        if arr.dtype == object:
            raise InputError(f"stream data {key!r} is not an array (tokens); only array data can be saved")
        arrays[STREAM + key] = arr
    arrays.update({EXPECTED + k: np.asarray(v) for k, v in workload.expected.items()})
    arrays.update({BINDING + str(k): np.asarray(int(v)) for k, v in workload.subs.items()})
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def save(workload: Workload, graph_path, inputs_path=None) -> None:
    """Write the graph (JSON) and, if ``inputs_path`` is given, its inputs."""
    Path(graph_path).write_text(workload.graph.dumps())
    if inputs_path is not None:
        save_inputs(workload, inputs_path)
