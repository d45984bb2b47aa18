"""Routing units (Partition, Reassemble, EagerMerge) against the interpreter, under random stalls."""

import gc
import random

import pytest

from step_hdl.interp import run_operator
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.stalls import Stalls
from step_hdl.sim.streams import Scenario, SimTimeout, write_config
from step_hdl.token import DONE as DONE_TOKEN, data, encode, format_tokens, stop
from step_hdl.types import Ragged
from step_hdl.units.params import ParamError, StreamParams
from step_hdl.units.routing import EagerMerge, Partition, Reassemble, RoutingParams

from helpers import ints, sels, text, toks
from hw.harness import SEEDS, check_unit
from step_hdl.units.base import not_elaborated

# The Amaranth stream senders of the shared harness wait with ``ctx.tick().until(ready)``; a sender
# still waiting when the run ends (Partition's selector drain, or a transfer in the same cycle as the
# last output's done) is closed by the garbage collector with "aclose(): asynchronous generator is
# already running". That is the harness's test-bench teardown, not a unit failure: ignore it here and
# collect garbage after every test so the warning cannot surface in another module's test.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <coroutine object (send|run_amaranth\.<locals>\.make_sender)"
    r":pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def _collect_senders():
    yield
    gc.collect()


L = Ragged("L", integer=True, nonnegative=True)
P3 = RoutingParams(rows=1, cols=1, dtype="int32", max_rank=3, n=3)


# --------------------------------------------------------------------------- Partition

@pytest.mark.parametrize("p, st, text_in, sel_st, text_sel", [
    # rank 0: one-hot, multi-hot (3 = outputs 0 and 1), zero (dropped) and all-hot selectors
    (0, ints(L), "1 2 3 4 5 6 D", sels(3, L), "1 3 0 4 7 2 D"),
    # rank 0 on a rank-1 input: its stops are dropped; selector stops are skipped; leftover
    # selectors (5 S1 1) are drained after the input's done
    (0, ints(2, L), "1 2 S1 S1 3 S1 D", sels(3, 2, L), "6 0 S1 7 5 S1 1 S1 D"),
    # rank 1 on a ragged rank-2 input: empty chunks, S2 closing a chunk becomes S1
    (1, ints(2, L, L), "1 2 S1 S1 3 S2 4 S1 5 6 S2 S1 S2 D", sels(3, L), "1 3 6 0 7 2 5 4 D"),
    # rank 2 on a rank-3 input: inner S1 stops pass, S3 becomes S2, empty vectors and matrices
    (2, ints(2, 2, L, L), "1 S1 2 3 S2 S1 4 S3 S2 5 S1 S1 S3 D", sels(3, L), "5 2 0 3 D"),
    # rank 1 == input rank: the whole-stream chunks close with S1
    (1, ints(L, L), "1 S1 2 3 S1 S1 4 5 6 S1 D", sels(3, L), "4 1 2 7 D"),
])
def test_partition(sim_backend, p, st, text_in, sel_st, text_sel):
    check_unit(Partition(P3), "Partition", {"in": (st, toks(text_in)), "sel": (sel_st, toks(text_sel, sel=True))},
               dict(n=3, rank=p), backend=sim_backend)


def test_partition_single_output_and_empty(sim_backend):
    unit = Partition(RoutingParams(rows=1, cols=1, dtype="int32", max_rank=2, n=1))
    check_unit(unit, "Partition", {"in": (ints(L, L), toks("S1 1 2 S1 S1 3 S1 D")),
                                   "sel": (sels(1, L), toks("1 0 1 1 D", sel=True))},
               dict(n=1, rank=1), backend=sim_backend)
    # an empty input stream: done on every output at once, every selector drained
    check_unit(Partition(P3), "Partition", {"in": (ints(L), toks("D")), "sel": (sels(3, L), toks("D", sel=True))},
               dict(n=3, rank=0), backend=sim_backend)


