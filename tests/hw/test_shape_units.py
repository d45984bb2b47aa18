"""Shape units against the interpreter, under random stalls, on any --sim back-end."""

import numpy as np
import pytest

from step_hdl import dyn
from step_hdl.interp import run_operator
from step_hdl.token import data, encode
from step_hdl.types import Ragged
from step_hdl.units.params import ParamError, StreamParams
from step_hdl.units.shape import (Expand, ExpandParams, Flatten, Promote, RepeatParams, RepeatStatic, Reshape,
                                  ReshapeParams, Zip, ZipParams)

from helpers import ints, tiles, toks
from hw.harness import check_unit
from step_hdl.units.base import not_elaborated

L = Ragged("L", integer=True, nonnegative=True)
L2 = Ragged("L2", integer=True, nonnegative=True)
N = dyn("N")
P = StreamParams(rows=1, cols=1, dtype="int32", max_rank=3)


def tile_toks(text, rows, cols, dt):
    """Tokens like :func:`toks`, each data token a ``rows × cols`` tile of ``dt`` filled with its value
    (plus the element index, so that elements differ)."""
    out = []
    for t in toks(text):
        if t.is_data:
            v = int(t.payload[0, 0])
            out.append(data((np.arange(rows * cols).reshape(rows, cols) + v).astype(np.dtype(dt))))
        else:
            out.append(t)
    return out


@pytest.mark.parametrize("lo, hi, st, text", [
    (0, 1, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (1, 2, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (0, 2, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (0, 1, ints(3, L), "1 2 S1 S1 3 S1 D"),                     # ragged with an empty run
    (1, 3, ints(2, 1, 2, L), "1 S1 S2 2 3 S3 S1 4 S3 D"),         # several stop levels
])
def test_flatten(sim_backend, lo, hi, st, text):
    unit = Flatten(P)
    check_unit(unit, "Flatten", {"in": (st, toks(text))}, dict(lo=lo, hi=hi), backend=sim_backend)


# ---------------------------------------------------------------- Promote

@pytest.mark.parametrize("st, text", [
    (ints(3), "1 2 3 D"),                                       # rank 0: S1 before done
    (ints(N), "D"),                                             # empty: outer dim 0
    (ints(N, 2), "D"),                                          # empty, rank 1
    (ints(2, 1), "1 S1 2 S1 D"),
    (ints(4, L), "S1 1 S1 S1 2 3 4 S1 D"),                      # ragged, empty runs, back-to-back S_r
    (ints(2, 2, L), "1 2 S1 S2 3 S1 4 5 S2 D"),                 # several stop levels, last S2 -> S3
], ids=["rank0", "empty0", "empty1", "rank1", "ragged", "levels"])
def test_promote(sim_backend, st, text):
    check_unit(Promote(P), "Promote", {"in": (st, toks(text))}, {}, backend=sim_backend)


# ---------------------------------------------------------------- RepeatStatic

@pytest.mark.parametrize("count, st, text", [
    (2, ints(3), "1 2 3 D"),                                    # rank 0: eager block ends
    (1, ints(4), "5 6 7 8 D"),
    (3, ints(N), "D"),
    (3, ints(3, L), "1 2 S1 S1 3 S1 D"),                        # ragged with an empty run
    (2, ints(2, 2, L), "1 S1 S2 2 3 S1 4 S2 D"),                # several stop levels (out rank 3)
], ids=["rank0", "count1", "empty", "ragged", "levels"])
def test_repeat_static(sim_backend, count, st, text):
    unit = RepeatStatic(RepeatParams(rows=1, cols=1, dtype="int32", max_rank=3, count_bits=4))
    check_unit(unit, "RepeatStatic", {"in": (st, toks(text))}, dict(count=count), backend=sim_backend)


@pytest.mark.parametrize("kind", ["RepeatStatic", "Reshape"])
def test_block_ends_cost_no_cycle(sim_backend, kind):
    """With a rank-1 input, the block end after each element's copies (RepeatStatic) or each chunk
    (Reshape at rank 0) leaves with its last element: without stalls the unit sends one token a cycle, its
    block ends merged into the outer stops or sent before the next element (4 rows of 3 elements, copied
    twice or cut into chunks of 3: exactly as many cycles as output tokens, plus the unit's latency)."""
    st, text = ints(4, 3), " ".join(["1 2 3 S1"] * 4) + " D"
    if kind == "RepeatStatic":
        unit = RepeatStatic(RepeatParams(rows=1, cols=1, dtype="int32", max_rank=3, count_bits=4))
        op = dict(count=2)
    else:
        unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4))
        op = dict(rank=0, chunk=3)
    inputs = {"in": (st, toks(text))}
    want = run_operator(kind, inputs, **op)["out"]
    (cycles,) = check_unit(unit, kind, inputs, op, backend=sim_backend, seeds=(0,), p_gap=0, p_drop=0)
    # (the scenario's first token leaves a cycle after it is offered; before, each block end cost a cycle
    # of its own: RepeatStatic took 50 cycles for these 37 tokens)
    assert cycles == len(want) + 1, (cycles, len(want))


# ---------------------------------------------------------------- Reshape

@pytest.mark.parametrize("params, st, text", [
    (dict(rank=0, chunk=2), ints(4), "1 2 3 4 D"),                          # rank 0, eager
    (dict(rank=0, chunk=2), ints(2, L), "1 2 S1 S1 3 4 5 6 S1 D"),           # ragged, empty run
    (dict(rank=1, chunk=2), ints(4, 1), "1 S1 2 S1 3 S1 4 S1 D"),
    (dict(rank=1, chunk=2), ints(2, 4, L), "1 S1 S1 2 3 S1 4 S2 5 S1 6 S1 S1 S2 D"),
    (dict(rank=2, chunk=2), ints(4, 2, L), "1 S1 2 S2 S1 S2 3 S1 S2 4 5 S1 6 S2 D"),
    # runs of 3 and 1 rows of a ragged count in chunks of 2: a short last chunk each (P-row blocks)
    (dict(rank=1, chunk=2, partial=True), ints(2, L, 2), "1 2 S1 3 S1 4 5 S2 6 7 S2 D"),
    (dict(rank=1, chunk=4, partial=True), ints(3, L, 1), "1 S1 2 S1 3 S2 4 S2 5 S1 6 S1 7 S1 8 S1 9 S2 D"),
], ids=["rank0", "ragged", "rank1", "rank1-levels", "rank2", "partial", "partial-tall"])
def test_reshape(sim_backend, params, st, text):
    unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4))
    check_unit(unit, "Reshape", {"in": (st, toks(text))}, params, backend=sim_backend)


