"""Reference interpreter: runs a STeP graph at token level on numpy data.

Every node is a process (a Python generator) and every edge an unbounded
channel that records the tokens it carried, so the token sequence of any edge
can later be compared with what the RTL produced. Processes run round-robin,
each until it blocks or writes a token, which interleaves producers roughly the
way concurrent hardware does. That order is deterministic; ``seed`` shuffles
the process order every round and lets EagerMerge pick at random among ready
inputs, to explore other legal arrival orders.

Off-chip memory is a dictionary of 2-D numpy arrays (one per declared tensor);
loads and stores count the bytes they move per node.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError, StepDeadlockError, StepRuntimeError, where
from .functions import cast
from .graph import Graph
from .process import Channel, Ports
from .types import dyn


class Memory:
    """Off-chip memory: named 2-D tensors, with per-node byte counters."""

    def __init__(self, graph: Graph, tensors: dict[str, np.ndarray]):
        self.arrays: dict[str, np.ndarray] = {}
        self.bytes_read: dict[str, int] = {}
        self.bytes_written: dict[str, int] = {}
        for name, spec in graph.tensors.items():
            if name in tensors:
                arr = np.asarray(tensors[name])
                if arr.ndim != 2:
                    raise StepRuntimeError(f"off-chip tensor '{name}': expected a 2-D array, got shape {arr.shape}")
                if arr.dtype != spec.dtype.numpy:
                    raise StepRuntimeError(f"off-chip tensor '{name}': expected {spec.dtype} "
                                           f"({spec.dtype.numpy}), got {arr.dtype}")
                # a bf16 tensor holds bf16 values: float32 data is rounded as a store of it would be
                self.arrays[name] = cast(arr, spec.dtype) if spec.dtype.name == "bf16" else arr.copy()
        self.graph = graph

    def allocate(self, bindings: dict) -> None:
        """Create zero-filled arrays for declared tensors not given (outputs)."""
        for name, spec in self.graph.tensors.items():
            if name not in self.arrays:
                try:
                    shape = (int(spec.rows.subs(bindings)), int(spec.cols.subs(bindings)))
                except TypeError:
                    raise StepRuntimeError(f"off-chip tensor '{name}' has symbolic shape "
                                           f"[{spec.rows}, {spec.cols}]; pass its sizes in bindings") from None
                self.arrays[name] = np.zeros(shape, dtype=spec.dtype.numpy)

    def array(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def _slot(self, node, arr, index, tr, tc):
        gr, gc = arr.shape[0] // tr, arr.shape[1] // tc
        if not 0 <= index < gr * gc:
            raise StepRuntimeError(f"{where(node.kind, node.name)}: tile index {index} outside tensor "
                                   f"'{node.p('tensor')}' ({gr} x {gc} tiles of [{tr}, {tc}])")
        r, c = divmod(index, gc)
        return slice(r * tr, (r + 1) * tr), slice(c * tc, (c + 1) * tc)

    def read_tile(self, node, arr, index, tr, tc) -> np.ndarray:
        rs, cs = self._slot(node, arr, index, tr, tc)
        tile = arr[rs, cs].copy()
        self.bytes_read[node.name] = self.bytes_read.get(node.name, 0) + tile.nbytes * _bf16_scale(node)
        return tile

    def write_tile(self, node, arr, index, tr, tc, tile) -> None:
        rs, cs = self._slot(node, arr, index, tr, tc)
        if tile.shape != (tr, tc):
            raise StepRuntimeError(f"{where(node.kind, node.name)}: tile of shape {tile.shape} written to a "
                                   f"[{tr}, {tc}] slot")
        arr[rs, cs] = tile
        self.bytes_written[node.name] = self.bytes_written.get(node.name, 0) + tile.nbytes * _bf16_scale(node)


def _bf16_scale(node):
    # bf16 tiles are held in float32 arrays: count 2 bytes per element, not 4.
    spec = node.graph.tensors[node.p("tensor")]
    return 0.5 if spec.dtype.name == "bf16" else 1


@dataclass
class Context:
    memory: Memory
    streams: dict
    bindings: dict
    rng: random.Random | None
    outputs: dict = field(default_factory=dict)
    buffers: int = 0


@dataclass
class RunResult:
    """What an interpreter run produced.

    Attributes
    ----------
    memory : dict of str to numpy.ndarray
        Every off-chip tensor after the run (stores applied).
    outputs : dict of str to list of Token
        Tokens that reached each ``Output`` node.
    edges : dict of str to list of Token
        Token sequence of every edge, keyed ``"producer.port"``.
    bytes_read, bytes_written : dict of str to int
        Off-chip bytes moved per node.
    steps : int
        Process activations (a measure of interpreter work).
    """

    memory: dict
    outputs: dict
    edges: dict
    bytes_read: dict
    bytes_written: dict
    steps: int

    @property
    def offchip_bytes(self) -> int:
        return int(sum(self.bytes_read.values()) + sum(self.bytes_written.values()))


def run(graph: Graph, tensors: dict | None = None, streams: dict | None = None, bindings: dict | None = None,
        seed: int | None = None, record: bool = True, max_steps: int = 50_000_000,
        max_idle_steps: int = 1_000_000) -> RunResult:
    """Run ``graph`` on numpy data.

    Parameters
    ----------
    graph : Graph
        The program; it is validated first.
    tensors : dict
        Initial contents of off-chip tensors (2-D arrays of the declared type): every tensor the graph reads
        and does not write (an :class:`~step_hdl.errors.InputError` names one not given); the others start
        as zeros (their symbolic sizes must be bound).
    streams : dict
        Data of source nodes that read from ``data=`` keys (routing tables, lengths).
    bindings : dict
        Values of dimension symbols (names or sympy symbols), e.g. ``{"B": 64}``.
        Sizes of given tensors bind their symbols automatically.
    seed : int, optional
        ``None`` for the deterministic schedule; an integer for a shuffled one.
    record : bool
        Keep every edge's tokens in ``result.edges``.
    max_steps : int
        Stop (a :class:`StepRuntimeError` naming the nodes that kept running) after this many steps.
    max_idle_steps : int
        Stop when this many steps in a row made no progress: only nodes on a cycle ran, none of them
        touching memory, and no node finished (tokens going round a feedback loop forever). The error
        names the nodes that ran. A long loop of pure computation may need more.
    """
    graph.validate()
    check_inputs(graph, tensors or {}, streams or {})
    bind = bindings_of(graph, tensors or {}, bindings or {})
    memory = Memory(graph, tensors or {})
    memory.allocate(bind)
    ctx = Context(memory, streams or {}, bind, random.Random(seed) if seed is not None else None)

    channels: dict[tuple[str, str], Channel] = {}
    for ref, consumer, port in graph.edges():
        channels[(ref.node.name, ref.port)] = Channel(ref.label, record)
    procs = []
    for node in graph.nodes.values():
        ins = {p: channels[(r.node.name, r.port)] for p, r in node.inputs.items() if r is not None}
        outs = {p: channels[(node.name, p)] for p in node.out_types}
        ports = Ports(node, ins, outs, ctx)
        procs.append([node, node.run(ports), None])

    # progress: a step of a node off every cycle (an Output aside), a memory access, a node finishing
    cyclic = graph.cyclic_nodes()
    # (a step that reads or writes off-chip memory is progress even on a cycle)
    idle_kind = {node.name: node.name in cyclic and node.memory is None or node.kind == "Output"
                 for node, _, _ in procs}
    steps = last_progress = 0
    ran: dict = {}              # node -> steps since the last progress
    live = procs
    while live:
        progressed = False
        order = list(live)
        if ctx.rng is not None:
            ctx.rng.shuffle(order)
        for proc in order:
            node, gen, waiting = proc
            if waiting is not None and not any(ch.queue for ch in waiting):
                continue
            progressed = True
            steps += 1
            try:
                proc[2] = next(gen)
            except StopIteration:
                proc[1] = None
                last_progress = steps
                ran.clear()
            except StepRuntimeError:
                raise
            except (ValueError, TypeError, IndexError, KeyError) as exc:
                # malformed data reaching an operator: name the node instead of a bare traceback
                raise StepRuntimeError(f"{where(node.kind, node.name)}: {type(exc).__name__}: {exc}") from exc
            if idle_kind[node.name]:
                ran[node] = ran.get(node, 0) + 1
            else:
                last_progress = steps
                if ran:
                    ran.clear()
        live = [p for p in live if p[1] is not None]
        if not progressed:
            raise _deadlock(live, channels)
        if steps - last_progress > max_idle_steps:
            raise StepRuntimeError(f"no progress in {steps - last_progress:,} steps: only {_ran(ran)} ran, tokens "
                                   f"going round a cycle without the program finishing (max_idle_steps "
                                   f"{max_idle_steps:,}; a longer loop of pure computation needs more)")
        if steps > max_steps:
            raise StepRuntimeError(f"interpreter stopped after {max_steps:,} steps without finishing (max_steps); "
                                   f"the last to run: {_ran(ran) if ran else 'nodes off any cycle'}")

    leftovers = {ch.name: len(ch.queue) for ch in channels.values() if ch.queue}
    if leftovers:
        raise StepRuntimeError(f"program finished with undelivered tokens on {leftovers}: a consumer "
                               f"stopped before its input's done token")
    return RunResult(memory=memory.arrays, outputs=ctx.outputs,
                     edges={ch.name: ch.log for ch in channels.values()} if record else {},
                     bytes_read=memory.bytes_read, bytes_written=memory.bytes_written, steps=steps)


def _ran(ran: dict) -> str:
    """The nodes that ran since the last progress, busiest first (at most eight)."""
    busy = sorted(ran.items(), key=lambda kv: -kv[1])
    names = ", ".join(f"{n.kind} '{n.name}' ({k:,} steps)" for n, k in busy[:8])
    return names + (f" and {len(busy) - 8} more" if len(busy) > 8 else "")


def _deadlock(live, channels) -> StepDeadlockError:
    blocked = []
    for node, _, waiting in live:
        names = [ch.name for ch in waiting or ()]
        blocked.append(f"{node.kind} '{node.name}' waits on {', '.join(names) or '?'}")
    pending = {ch.name: len(ch.queue) for ch in channels.values() if ch.queue}
    detail = "; ".join(blocked)
    held = ", ".join(f"{k} ({v} tokens)" for k, v in pending.items()) or "none"
    return StepDeadlockError(f"deadlock: {detail}. Channels holding undelivered tokens: {held}",
                             blocked, pending)


def check_inputs(graph: Graph, tensors: dict, streams: dict) -> None:
    """An :class:`~step_hdl.errors.InputError` naming the first input of ``graph`` not given: a tensor it
    reads and does not write, or a source's stream data (its ``data`` key)."""
    missing = [t for t in graph.input_tensors() if t not in tensors]
    if missing:
        raise InputError(f"graph '{graph.name}' reads tensor(s) {', '.join(map(repr, missing))} that no array is "
                         f"given for (given: {', '.join(map(repr, sorted(tensors))) or 'none'}; in Python "
                         f"tensors={{{missing[0]!r}: ...}}, on the command line an array named {missing[0]!r} in "
                         f"--inputs INPUTS.npz)")
    for node in graph.nodes.values():
        key = node.stream_key()
        if key is not None and key not in streams:
            raise InputError(f"{where(node.kind, node.name)}: no data {key!r} for the source (given: "
                             f"{', '.join(map(repr, sorted(streams))) or 'none'}; in Python streams={{{key!r}: "
                             f"...}}, on the command line an array named 'stream.{key}' in --inputs INPUTS.npz)")