def test_partition_wide_tile(sim_backend):
    """A 2x2 int16 tile: payloads travel whole."""
    import numpy as np
    from step_hdl.token import DONE, data, stop
    from helpers import tiles
    unit = Partition(RoutingParams(rows=2, cols=2, dtype="int16", max_rank=2, n=2))
    rng = np.random.default_rng(3)
    t = lambda: data(rng.integers(-300, 300, (2, 2)).astype(np.int16))   # noqa: E731
    tokens = [t(), t(), stop(1), stop(2), t(), stop(1), t(), t(), t(), stop(2), DONE]
    check_unit(unit, "Partition", {"in": (tiles(2, 2, 2, L, L, dt="int16"), tokens),
                                   "sel": (sels(2, L), toks("3 1 2 0 3 D", sel=True))},
               dict(n=2, rank=1), backend=sim_backend)


def run_bench(unit, config, inputs, outputs, seed=0, max_cycles=3000):
    """A custom Amaranth bench: send packed ``inputs`` (every token must be taken) and collect each output
    port's tokens until it has seen ``dones`` done tokens; ``outputs`` maps port -> (dones, policy), where
    ``policy(got)`` says whether the port may be ready this cycle (on top of random drops).
    Used where the shared harness cannot look: tokens left after the outputs' done, several programs
    back to back, a consumer whose ready depends on another port.
    """
    from amaranth.sim import Simulator
    got = {name: [] for name in outputs}
    sent = {}

    def sender(name, k):
        async def tb(ctx):
            await write_config(ctx, unit.cfg, config)
            port, stalls = getattr(unit, name), Stalls(seed * 100 + k, 0.3)
            for v in inputs[name]:
                while stalls():
                    await ctx.tick()
                ctx.set(port.valid, 1)
                ctx.set(port.payload.as_value(), v)
                while not (await ctx.tick().sample(port.ready))[-1]:
                    pass
                ctx.set(port.valid, 0)
            sent[name] = True
        return tb

    def receiver(name, k):
        dones, policy = outputs[name]

        async def tb(ctx):
            port, stalls, fmt = getattr(unit, name), Stalls(seed * 100 + 50 + k, 0.3), unit.fmt(name)
            while sum(t.done for t in got[name]) < dones:
                ctx.set(port.ready, 0 if stalls() or not policy(got) else 1)
                _, _, valid, ready, value = await ctx.tick().sample(port.valid, port.ready, port.payload.as_value())
                if valid and ready:
                    got[name].append(fmt.unpack(value))
            ctx.set(port.ready, 0)
        return tb

    async def limit(ctx):
        for _ in range(max_cycles):
            await ctx.tick()
        raise SimTimeout(f"{type(unit).__name__}: no progress after {max_cycles} cycles: sent {sorted(sent)}, "
                         f"received { {k: format_tokens(v, 30) for k, v in got.items()} }")

    sim = Simulator(unit)
    sim.add_clock(1e-8)
    for k, name in enumerate(inputs):
        sim.add_testbench(sender(name, k))
    for k, name in enumerate(outputs):
        sim.add_testbench(receiver(name, k))
    sim.add_testbench(limit, background=True)
    sim.run()
    assert sorted(sent) == sorted(inputs), f"inputs not fully taken: sent {sorted(sent)}"
    return got


def test_partition_drains_selectors():
    """After ``in`` ends, the leftover selectors (with their stops) are drained up to their done, and the
    unit is ready for the next program: two programs back to back, every input token consumed."""
    unit = Partition(RoutingParams(rows=1, cols=1, dtype="int32", max_rank=3, n=2))
    programs = [("1 2 S1 3 S1 D", "1 3 S1 2 0 S1 1 2 S1 D"), ("4 S1 D", "2 S1 D"), ("D", "1 S1 D")]
    ops = dict(n=2, rank=0)
    config = unit.configure(ops, {"in": ints(2, L), "sel": sels(2, 2, L)})
    want = {"o0": [], "o1": []}
    streams = {"i": [], "i_sel": []}
    for t_in, t_sel in programs:
        exp = run_operator("Partition", {"in": (ints(2, L), toks(t_in)), "sel": (sels(2, 2, L), toks(t_sel, sel=True))},
                           **ops)
        for k in range(2):
            want[f"o{k}"] += exp[f"out{k}"]
        streams["i"] += unit.fmt("i").pack_all(toks(t_in))
        streams["i_sel"] += unit.fmt("i_sel").pack_all(toks(t_sel, sel=True))
    for seed in SEEDS:
        got = run_bench(unit, config, streams, {k: (len(programs), lambda g: True) for k in want}, seed=seed)
        assert got == want, f"seed {seed}"


