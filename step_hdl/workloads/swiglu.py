"""SwiGLU (one MoE expert), with the tiled schedule of the STeP paper.

``y = (SiLU(x·W1) ⊙ (x·W3))·W2`` with x ``[B, H]``, W1 and W3 ``[H, I]``, W2
``[I, H]``. For every (batch tile, intermediate tile) pair the schedule loads the
batch tile of x ``[tb, H]`` once and broadcasts it to the W1 and W3 matmuls,
re-reads the W1/W3 column tiles ``[H, ti]`` and the W2 row tile ``[ti, H]`` for
every batch tile, accumulates the W2 products over the intermediate tiles on
chip and stores each output batch tile ``[tb, H]`` once. Off-chip traffic is
therefore, with ``e`` bytes per element::

    e · (B·H·I/ti + 3·(B/tb)·H·I + B·H)
"""

from __future__ import annotations

import numpy as np
import sympy

from ..functions import fn
from ..graph import Graph
from ..types import DType, as_dim, dtype as make_dtype
from .base import Workload, random_tensor

#: fixed-point format of integer SwiGLU: activations and weights carry FRAC fractional bits
FRAC = 8


def int_fns(dt: DType) -> dict:
    """The requantize steps of the integer pipeline (products carry 2·FRAC fractional bits)."""
    return {"q": fn("requantize", shift=FRAC, dtype=dt.name), "silu": fn("silu", frac=FRAC)}


def swiglu_graph(batch, hidden, inter, tile_b, tile_inter, dt="fp32", name="swiglu", prefix="") -> Graph:
    """The STeP graph of SwiGLU with the paper's schedule.

    Parameters may be integers or sympy symbols (for symbolic metrics); tile
    sizes must divide the corresponding sizes when both are static.
    """
    dt = make_dtype(dt)
    B, H, I = as_dim(batch), as_dim(hidden), as_dim(inter)
    tb, ti = as_dim(tile_b), as_dim(tile_inter)
    nb, ni = B / tb, I / ti
    g = Graph(name)
    g.tensor("x", B, H, dt)
    g.tensor("W1", H, I, dt)
    g.tensor("W3", H, I, dt)
    g.tensor("W2", I, H, dt)
    g.tensor("y", B, H, dt)
    build_swiglu(g, dt, B, H, tb, ti, nb, ni)
    return g


def build_swiglu(g: Graph, dt: DType, B, H, tb, ti, nb, ni):
    x = g.load("x", tile=(tb, H), out_shape=[nb, ni], stride=[1, 0], name="load_x")
    w1 = g.load("W1", tile=(H, ti), out_shape=[nb, ni], stride=[0, 1], name="load_w1")
    w3 = g.load("W3", tile=(H, ti), out_shape=[nb, ni], stride=[0, 1], name="load_w3")
    w2 = g.load("W2", tile=(ti, H), out_shape=[nb, ni], stride=[0, 1], name="load_w2")
    out = ffn_core(g, x, w1, w3, w2, dt, tb, H)
    g.store(out, "y", tile=(tb, H), name="store_y")


