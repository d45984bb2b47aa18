"""Softmax over the rows of a matrix, in fixed point, with the row maximum subtracted first.

    m = row_max(x)              per row, [R, 1]
    e = exp(x - m)              Q8: every value in (0, 1], 1.0 = 256 (x - m as int16: exp takes 16 bits)
    s = row_sum(e)              [R, 1]
    y = (e * 256) / s           Q8 probabilities (floor division)

``x`` is int16 in Q8 (1.0 = 256), in logical tiles of ``rows x cols``; the
graph is lowered to ``P x P`` physical tiles, so each row maximum and sum
combines the partial results of ``cols / P`` tiles, and ``x`` and ``e`` wait on
chip for them. Run ``python examples/softmax.py --help``.
"""

import argparse

import numpy as np

from step_hdl import Graph, fn
from step_hdl.flow import model, prepare, run_rtl, workload

FRAC = 8


def softmax_graph(n_rows: int, n_cols: int, tile_rows: int) -> Graph:
    g = Graph("softmax")
    g.tensor("x", n_rows, n_cols, "int16")
    g.tensor("y", n_rows, n_cols, "int32")
    x = g.load("x", tile=(tile_rows, n_cols), out_shape=[n_rows // tile_rows, 1], stride=[1, 0], name="load_x")
    x_a, x_b = g.broadcast(x, 2, name="split_x")
    m = g.map(x_b, "row_max", name="row_max")
    d = g.map(g.map([x_a, m], "sub", name="shift"), fn("requantize", shift=0, dtype="int16"), name="d16")
    e = g.map(d, fn("exp", frac=FRAC), name="exp")
    e_a, e_b = g.broadcast(e, 2, name="split_e")
    s = g.map(e_b, "row_sum", name="row_sum")
    y = g.map([g.map(e_a, fn("affine", scale=1 << FRAC), name="scale"), s], "div", name="normalize")
    g.store(y, "y", tile=(tile_rows, n_cols), name="store_y")
    return g


def reference(x: np.ndarray) -> np.ndarray:
    """The same arithmetic in numpy (``exp_fixed`` is the language's bit-exact fixed-point exp)."""
    from step_hdl.functions import exp_fixed
    from step_hdl.types import dtype
    d = np.clip(x.astype(np.int64) - x.max(axis=1, keepdims=True), -32768, 32767)
    e = exp_fixed(d, FRAC, dtype("int16")).astype(np.int64)
    return ((e << FRAC) // e.sum(axis=1, keepdims=True)).astype(np.int32)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16, help="rows of x (default: 16)")
    ap.add_argument("--cols", type=int, default=16, help="columns of x (default: 16)")
    ap.add_argument("--tile-rows", type=int, default=8, help="rows per logical tile (default: 8)")
    ap.add_argument("--phys-tile", type=int, default=4, help="physical tile side (default: 4)")
    ap.add_argument("--backend", default="amaranth", choices=("amaranth", "verilator", "icarus"),
                    help="RTL simulator (default: amaranth)")
    a = ap.parse_args(argv)
    x = np.random.default_rng(0).integers(-4 << FRAC, 4 << FRAC, (a.rows, a.cols)).astype(np.int16)
    want = reference(x)
    w = workload(softmax_graph(a.rows, a.cols, a.tile_rows), {"x": x}, expected={"y": want})
    assert w.mismatches(w.run()) == {}, "the interpreter disagrees with numpy"
    prep = prepare(w, a.phys_tile)
    res = run_rtl(prep, a.backend)
    probs = res.outputs["y"] / (1 << FRAC)
    print(f"softmax {a.rows}x{a.cols}: RTL {res.cycles:,} cycles ({a.backend}), outputs "
          f"{'match' if res.outputs_match else 'DIFFER: ' + str(res.mismatches)}; model "
          f"{model(w, lowered=prep.lowered).cycles:,} cycles; row sums of the probabilities "
          f"{probs.sum(axis=1).min():.3f}..{probs.sum(axis=1).max():.3f}")
    return 0 if res.outputs_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