# --------------------------------------------------------------------------- Reassemble

@pytest.mark.parametrize("p, sel_st, text_sel, text_ins", [
    # rank 0, rank-0 selector (eager block ends): one-hot, multi-hot, zero and all-hot selectors
    (0, sels(3, L), "1 6 7 0 2 D", ("1 2 D", "3 4 5 D", "6 7 D")),
    # rank 0, rank-1 selector: selector stops S1 become S2; empty selector runs
    (0, sels(3, 2, L), "1 3 S1 S1 6 0 S1 D", ("1 2 D", "3 5 D", "4 D")),
    # rank 1, rank-1 selector: S1 -> S3; empty chunks; an input never selected
    (1, sels(3, 2, L), "1 3 S1 0 S1 S1 2 S1 D", ("1 S1 2 3 S1 D", "S1 4 S1 D", "D")),
    # rank 1, rank-1 selector: empty chunks first, in the middle and last of multi-hot elements
    (1, sels(3, 2, L), "7 7 S1 5 S1 D", ("S1 1 S1 S1 D", "S1 S1 D", "2 S1 S1 3 S1 D")),
    # rank 1, rank-0 selector: elements of empty chunks only
    (1, sels(3, L), "7 0 7 D", ("S1 S1 D", "S1 S1 D", "S1 4 S1 D")),
    # rank 1, rank-0 selector: eager S2 after every element
    (1, sels(3, L), "5 0 7 2 D", ("1 2 S1 S1 D", "3 S1 S1 D", "4 S1 5 6 S1 D")),
    # rank 2 (inner S1 stops pass), rank-0 selector: output rank 3
    (2, sels(3, L), "3 4 7 D", ("1 S1 2 S2 S2 D", "3 S1 S1 S2 4 S2 D", "5 6 S2 S1 S2 D")),
    # rank 0, rank-2 selector: S1 -> S2, S2 -> S3, ragged and empty runs
    (0, sels(3, 2, L, L), "1 S1 6 S2 S2 0 7 S1 S2 D", ("1 2 D", "3 4 D", "5 6 D")),
])
def test_reassemble(sim_backend, p, sel_st, text_sel, text_ins):
    inputs = {f"in{k}": (ints(*([L] * (p + 1))), toks(t)) for k, t in enumerate(text_ins)}
    inputs["sel"] = (sel_st, toks(text_sel, sel=True))
    check_unit(Reassemble(P3), "Reassemble", inputs, dict(n=3, rank=p), backend=sim_backend)


def test_partition_reassemble_round_trip():
    """Reassemble(Partition(x)) with the same one-hot selectors gives x back (interpreter check of the data)."""
    sel = toks("1 2 4 2 1 D", sel=True)
    x = toks("1 2 S1 S1 3 S1 4 S1 5 6 7 S1 D")
    parts = run_operator("Partition", {"in": (ints(L, L), x), "sel": (sels(3, L), sel)}, n=3, rank=1)
    back = run_operator("Reassemble", {**{f"in{k}": (ints(L, L), parts[f"out{k}"]) for k in range(3)},
                                       "sel": (sels(3, L), sel)}, n=3, rank=1, k=1)
    assert text(back["out"]) == "1 2 S2 S2 3 S2 4 S2 5 6 7 S2 D"