def bindings_of(graph: Graph, tensors: dict, user: dict) -> dict:
    """The values of ``graph``'s dynamic sizes: the ``user``'s bindings (name or symbol -> integer >= 0) and
    the sizes the input ``tensors``' shapes give."""
    bind: dict = {}
    for k, v in user.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise InputError(f"binding '{k}': expected an integer >= 0 (a dynamic size), got {v!r}")
        bind[dyn(k) if isinstance(k, str) else k] = int(v)
    for name, arr in tensors.items():
        spec = graph.tensors.get(name)
        if spec is None:
            raise StepRuntimeError(f"tensor {name!r} given but not declared in the graph "
                                   f"(declared: {sorted(graph.tensors)})")
        arr = np.asarray(arr)
        for what, d, actual in (("rows", spec.rows, arr.shape[0] if arr.ndim else None),
                                ("cols", spec.cols, arr.shape[1] if arr.ndim > 1 else None)):
            if actual is None:
                continue
            d = d.subs(bind)
            if d.is_Integer:
                if int(d) != actual:
                    raise StepRuntimeError(f"off-chip tensor '{name}': declared {what} {d}, array has {actual}")
            elif d.is_Symbol:
                bind[d] = actual
    return bind


def run_operator(kind: str, inputs: dict, tensors: dict | None = None, declare: dict | None = None,
                 seed: int | None = None, **params) -> dict:
    """Run one operator on given input streams; return its output tokens per port.

    ``inputs`` maps each input port to ``(StreamType, tokens or nested values)``.
    ``declare`` maps off-chip tensor names to ``(rows, cols, dtype)`` for
    operators that touch memory, and ``tensors`` gives their contents. This is
    the golden model that unit testbenches compare the RTL against.
    """
    g = Graph(f"{kind}_alone")
    for name, (rows, cols, dt) in (declare or {}).items():
        g.tensor(name, rows, cols, dt)
    streams, refs = {}, {}
    for port, (st, toks) in inputs.items():
        if toks is None:
            continue
        key = f"src_{port}"
        streams[key] = toks
        refs[port] = g.source(st, data=key, name=key)
    node = g.add(kind, "dut", refs, **params)
    for ref in node.outputs:
        g.output(ref, name=f"out_{ref.port}")
    res = run(g, tensors or {}, streams, seed=seed)
    return {ref.port: res.outputs[f"out_{ref.port}"] for ref in node.outputs} | {"_memory": res.memory}