@pytest.mark.parametrize("chunk, pad, st, text", [
    (2, 9, ints(5), "1 2 3 4 5 D"),                             # rank 0: the last run is padded at done
    (3, 0, ints(N), "D"),
    (2, -1, ints(3, L), "S1 1 2 3 S1 4 S1 D"),                  # ragged: empty run, padded runs
    (3, 7, ints(2, 2, L), "1 2 3 4 S1 S2 5 S1 6 7 8 S2 D"),     # several stop levels
], ids=["rank0", "empty", "ragged", "levels"])
def test_reshape_pad(sim_backend, chunk, pad, st, text):
    unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4, pad=True))
    check_unit(unit, "Reshape", {"in": (st, toks(text))}, dict(rank=0, chunk=chunk, pad=pad),
               backend=sim_backend)


def test_reshape_pad_float_tiles(sim_backend):
    unit = Reshape(ReshapeParams(rows=2, cols=2, dtype="fp32", max_rank=2, chunk_bits=3, pad=True))
    st = tiles(2, 2, 2, L, dt="fp32")
    check_unit(unit, "Reshape", {"in": (st, tile_toks("1 2 3 S1 4 S1 D", 2, 2, np.float32))},
               dict(rank=0, chunk=2, pad=-1.5), backend=sim_backend)


# ---------------------------------------------------------------- Expand

@pytest.mark.parametrize("rank, st, text, rst, rtext", [
    (1, ints(2, 1), "1 S1 2 S1 D", ints(2, L), "0 0 0 S1 0 S1 D"),
    (1, ints(3, 1), "1 S1 2 S1 3 S1 D", ints(3, L), "S1 0 S1 S1 D"),          # empty ref chunks
    (1, ints(N, 1), "D", ints(N, L), "D"),                                     # empty stream
    (1, ints(2, 2, 1), "1 S1 2 S2 3 S1 4 S2 D", ints(2, 2, L), "0 0 S1 0 S2 S1 0 0 0 S2 D"),
    (2, ints(2, 1, 1), "1 S2 2 S2 D", ints(2, L, L2), "0 0 S1 0 S1 S2 S1 0 S2 D"),  # inner stops pass
    (1, ints(2, L, 1), "1 S2 S2 D", ints(2, L, L2), "0 0 S2 S2 D"),            # an empty middle dim
], ids=["rank1", "empty-chunks", "empty", "levels", "rank2", "empty-middle"])
def test_expand(sim_backend, rank, st, text, rst, rtext):
    unit = Expand(ExpandParams(rows=1, cols=1, dtype="int32", max_rank=3))
    check_unit(unit, "Expand", {"in": (st, toks(text)), "ref": (rst, toks(rtext))}, dict(rank=rank),
               backend=sim_backend)