# --------------------------------------------------------------------------- EagerMerge

def _chunks(tokens, p):
    """Split a merged stream (ending with done) into rank-p chunks."""
    assert tokens and tokens[-1].done, f"missing done: {format_tokens(tokens, 40)}"
    out, cur = [], []
    for t in tokens[:-1]:
        assert not t.done
        cur.append(t)
        if (p == 0 and t.stop == 0) or (p > 0 and t.stop >= p):
            assert p == 0 or t.stop == p, f"closing stop S{t.stop} is not S{p}"
            out.append(cur)
            cur = []
    assert not cur, f"unfinished chunk {format_tokens(cur, 40)}"
    return out


def _by_input(chunks, sel_tokens, n):
    assert sel_tokens and sel_tokens[-1].done
    sel = sel_tokens[:-1]
    assert all(t.is_data for t in sel), "o_sel carries only data tokens before done"
    assert len(sel) == len(chunks), f"{len(chunks)} chunks but {len(sel)} o_sel tokens"
    per = {k: [] for k in range(n)}
    for c, s in zip(chunks, sel):
        assert s.payload in [1 << k for k in range(n)], f"o_sel token {s.payload:#x} is not one-hot"
        per[s.payload.bit_length() - 1].append(c)
    return per


def check_eager_merge(unit, n, p, inputs, backend, seeds=SEEDS, p_gap=0.3, p_drop=0.3):
    """The merge order depends on timing: check the chunks per input instead of the exact order.

    Every output chunk is whole (ends with S_p, or is one data token for p = 0),
    ``o_sel`` names its input, each input's chunks come out in order and the
    multiset of chunks equals the interpreter's.
    """
    ops = dict(n=n, rank=p)
    want = run_operator("EagerMerge", inputs, **ops)
    want_per = _by_input(_chunks(want["out"], p), want["sel"], n)
    config = unit.configure(ops, {port: st for port, (st, _) in inputs.items()})
    packed = {f"i{port[2:]}": unit.fmt(f"i{port[2:]}").pack_all(tk) for port, (_, tk) in inputs.items()}
    fo, fs = unit.fmt("o"), unit.fmt("o_sel")
    outs = {"o": fo.done_bit, "o_sel": fs.done_bit}
    orders = set()
    for seed in seeds:
        got, _ = run_scenario(unit, Scenario(packed, outs, config, seed=seed, p_gap=p_gap, p_drop=p_drop),
                              backend, "eagermerge_dut")
        out, sel = fo.unpack_all(got["o"]), fs.unpack_all(got["o_sel"])
        ctx = f"(seed {seed}, {backend})\n  got o     {format_tokens(out, 60)}\n  got o_sel {format_tokens(sel, 60)}"
        try:
            got_per = _by_input(_chunks(out, p), sel, n)
        except AssertionError as exc:
            raise AssertionError(f"{exc} {ctx}") from None
        for k in range(n):
            if got_per[k] != want_per[k]:
                raise AssertionError(f"EagerMerge input {k}: chunks differ {ctx}\n"
                                     f"  want {[format_tokens(c, 20) for c in want_per[k]]}")
        orders.add(tuple(s.payload for s in sel[:-1]))
    return orders


@pytest.mark.parametrize("p, shapes, texts", [
    # rank 0 on rank-0 inputs, one of them empty
    (0, [(L,), (L,), (L,)], ("1 2 3 4 D", "10 11 D", "D")),
    # rank 0 on rank-1 inputs: their stop tokens are skipped
    (0, [(2, L), (2, L), (2, L)], ("1 2 S1 S1 3 S1 D", "S1 4 S1 D", "5 S1 6 7 8 S1 D")),
    # rank 1: ragged, empty chunks, S2 closing a chunk becomes S1, inputs of different ranks
    (1, [(2, L, L), (L, L), (L, L)], ("1 2 S1 S1 S2 3 S1 4 S2 D", "5 S1 6 7 S1 D", "S1 8 S1 S1 D")),
    # rank 2 with inner S1 stops; an input that is done at once
    (2, [(2, L, L), (L, L, L), (L, L, L)], ("1 S1 2 S2 S1 S2 D", "D", "3 4 S1 S1 5 S2 S2 D")),
])
def test_eager_merge(sim_backend, p, shapes, texts):
    inputs = {f"in{k}": (ints(*s), toks(t)) for k, (s, t) in enumerate(zip(shapes, texts))}
    check_eager_merge(EagerMerge(P3), 3, p, inputs, sim_backend)


