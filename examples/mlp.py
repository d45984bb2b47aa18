"""A two-layer perceptron in int16, batch tile by batch tile:

    h = relu(requantize(x @ W1, 6))       [B, H]
    y = requantize(h @ W2, 6)             [B, O]

Each ``[tile_b, D]`` tile of ``x`` meets both weight matrices (re-read from
DRAM per tile); on ``P x P`` physical tiles the matmuls buffer their operands
and accumulate over ``D / P`` and ``H / P`` blocks. Run ``python
examples/mlp.py --help``.
"""

import argparse

import numpy as np

from step_hdl import Graph, fn
from step_hdl.flow import model, prepare, run_rtl, workload

SHIFT = 6


def mlp_graph(batch: int, d_in: int, hidden: int, d_out: int, tile_b: int) -> Graph:
    g = Graph("mlp")
    for name, rows, cols in (("x", batch, d_in), ("w1", d_in, hidden), ("w2", hidden, d_out), ("y", batch, d_out)):
        g.tensor(name, rows, cols, "int16")
    n = batch // tile_b
    x = g.load("x", tile=(tile_b, d_in), out_shape=[n], stride=[1], name="load_x")
    w1 = g.load("w1", tile=(d_in, hidden), out_shape=[n], stride=[0], name="load_w1")
    w2 = g.load("w2", tile=(hidden, d_out), out_shape=[n], stride=[0], name="load_w2")
    h = g.map(g.map([x, w1], "matmul", name="fc1"), fn("requantize", shift=SHIFT, dtype="int16"), name="q1")
    h = g.map(h, "relu", name="act")
    y = g.map(g.map([h, w2], "matmul", name="fc2"), fn("requantize", shift=SHIFT, dtype="int16"), name="q2")
    g.store(y, "y", tile=(tile_b, d_out), name="store_y")
    return g


def reference(x, w1, w2) -> np.ndarray:
    def q(a):
        return np.clip(a >> SHIFT, -32768, 32767)
    h = np.maximum(q(x.astype(np.int64) @ w1), 0)
    return q(h @ w2).astype(np.int16)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="batch B (default: 16)")
    ap.add_argument("--d-in", type=int, default=16, help="input features D (default: 16)")
    ap.add_argument("--hidden", type=int, default=32, help="hidden features H (default: 32)")
    ap.add_argument("--d-out", type=int, default=8, help="output features O (default: 8)")
    ap.add_argument("--tile-b", type=int, default=8, help="batch tile (default: 8)")
    ap.add_argument("--phys-tile", type=int, default=4, help="physical tile side (default: 4)")
    ap.add_argument("--backend", default="amaranth", choices=("amaranth", "verilator", "icarus"),
                    help="RTL simulator (default: amaranth)")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    t = {"x": rng.integers(-100, 100, (a.batch, a.d_in)), "w1": rng.integers(-20, 20, (a.d_in, a.hidden)),
         "w2": rng.integers(-20, 20, (a.hidden, a.d_out))}
    t = {k: v.astype(np.int16) for k, v in t.items()}
    w = workload(mlp_graph(a.batch, a.d_in, a.hidden, a.d_out, a.tile_b), t,
                 expected={"y": reference(t["x"], t["w1"], t["w2"])})
    assert w.mismatches(w.run()) == {}, "the interpreter disagrees with numpy"
    prep = prepare(w, a.phys_tile)
    res = run_rtl(prep, a.backend)
    print(f"mlp {a.batch}x{a.d_in} -> {a.hidden} -> {a.d_out}: {len(prep.design.units)} units, RTL "
          f"{res.cycles:,} cycles ({a.backend}), outputs "
          f"{'match' if res.outputs_match else 'DIFFER: ' + str(res.mismatches)}; model "
          f"{model(w, lowered=prep.lowered).cycles:,} cycles; {int((res.outputs['y'] == 0).sum())} of "
          f"{res.outputs['y'].size} outputs are 0")
    return 0 if res.outputs_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