def test_expand_other_ref_tile(sim_backend):
    unit = Expand(ExpandParams(rows=2, cols=2, dtype="int16", max_rank=2, ref_rows=1, ref_cols=3,
                               ref_dtype="int8"))
    check_unit(unit, "Expand",
               {"in": (tiles(2, 2, 3, 1, dt="int16"),
                       tile_toks("1 S1 2 S1 3 S1 D", 2, 2, np.int16)),
                "ref": (tiles(1, 3, 3, L, dt="int8"), tile_toks("5 5 S1 S1 5 5 5 S1 D", 1, 3, np.int8))},
               dict(rank=1), backend=sim_backend)


# ---------------------------------------------------------------- Zip

ZP = ZipParams(rows0=1, cols0=1, dtype0="int32", rows1=2, cols1=2, dtype1="int16", max_rank=3)


@pytest.mark.parametrize("st0, st1, a, b", [
    (ints(3), tiles(2, 2, 3, dt="int16"), "1 2 3 D", "4 5 6 D"),                     # rank 0
    (ints(N), tiles(2, 2, N, dt="int16"), "D", "D"),
    (ints(3, L), tiles(2, 2, 3, L, dt="int16"), "1 S1 S1 2 3 S1 D", "4 S1 S1 5 6 S1 D"),   # ragged, empty
    (ints(2, 2, L), tiles(2, 2, 2, 2, L, dt="int16"), "1 S1 S2 2 3 S1 4 S2 D", "5 S1 S2 6 7 S1 8 S2 D"),
], ids=["rank0", "empty", "ragged", "levels"])
def test_zip(sim_backend, st0, st1, a, b):
    check_unit(Zip(ZP), "Zip", {"in0": (st0, toks(a)), "in1": (st1, tile_toks(b, 2, 2, np.int16))}, {},
               backend=sim_backend)


# ---------------------------------------------------------------- bad parameters

def _configure_error(unit, op_params, in_types, match):
    not_elaborated(unit)  # never elaborated
    with pytest.raises(ParamError, match=match):
        unit.configure(op_params, in_types)


def test_bad_shape_parameters():
    with pytest.raises(ParamError, match=r"RepeatParams: count_bits must be <= 32"):
        RepeatParams(count_bits=40)
    with pytest.raises(ParamError, match=r"ReshapeParams: chunk_bits must be an integer >= 1, got 0"):
        ReshapeParams(chunk_bits=0)
    with pytest.raises(ParamError, match=r"ReshapeParams: pad must be True or False, got 'yes'"):
        ReshapeParams(pad="yes")
    with pytest.raises(ParamError, match=r"ExpandParams: ref_rows must be an integer >= 1, got 0"):
        ExpandParams(ref_rows=0)
    with pytest.raises(ParamError, match=r"ZipParams: unsupported element type dtype1='int4'"):
        ZipParams(dtype1="int4")
    with pytest.raises(ParamError, match=r"ZipParams: cols0 must be an integer >= 1, got -2"):
        ZipParams(cols0=-2)
    with pytest.raises(ParamError, match=r"Zip: parameters must be ZipParams, got StreamParams"):
        Zip(P)
    with pytest.raises(ParamError, match=r"RepeatStatic: parameters must be RepeatParams"):
        RepeatStatic(P)
    # per-program settings that the unit cannot take fail in configure()
    rp = RepeatParams(rows=1, cols=1, dtype="int32", max_rank=2, count_bits=4)
    _configure_error(RepeatStatic(rp), dict(count=0), {"in": ints(3)}, r"RepeatStatic: count must be in 1\.\.15, got 0")
    _configure_error(RepeatStatic(rp), dict(count=16), {"in": ints(3)}, r"count must be in 1\.\.15, got 16")
    _configure_error(RepeatStatic(rp), dict(count=2), {"in": ints(2, 2, 2)}, r"output rank 3 exceeds max_rank 2")
    _configure_error(RepeatStatic(rp), dict(count=2), {"in": tiles(2, 2, 3)},
                     r"input 'in' carries .* but the unit was built for")
    shp = ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3)
    _configure_error(Reshape(shp), dict(rank=0, chunk=2, pad=0), {"in": ints(3)},
                     r"Reshape: the node pads but the unit was built without o_pad")
    _configure_error(Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", pad=True)), dict(rank=0, chunk=2),
                     {"in": ints(4)}, r"the unit has o_pad .* but the node gives no pad value")
    _configure_error(Reshape(shp), dict(rank=2, chunk=2), {"in": ints(4, 2)}, r"rank must be in 0\.\.1")
    _configure_error(Reshape(shp), dict(rank=1, chunk=2, partial=True), {"in": ints(4, 2)},
                     r"a partial last chunk needs a run closed by a stop: rank in 1\.\.0 for a rank-1 input, got rank 1")
    _configure_error(Expand(ExpandParams(rows=1, cols=1, dtype="int32")), dict(rank=0),
                     {"in": ints(2, 1), "ref": ints(2, 3)}, r"Expand: rank must be in 1\.\.1")
    _configure_error(Promote(StreamParams(rows=1, cols=1, dtype="int32", max_rank=1)), {}, {"in": ints(2, 2)},
                     r"Promote: output rank 2 exceeds max_rank 1")


