"""Fuzzing the whole flow: random well-formed STeP graphs, interpreter against RTL.

Hypothesis builds a random program from the operators a user combines (loads,
element-wise maps, matmuls, broadcasts, accumulations and scans, flatten and
reshape, partition and reassemble, an eager merge split back by its selector),
on tiles of one or several physical tiles. Each program is lowered, simulated
in RTL on the Amaranth simulator and its stored tensors compared bit for bit
with the interpreter's; the approximate model must finish it too.

The default suite runs 20 programs (``derandomize``: the same 20 every run);
``pytest -m slow tests/test_fuzz_flow.py`` runs 300. A failing program prints
its operator log (``note``, with the seed of its data) and Hypothesis's
``@reproduce_failure`` blob; pin it as a test of its own once fixed, or as a
strict xfail naming the blob while it is not.

A program the mapper cannot map is not a failure if the error is one of the
flow's own (a :class:`~step_hdl.errors.StepError` naming what is unsupported);
it is counted (``event``) so that the share of mapped programs stays visible
with ``--hypothesis-show-statistics``.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

from step_hdl import Graph, fn
from step_hdl.errors import StepError
from step_hdl.flow import model, prepare, run_rtl
from step_hdl.interp import run as interp_run
from step_hdl.types import dtype as make_dtype
from step_hdl.workloads.base import Workload

TILES = [(4, 4), (8, 4), (4, 8), (8, 8)]       # one to four physical 4x4 tiles
ZEROS = {t: fn("zeros", rows=t[0], cols=t[1], dtype="int32") for t in TILES}
LOWEST = {t: fn("lowest", rows=t[0], cols=t[1], dtype="int32") for t in TILES}
MAX_OPS = 5
# stream sizes, outermost first: up to 8 tiles (no operator adds tokens)
SIZES = [d for k in (1, 2, 3) for d in itertools.product((1, 2, 3), repeat=k) if math.prod(d) <= 8]

# the RTL simulator raises the limit for wide FIFOs (docs/toolchain.md); raised before Hypothesis starts, which
# otherwise warns that a test changed it
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


class Program:
    """A graph under construction: its current stream of int16 tiles and that stream's concrete sizes."""

    def __init__(self, draw):
        self.draw = draw
        self.tile = draw(st.sampled_from(TILES), label="tile")
        self.dims = list(draw(st.sampled_from(SIZES), label="stream sizes"))
        self.dynamic = False        # the outer size is a partition's count: no second operand of static shape
        self.g = Graph("fuzz")
        self.rng = np.random.default_rng(draw(st.integers(0, 2 ** 16), label="data seed"))
        self.tensors: dict[str, np.ndarray] = {}
        self.log: list[str] = []
        self.n = 0
        self.cur = self.load(self.dims)
        self.log.append(f"load tile={self.tile} sizes={self.dims}")

    def name(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    def load(self, dims, tile=None):
        """A stream of ``dims`` tiles (row-major) of a fresh random int16 tensor."""
        tr, tc = tile or self.tile
        count = math.prod(dims)
        t = self.name("t")
        self.g.tensor(t, count * tr, tc, "int16")
        wide = self.draw(st.booleans(), label="full int16 range")
        hi = 32767 if wide else 100
        self.tensors[t] = self.rng.integers(-hi, hi + 1, (count * tr, tc)).astype(np.int16)
        strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
        return self.g.load(t, tile=(tr, tc), out_shape=list(dims), stride=strides, name=self.name("ld"))

    def narrow(self, s):
        """int32 tiles back to int16 (a requantize by a random shift)."""
        shift = self.draw(st.integers(0, 8), label="shift")
        return self.g.map(s, fn("requantize", shift=shift, dtype="int16"), name=self.name("rq"))

    def store(self, s, dims):
        count = math.prod(dims)
        t = self.name("out")
        self.g.tensor(t, count * self.tile[0], self.tile[1], "int16")
        self.g.store(s, t, tile=self.tile, name=self.name("st"))

    # ------------------------------------------------------------------ operators

    def choices(self):
        d, r = self.dims, len(self.dims) - 1
        ops = ["relu", "requantize", "self-binary", "partition"]
        if not self.dynamic:
            ops += ["second-load", "matmul"]
        if r >= 1:
            ops += ["accum", "flatten"]
            if self.tile == (4, 4):     # a scan of tiles of several physical tiles is not mapped (docs/flow.md)
                ops.append("scan")
        if any(d[-1] % c == 0 for c in (2, 3) if c < d[-1]) and len(d) < 3:
            ops.append("reshape")
        if len(d) >= 1:
            ops.append("eager-merge")
        return ops

    def apply(self, op):
        g, d = self.g, self.dims
        if op == "relu":
            self.cur = g.map(self.cur, "relu", name=self.name("relu"))
        elif op == "requantize":
            self.cur = self.narrow(self.cur)
        elif op in ("self-binary", "second-load"):
            f = self.draw(st.sampled_from(["add", "sub", "max", "mul"]), label="binary")
            if op == "self-binary":
                a, b = g.broadcast(self.cur, name=self.name("fan"))
                a = g.map(a, "relu", name=self.name("relu"))
            else:
                a, b = self.cur, self.load(d)
            self.cur = self.narrow(g.map([a, b], f, name=self.name(f)))
            op = f"{op} {f}"
        elif op == "matmul":
            w = self.load(d, (self.tile[1], self.tile[1]))
            self.cur = self.narrow(g.map([self.cur, w], "matmul", name=self.name("mm")))
        elif op in ("accum", "scan"):
            upd = self.draw(st.sampled_from(["add", "max"]), label="update")
            init = (ZEROS if upd == "add" else LOWEST)[self.tile]
            make = g.accum if op == "accum" else g.scan
            self.cur = self.narrow(make(self.cur, upd, init, rank=1, name=self.name(op)))
            if op == "accum":
                self.dims = d[:-1]
            op = f"{op} {upd}"
        elif op == "flatten":
            self.cur = g.flatten(self.cur, 0, 1, name=self.name("flat"))
            self.dims = d[:-2] + [d[-2] * d[-1]]
        elif op == "reshape":
            c = self.draw(st.sampled_from([c for c in (2, 3) if c < d[-1] and d[-1] % c == 0]), label="chunk")
            self.cur = g.reshape(self.cur, 0, c, name=self.name("rs"))
            self.dims = d[:-1] + [d[-1] // c, c]
            op = f"reshape {c}"
        elif op == "partition":
            # the outermost dimension's chunks to two branches and back: a one-hot selector per chunk
            p = len(d) - 1
            route = self.draw(st.lists(st.integers(0, 1), min_size=d[0], max_size=d[0]), label="route")
            sel = g.selector_source(2, values=[[r] for r in route], name=self.name("sel"))
            s1, s2 = g.broadcast(sel, name=self.name("selfan"))
            b0, b1 = g.partition(self.cur, s1, 2, rank=p, name=self.name("part"))
            b0 = g.map(b0, "relu", name=self.name("relu"))
            b1 = self.narrow(g.map(b1, fn("affine", scale=3, offset=-5), name=self.name("aff")))
            back = g.reassemble([b0, b1], s2, rank=p, k=1, name=self.name("asm"))
            lo = max(p - 1, 0)
            self.cur = g.flatten(back, lo, lo + 1, name=self.name("flat"))
            op = f"partition {route}"
        elif op == "eager-merge":
            # two copies merged in arrival order, mapped, split back by the merge's selector: each branch keeps
            # its order whatever the timing; the second branch is stored as an output of its own
            p = len(d) - 1
            a, b = g.broadcast(self.cur, name=self.name("fan"))
            a = g.map(a, "relu", name=self.name("relu"))
            b = self.narrow(g.map(b, fn("affine", scale=-1, offset=7), name=self.name("aff")))
            merged, sel = g.eager_merge([a, b], rank=p, name=self.name("em"))
            merged = g.map(merged, fn("requantize", shift=1, dtype="int16"), name=self.name("rq"))
            o0, o1 = g.partition(merged, sel, 2, rank=p, name=self.name("split"))
            self.store(o1, d)
            self.cur, self.dynamic = o0, True
        else:  # pragma: no cover
            raise AssertionError(op)
        self.log.append(f"{op} -> sizes {self.dims}")


@st.composite
def programs(draw):
    p = Program(draw)
    for i in range(draw(st.integers(1, MAX_OPS), label="operators")):
        op = draw(st.sampled_from(p.choices()), label=f"op {i}")
        p.apply(op)
        event(op.split()[0])
    p.store(p.cur, p.dims)
    return p


def check(p: Program):
    """Interpreter == RTL bit for bit on every stored tensor, and the model finishes."""
    note("\n".join(p.log))
    want = interp_run(p.g, p.tensors).memory
    outs = {t: want[t] for t in p.g.stored_tensors()}
    w = Workload(p.g, p.tensors, {}, outs, make_dtype("int16"))
    try:
        prep = prepare(w, 4)
    except StepError as exc:
        event(f"not mapped: {type(exc).__name__}")
        note(f"not mapped: {exc}")
        return
    event("mapped")
    res = run_rtl(prep, "amaranth")
    assert res.status == "done", res.status
    assert res.outputs_match, res.mismatches
    for t, v in outs.items():
        assert np.array_equal(res.outputs[t], v), t
    assert model(w, 4).cycles > 0


# no shrinking: a program takes seconds to simulate and the log of a failing one already says what it is
COMMON = dict(deadline=None, database=None, derandomize=True, print_blob=True, phases=(Phase.explicit, Phase.generate),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=10, **COMMON)
@given(programs())
def test_random_programs_bit_exact_in_rtl(p):
    check(p)


@pytest.mark.slow
@settings(max_examples=300, **COMMON)
@given(programs())
def test_random_programs_bit_exact_in_rtl_many(p):
    check(p)