def test_eager_merge_arbitration(sim_backend):
    """Busy inputs: chunks of several inputs compete. With heavy gaps the order varies between seeds."""
    n, p = 3, 1
    texts = ["1 2 S1 3 S1 S1 4 5 6 S1 D", "7 S1 8 9 S1 10 S1 D", "11 12 13 S1 S1 14 S1 D"]
    inputs = {f"in{k}": (ints(L, L), toks(t)) for k, t in enumerate(texts)}
    orders = check_eager_merge(EagerMerge(P3), n, p, inputs, sim_backend, seeds=(0, 1, 2, 3), p_gap=0.6)
    assert len(orders) > 1, "the merge order should depend on arrival timing"
    # no stalls: every input is valid from the first cycle, so the lowest index wins each time
    only = check_eager_merge(EagerMerge(P3), n, p, inputs, sim_backend, seeds=(0,), p_gap=0.0, p_drop=0.0)
    assert only == {(1, 1, 1, 1, 2, 2, 2, 4, 4, 4)}


def test_eager_merge_selector_after_chunk():
    """A consumer that takes each selector only after the whole chunk (as Reassemble does) does not
    deadlock: o_sel's skid register lets the chunk through. Two programs back to back."""
    unit = EagerMerge(RoutingParams(rows=1, cols=1, dtype="int32", max_rank=2, n=2))
    p, progs = 1, [("1 2 S1 3 S1 D", "4 5 6 S1 S1 D"), ("D", "7 S1 D")]
    config = unit.configure(dict(n=2, rank=p), {"in0": ints(L, L), "in1": ints(L, L)})
    streams = {"i0": [], "i1": []}
    for a, b in progs:
        streams["i0"] += unit.fmt("i0").pack_all(toks(a))
        streams["i1"] += unit.fmt("i1").pack_all(toks(b))
    closed = lambda g: sum(1 for t in g["o"] if t.stop == p)   # noqa: E731
    after_chunk = lambda g: closed(g) > sum(1 for t in g["o_sel"] if t.is_data) or g["o"][-1:] == [DONE_TOKEN]  # noqa: E731
    for seed in SEEDS:
        got = run_bench(unit, config, streams, {"o": (2, lambda g: True), "o_sel": (2, after_chunk)}, seed=seed)
        first = got["o"].index(DONE_TOKEN) + 1
        for lo, hi, (a, b) in ((0, first, progs[0]), (first, len(got["o"]), progs[1])):
            want = run_operator("EagerMerge", {"in0": (ints(L, L), toks(a)), "in1": (ints(L, L), toks(b))}, n=2, rank=p)
            sfirst = got["o_sel"].index(DONE_TOKEN) + 1
            sel = got["o_sel"][:sfirst] if lo == 0 else got["o_sel"][sfirst:]
            per_got = _by_input(_chunks(got["o"][lo:hi], p), sel, 2)
            assert per_got == _by_input(_chunks(want["out"], p), want["sel"], 2), f"seed {seed}"


# --------------------------------------------------------------------------- random streams

def _nested(rng, rank, top=None):
    """A random ragged nested stream value (empty runs included) of [1, 1] int32 payloads."""
    import numpy as np
    size = rng.randint(0, 3) if top is None else top
    if rank == 0:
        return [np.array([[rng.randint(-99, 99)]], dtype=np.int32) for _ in range(size)]
    return [_nested(rng, rank - 1) for _ in range(size)]