# ---------------------------------------------------------------- longer random streams (fixed data seed)

def _nested(rng, rank, lens, leaf):
    """Nested lists of ``rank + 1`` levels; ``lens(level)`` draws each list's length."""
    if rank == 0:
        return [leaf() for _ in range(lens(0))]
    return [_nested(rng, rank - 1, lens, leaf) for _ in range(lens(rank))]


def _random_tokens(seed, rank, max_len=4, min_len=0, fixed=None):
    """A random ragged rank-``rank`` stream of [1, 1] int32 tiles; ``fixed`` maps levels to sizes."""
    import random
    rng = random.Random(seed)
    counter = iter(range(1, 10_000))
    fixed = fixed or {}
    nested = _nested(rng, rank, lambda lv: fixed.get(lv, rng.randint(min_len, max_len)),
                     lambda: np.array([[next(counter)]], np.int32))
    return nested, encode(nested, rank)


def _shape(rank, fixed=None):
    fixed = fixed or {}
    return ints(*[fixed.get(lv, Ragged(f"R{lv}", integer=True, nonnegative=True) if lv < rank else N)
                  for lv in range(rank, -1, -1)])


@pytest.mark.parametrize("unit_name", ["promote", "repeat0", "repeat2", "reshape0", "reshape-pad1", "reshape1",
                                       "expand", "zip"])
def test_random_streams(sim_backend, unit_name):
    if unit_name == "promote":
        _, t = _random_tokens(10, 2, fixed={2: 4})
        check_unit(Promote(P), "Promote", {"in": (_shape(2), t)}, {}, backend=sim_backend)
    elif unit_name.startswith("repeat"):
        rank = int(unit_name[-1])
        _, t = _random_tokens(11, rank, max_len=12 if rank == 0 else 4, fixed={rank: 12 if rank == 0 else 3})
        unit = RepeatStatic(RepeatParams(rows=1, cols=1, dtype="int32", max_rank=3, count_bits=4))
        check_unit(unit, "RepeatStatic", {"in": (_shape(rank), t)}, dict(count=2), backend=sim_backend)
    elif unit_name == "reshape0":
        _, t = _random_tokens(12, 0, min_len=18, max_len=18)
        unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4))
        check_unit(unit, "Reshape", {"in": (_shape(0), t)}, dict(rank=0, chunk=3), backend=sim_backend)
    elif unit_name == "reshape-pad1":
        _, t = _random_tokens(13, 1, max_len=7, fixed={1: 6})
        unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4, pad=True))
        check_unit(unit, "Reshape", {"in": (_shape(1), t)}, dict(rank=0, chunk=3, pad=-5), backend=sim_backend)
    elif unit_name == "reshape1":
        _, t = _random_tokens(14, 2, fixed={2: 3, 1: 4})
        unit = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4))
        check_unit(unit, "Reshape", {"in": (_shape(2, {2: 3, 1: 4}), t)}, dict(rank=1, chunk=2), backend=sim_backend)
    elif unit_name == "expand":
        ref_nested, rt = _random_tokens(15, 2, fixed={2: 4})
        x = iter(range(100, 10_000))
        nested = [[[np.array([[next(x)]], np.int32)] for _ in row] for row in ref_nested]
        st = _shape(2)
        ist = ints(st.shape[0], st.shape[1], 1)
        unit = Expand(ExpandParams(rows=1, cols=1, dtype="int32", max_rank=3))
        check_unit(unit, "Expand", {"in": (ist, encode(nested, 2)), "ref": (st, rt)}, dict(rank=1),
                   backend=sim_backend)
    else:
        nested, t0 = _random_tokens(16, 2, fixed={2: 3})
        t1 = encode([[[np.full((2, 2), int(v[0, 0]) * 3, np.int16) for v in r] for r in m] for m in nested], 2)
        st = _shape(2)
        check_unit(Zip(ZP), "Zip", {"in0": (st, t0), "in1": (st.with_dtype(tiles(2, 2, 1, dt="int16").dtype), t1)},
                   {}, backend=sim_backend)


