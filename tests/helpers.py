"""Small helpers for token-level operator tests."""

import numpy as np

from step_hdl import Graph, Index, Selector, StreamType, Tile
from step_hdl.interp import run
from step_hdl.token import DONE, data, stop


def i(v):
    """A [1, 1] int32 tile payload."""
    return np.array([[v]], dtype=np.int32)


def toks(text: str, sel=False):
    """Tokens from text like ``"1 2 S1 3 S1 D"``; with ``sel`` data are selector bit masks."""
    out = []
    for w in text.split():
        if w == "D":
            out.append(DONE)
        elif w.startswith("S"):
            out.append(stop(int(w[1:])))
        else:
            out.append(data(int(w, 0) if sel else i(int(w))))
    return out


def text(tokens) -> str:
    """The inverse of :func:`toks` for [1, 1] integer tiles and selectors."""
    out = []
    for t in tokens:
        if t.done:
            out.append("D")
        elif t.stop:
            out.append(f"S{t.stop}")
        elif isinstance(t.payload, np.ndarray):
            out.append(str(int(t.payload.reshape(-1)[0])) if t.payload.size == 1 else str(t.payload.tolist()))
        elif isinstance(t.payload, tuple):
            out.append("(" + ",".join(str(int(x.reshape(-1)[0])) for x in t.payload) + ")")
        else:
            out.append(str(t.payload))
    return " ".join(out)


def ints(*shape):
    """Stream type of [1, 1] int32 tiles with the given shape."""
    return StreamType(Index(), shape)


def sels(n, *shape):
    return StreamType(Selector(n), shape)


def tiles(rows, cols, *shape, dt="int32"):
    return StreamType(Tile(dt, rows, cols), shape)


# the paper's sweep (tile_b in {16, 32, 64} x tile_inter in {16 .. 256} at B=64, H=256, I=512 with
# 16x16 physical tiles), tiles scaled by 1/4 onto 4x4 physical tiles; B=16 and I=64 are the least
# sizes with all fifteen points, H=8 keeps the simulations short (two physical tiles inner)
REDUCED = dict(batch=16, hidden=8, inter=64)
SWEEP = [(tb, ti) for tb in (4, 8, 16) for ti in (4, 8, 16, 32, 64)]


def relu_layer():
    """A user's own small layer, ``y = relu(requantize(x @ w, 4))`` on 8x8 int16 tensors, and its inputs."""
    from step_hdl import Graph, fn
    g = Graph("relu_layer")
    for name in ("x", "w", "y"):
        g.tensor(name, 8, 8, "int16")
    x, w = (g.load(t, tile=(8, 8), out_shape=[1], stride=[1], name=f"load_{t}") for t in "xw")
    h = g.map(g.map([x, w], "matmul", name="mm"), fn("requantize", shift=4, dtype="int16"), name="q")
    g.store(g.map(h, "relu", name="act"), "y", tile=(8, 8), name="store_y")
    rng = np.random.default_rng(2)
    return g, {n: rng.integers(-40, 40, (8, 8)).astype(np.int16) for n in "xw"}


def buffer_reference(st, tokens, b, repeat, ref=None, read=None, merge=None):
    """Bufferize(rank b) -> Streamify(repeat or ref, read pattern) [-> Flatten(0, merge)] in the interpreter;
    ``ref`` = (StreamType, tokens), ``read`` = (read_shape, read_stride)."""
    g = Graph("buffer")
    src = g.source(st, data="x", name="src")
    buf = g.add("Bufferize", "buf", {"in": src}, rank=b)
    ins = {"in": buf.out}
    streams = {"x": tokens}
    if ref is not None:
        ins["ref"] = g.source(ref[0], data="r", name="ref")
        streams["r"] = ref[1]
    shape, stride = read or (None, None)
    out = g.add("Streamify", "sfy", ins, repeat=repeat, read_shape=shape, read_stride=stride).out
    if merge is not None:
        out = g.flatten(out, 0, merge, name="flat")
    g.output(out, name="y")
    return run(g, {}, streams).outputs["y"]