def _sel_tokens(rng, masks, rank):
    """Selector tokens for ``masks`` with random stops S1..S_rank between them, closed by S_rank."""
    out = []
    for m_ in masks:
        out.append(data(m_))
        if rank and rng.random() < 0.4:
            out.append(stop(rng.randint(1, rank)))
    if rank:
        out.append(stop(rank))
    return out + [encode([], 0)[-1]]


def _n_chunks(tokens, p):
    return sum(1 for t in tokens if not t.done and ((p == 0 and t.stop == 0) or (p > 0 and t.stop >= p)))


@pytest.mark.parametrize("trial", range(3))
def test_partition_random(sim_backend, trial):
    rng = random.Random(100 + trial)
    r = rng.randint(0, 2)
    p = rng.randint(0, r)
    x = encode(_nested(rng, r, rng.randint(1, 4)), r)
    sel_rank = rng.randint(0, 1)
    masks = [rng.randrange(8) for _ in range(_n_chunks(x, p) + rng.randint(0, 2))]
    check_unit(Partition(P3), "Partition", {"in": (ints(*([L] * (r + 1))), x),
                                            "sel": (sels(3, *([L] * (sel_rank + 1))), _sel_tokens(rng, masks, sel_rank))},
               dict(n=3, rank=p), backend=sim_backend)


@pytest.mark.parametrize("trial", range(3))
def test_reassemble_random(sim_backend, trial):
    rng = random.Random(200 + trial)
    p = rng.randint(0, 2)
    sel_rank = rng.randint(0, 2 - p)
    masks = [rng.randrange(8) for _ in range(rng.randint(1, 6))]
    inputs = {f"in{k}": (ints(*([L] * (p + 1))), encode(_nested(rng, p, sum(m_ >> k & 1 for m_ in masks)), p))
              for k in range(3)}
    inputs["sel"] = (sels(3, *([L] * (sel_rank + 1))), _sel_tokens(rng, masks, sel_rank))
    check_unit(Reassemble(P3), "Reassemble", inputs, dict(n=3, rank=p), backend=sim_backend)


@pytest.mark.parametrize("trial", range(3))
def test_eager_merge_random(sim_backend, trial):
    rng = random.Random(300 + trial)
    p = rng.randint(0, 2)
    inputs = {}
    for k in range(3):
        r = rng.randint(p, min(p + 1, 3))
        inputs[f"in{k}"] = (ints(*([L] * (r + 1))), encode(_nested(rng, r, rng.randint(0, 4)), r))
    check_eager_merge(EagerMerge(P3), 3, p, inputs, sim_backend)


# --------------------------------------------------------------------------- parameters

def test_bad_parameters():
    with pytest.raises(ParamError, match=r"RoutingParams: n must be an integer >= 1, got 0"):
        RoutingParams(n=0)
    with pytest.raises(ParamError, match=r"RoutingParams: n = 65 routed streams exceeds the maximum 64"):
        RoutingParams(n=65)
    with pytest.raises(ParamError, match=r"RoutingParams: n must be an integer >= 1, got True"):
        RoutingParams(n=True)
    with pytest.raises(ParamError, match=r"RoutingParams: rows must be an integer >= 1"):
        RoutingParams(rows=0)
    with pytest.raises(ParamError, match=r"RoutingParams: max_rank must be an integer >= 0, got -1"):
        RoutingParams(max_rank=-1)
    with pytest.raises(ParamError, match=r"RoutingParams: unsupported element type 'int7'"):
        RoutingParams(dtype="int7")
    with pytest.raises(ParamError, match=r"Partition: parameters must be RoutingParams"):
        Partition(StreamParams())
    with pytest.raises(ParamError, match=r"Reassemble: max_rank must be >= 1 \(the output adds a dimension\), got 0"):
        Reassemble(RoutingParams(max_rank=0))