# ---------------------------------------------------------------- o.valid never depends on o.ready

def _valid_ignores_ready(unit, inputs: dict, config: list[int], cycles: int = 300, seed: int = 0):
    """Drive ``inputs`` ({hw port: packed tokens}) with random gaps; in every cycle, check that each
    output's valid and payload are the same with its ready low and high (no path ready -> valid)."""
    import random

    from amaranth.sim import Simulator
    from step_hdl.sim.streams import write_config
    rng = random.Random(seed)
    outs = [p for p, (is_out, _) in unit.fmts.items() if is_out]
    sim = Simulator(unit)
    sim.add_clock(1e-8)
    problems = []

    async def tb(ctx):
        await write_config(ctx, unit.cfg, config)
        pos = {p: 0 for p in inputs}
        for cyc in range(cycles):
            for p, vals in inputs.items():
                port = getattr(unit, p)
                if pos[p] < len(vals) and (ctx.get(port.valid) or rng.random() < 0.7):
                    ctx.set(port.valid, 1)
                    ctx.set(port.payload.as_value(), vals[pos[p]])
                else:
                    ctx.set(port.valid, 0)
            for p in outs:
                port = getattr(unit, p)
                seen = []
                for r in (0, 1):
                    ctx.set(port.ready, r)
                    seen.append((ctx.get(port.valid), ctx.get(port.payload.as_value()) if ctx.get(port.valid) else 0))
                if seen[0] != seen[1]:
                    problems.append((cyc, p, seen))
                ctx.set(port.ready, int(rng.random() < 0.7))
            fired = {p: ctx.get(getattr(unit, p).valid) and ctx.get(getattr(unit, p).ready) for p in inputs}
            await ctx.tick()
            for p, f in fired.items():
                pos[p] += bool(f)
        # every input token was consumed: the scenario really ran
        assert all(pos[p] == len(v) for p, v in inputs.items()), pos

    sim.add_testbench(tb)
    sim.run()
    assert not problems, problems[:5]


@pytest.mark.parametrize("unit_name", ["promote", "repeat", "reshape-pad", "reshape1", "expand", "zip"])
def test_valid_does_not_depend_on_ready(unit_name):
    """Amaranth only: a structural property of the RTL, checked with random traffic."""
    pack = lambda u, port, tokens: u.fmt(port).pack_all(tokens)     # noqa: E731
    _, t2 = _random_tokens(14, 2, fixed={2: 3, 1: 4})
    st2 = _shape(2, {2: 3, 1: 4})
    if unit_name == "promote":
        u = Promote(P)
        ins, cfg = {"i": pack(u, "i", t2)}, u.configure({}, {"in": st2})
    elif unit_name == "repeat":
        u = RepeatStatic(RepeatParams(rows=1, cols=1, dtype="int32", max_rank=3, count_bits=4))
        ins, cfg = {"i": pack(u, "i", t2)}, u.configure(dict(count=2), {"in": st2})
    elif unit_name == "reshape-pad":
        u = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4, pad=True))
        ins, cfg = {"i": pack(u, "i", t2)}, u.configure(dict(rank=0, chunk=3, pad=1), {"in": st2})
    elif unit_name == "reshape1":
        u = Reshape(ReshapeParams(rows=1, cols=1, dtype="int32", max_rank=3, chunk_bits=4))
        ins, cfg = {"i": pack(u, "i", t2)}, u.configure(dict(rank=1, chunk=2), {"in": st2})
    elif unit_name == "expand":
        u = Expand(ExpandParams(rows=1, cols=1, dtype="int32", max_rank=3))
        it = toks("1 S1 2 S1 3 S1 D")
        rt = toks("0 0 S1 S1 0 0 0 S1 D")
        ins, cfg = {"i": pack(u, "i", it), "i_ref": pack(u, "i_ref", rt)}, u.configure(
            dict(rank=1), {"in": ints(3, 1), "ref": ints(3, L)})
    else:
        u = Zip(ZipParams(rows0=1, cols0=1, dtype0="int32", rows1=1, cols1=1, dtype1="int32"))
        ins, cfg = {"i0": pack(u, "i0", t2), "i1": pack(u, "i1", t2)}, u.configure({}, {"in0": st2, "in1": st2})
    _valid_ignores_ready(u, ins, cfg)