def ffn_core(g: Graph, x, w1, w3, w2, dt: DType, tile_rows, H, prefix: str = ""):
    """The SwiGLU dataflow on tile streams of shape ``[..., n_inter]``.

    ``x`` carries the token tile ``[tile_rows, H]`` once per intermediate tile,
    ``w1``/``w3`` the ``[H, ti]`` and ``w2`` the ``[ti, H]`` weight tiles. The W2
    products are accumulated over the innermost dimension; returns the output
    tile stream ``[...]`` of ``[tile_rows, H]``.
    """
    x1, x3 = g.broadcast(x, 2, name=prefix + "bcast_x")
    h1 = g.map([x1, w1], "matmul", name=prefix + "gate_proj")
    h3 = g.map([x3, w3], "matmul", name=prefix + "up_proj")
    if dt.is_int:
        f = int_fns(dt)
        h1 = g.map(h1, f["q"], name=prefix + "gate_requant")
        h3 = g.map(h3, f["q"], name=prefix + "up_requant")
        act = g.map(h1, f["silu"], name=prefix + "silu")
        prod = g.map(g.map([act, h3], "mul", name=prefix + "gate_mul"), f["q"], name=prefix + "mul_requant")
    else:
        act = g.map(h1, "silu", name=prefix + "silu")
        prod = g.map([act, h3], "mul", name=prefix + "gate_mul")
    # floats: the W2 products and their sum over the intermediate tiles stay in fp32, rounded once at the end
    down = fn("matmul") if dt.is_int or dt.name == "fp32" else fn("matmul", dtype="fp32")
    y = g.map([prod, w2], down, name=prefix + "down_proj")
    acc_t = "int32" if dt.is_int else "fp32"
    acc = g.accum(y, "add", fn("zeros", rows=tile_rows, cols=H, dtype=acc_t), rank=1, name=prefix + "accum_down")
    if dt.is_int:
        acc = g.map(acc, int_fns(dt)["q"], name=prefix + "out_requant")
    elif dt.name != "fp32":
        acc = g.map(acc, fn("convert", dtype=dt.name), name=prefix + "out_round")
    return acc


def swiglu_reference(x, w1, w3, w2, dt: DType) -> np.ndarray:
    """numpy SwiGLU with the same arithmetic as the graph (bit-exact for integer types)."""
    from ..functions import FUNCTIONS
    if dt.is_int:
        f = int_fns(dt)
        mm, mul = fn("matmul"), fn("mul")
        h1 = FUNCTIONS["matmul"].apply(mm, x, w1)
        h3 = FUNCTIONS["matmul"].apply(mm, x, w3)
        h1 = FUNCTIONS["requantize"].apply(f["q"], h1)
        h3 = FUNCTIONS["requantize"].apply(f["q"], h3)
        act = FUNCTIONS["silu"].apply(f["silu"], h1)
        prod = FUNCTIONS["requantize"].apply(f["q"], FUNCTIONS["mul"].apply(mul, act, h3))
        y = FUNCTIONS["matmul"].apply(mm, prod, w2)
        return FUNCTIONS["requantize"].apply(f["q"], y)
    x, w1, w3, w2 = (a.astype(np.float64) for a in (x, w1, w3, w2))
    h1 = x @ w1
    act = h1 / (1 + np.exp(-h1))
    return ((act * (x @ w3)) @ w2).astype(np.float32)


def swiglu(batch=64, hidden=256, inter=512, tile_b=16, tile_inter=16, dtype="fp32", seed=0) -> Workload:
    """SwiGLU workload with random inputs and its numpy reference."""
    dt = make_dtype(dtype)
    g = swiglu_graph(batch, hidden, inter, tile_b, tile_inter, dt)
    rng = np.random.default_rng(seed)
    # integer data: activations about ±1.0 and weights about ±0.25 in Q8 keep the
    # pipeline mostly out of saturation; floats scaled for unit-size activations.
    x = random_tensor(rng, (batch, hidden), dt, 1.0, int_range=256)
    ws = [random_tensor(rng, s, dt, 1 / np.sqrt(hidden if s[0] == hidden else inter), int_range=64)
          for s in ((hidden, inter), (hidden, inter), (inter, hidden))]
    y = swiglu_reference(x, *ws, dt)
    params = dict(batch=batch, hidden=hidden, inter=inter, tile_b=tile_b, tile_inter=tile_inter, dtype=dt.name)
    return Workload(g, {"x": x, "W1": ws[0], "W3": ws[1], "W2": ws[2]}, {}, {"y": y}, dt, params=params)


def swiglu_offchip_bytes(batch, hidden, inter, tile_b, tile_inter, elem_bytes) -> sympy.Expr:
    """Closed form of the schedule's off-chip traffic (derived by hand, see module docstring)."""
    B, H, I, tb, ti = (as_dim(v) for v in (batch, hidden, inter, tile_b, tile_inter))
    return elem_bytes * (B * H * I / ti + 3 * (B / tb) * H * I + B * H)