def test_bad_configuration():
    part, reas, merge = Partition(P3), Reassemble(P3), EagerMerge(P3)
    for u in (part, reas, merge):
        not_elaborated(u)  # built only to be configured
    with pytest.raises(ParamError, match=r"Partition: the node routes n=2 streams but the unit was built for n=3"):
        part.configure(dict(n=2, rank=0), {"in": ints(L), "sel": sels(2, L)})
    with pytest.raises(ParamError, match=r"Partition: rank must be an integer in 0..max_rank=3, got 4"):
        part.configure(dict(n=3, rank=4), {})
    with pytest.raises(ParamError, match=r"Partition: rank 2 > the rank 1 of input 'in'"):
        part.configure(dict(n=3, rank=2), {"in": ints(L, L), "sel": sels(3, L)})
    with pytest.raises(ParamError, match=r"Partition: input 'in' carries .*int16.*, but the unit was built for"):
        from helpers import tiles
        part.configure(dict(n=3, rank=0), {"in": tiles(1, 1, L, dt="int16"), "sel": sels(3, L)})
    with pytest.raises(ParamError, match=r"Partition: input 'sel' carries"):
        part.configure(dict(n=3, rank=0), {"in": ints(L), "sel": sels(4, L)})
    with pytest.raises(ParamError, match=r"Reassemble: output rank 4 \(selector rank 2 \+ rank 1 \+ 1\) "
                                         r"exceeds max_rank 3"):
        reas.configure(dict(n=3, rank=1), {**{f"in{k}": ints(L, L) for k in range(3)}, "sel": sels(3, 2, L, L)})
    with pytest.raises(ParamError, match=r"Reassemble: input 'in1' has rank 0, expected rank 1"):
        reas.configure(dict(n=3, rank=1), {"in0": ints(L, L), "in1": ints(L), "in2": ints(L, L), "sel": sels(3, L)})
    with pytest.raises(ParamError, match=r"EagerMerge: rank 1 > the rank 0 of input 'in2'"):
        merge.configure(dict(n=3, rank=1), {"in0": ints(L, L), "in1": ints(L, L), "in2": ints(L)})
    with pytest.raises(ParamError, match=r"EagerMerge: input 'in0' has rank 4 > max_rank 3"):
        merge.configure(dict(n=3, rank=0), {"in0": ints(2, 2, 2, 2, L)})


# --------------------------------------------------------------------------- SelIndex, KeepIfZero

def test_sel_index(sim_backend):
    """A Map of sel_index: the lowest set bit's index, -1 for an empty selector; stops pass through."""
    from step_hdl.functions import fn
    from step_hdl.units.routing import SelIndex, SelIndexParams
    check_unit(SelIndex(SelIndexParams(n=3, max_rank=3)), "Map",
               {"in0": (sels(3, 2, L), toks("1 2 S1 4 6 0 S1 7 5 S1 D", sel=True))},
               dict(fn=fn("sel_index")), backend=sim_backend)


def test_sel_index_rejects_other_functions():
    from step_hdl.functions import fn
    from step_hdl.units.routing import SelIndex, SelIndexParams
    unit = SelIndex(SelIndexParams(n=2))
    not_elaborated(unit)  # configured, never elaborated
    with pytest.raises(ParamError, match="runs the function sel_index, the node uses"):
        unit.configure({"fn": fn("affine")}, {})
    with pytest.raises(ParamError, match="parameters must be SelIndexParams"):
        SelIndex(RoutingParams(rows=1, cols=1, dtype="int32", max_rank=3, n=2))


def test_keep_if_zero(sim_backend):
    """A Map of keep_if_zero: padding flags (0 = real, nonzero = padded) -> 1-way selectors."""
    from step_hdl.functions import fn
    from step_hdl.units.routing import KeepIfZero, SelIndexParams
    check_unit(KeepIfZero(SelIndexParams(n=1, max_rank=3)), "Map",
               {"in0": (ints(2, L), toks("0 0 S1 0 4 -1 S1 3 S1 D"))},
               dict(fn=fn("keep_if_zero")), backend=sim_backend)
