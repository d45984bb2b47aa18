"""Memory units against the interpreter: off-chip loads and stores through the memory port with a
test memory (random latency), on-chip buffer; random valid gaps and ready drops; any --sim back-end."""

import itertools
import random

import numpy as np
import pytest

from step_hdl import Graph, dyn
from step_hdl.interp import run, run_operator
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.token import data, encode, format_tokens
from step_hdl.types import Ragged
from step_hdl.units.base import lang_port, not_elaborated
from step_hdl.units.layout import tile_format
from step_hdl.units.offchip import (LinearLoadParams, LinearOffChipLoad, LinearOffChipStore, OffChipParams,
                                    RandomOffChipLoad, RandomOffChipStore)
from step_hdl.units.onchip import OnChipBuffer, OnChipBufferParams
from step_hdl.units.memport import (MemoryHarness, MemPortShape, SimMemory, memory_image, pack_tensor,
                                    read_tensor, sim_ctl_word, unpack_tensor)
from step_hdl.units.params import ParamError

from helpers import buffer_reference, ints, tiles, toks

SEEDS = (0, 1, 2)
L = Ragged("L", integer=True, nonnegative=True)
TILE = tile_format("int16", 2, 2)
#: memory latency and jitter (sixteenths of a cycle's hold probability) per seed
MEM_TIMING = {0: (1, 0), 1: (3, 6), 2: (6, 10)}

# one memory image for every test (one Verilator build per unit): A [8, 8] at 0, B [4, 8] at 128,
# C [8, 8] (zeros, store target) at 192
_rng = np.random.default_rng(11)
TENSORS = {"A": _rng.integers(-1000, 1000, (8, 8)).astype(np.int16),
           "B": _rng.integers(-1000, 1000, (4, 8)).astype(np.int16),
           "C": np.zeros((8, 8), np.int16)}
DEPTH = 40
IMAGE, ADDR = memory_image(TENSORS, TILE, DEPTH)
DECLARE = {name: (a.shape[0], a.shape[1], "int16") for name, a in TENSORS.items()}


def offchip(**kw):
    return dict(rows=2, cols=2, dtype="int16", max_rank=3, **kw)


def check_mem_unit(unit, kind, inputs, op_params, backend, name, store=False, seeds=SEEDS):
    """Run ``unit`` + a test memory holding IMAGE for each seed (stalls and memory latency from the
    seed); compare every output stream with the interpreter and, for stores, the memory contents."""
    tensor = op_params["tensor"]
    expected = run_operator(kind, inputs, tensors=TENSORS, declare=DECLARE, **op_params)
    config = unit.configure(op_params, {p: st for p, (st, _) in inputs.items()}, tensor_addr=ADDR[tensor])
    packed = unit.pack_inputs(inputs)
    outs = unit.output_done_bits()
    mem = SimMemory(unit.params.port, DEPTH, IMAGE, max_inflight=4)
    top = MemoryHarness(unit, mem, dump_words=DEPTH if store else 0, dump_format=TILE)
    if store:
        outs["o_mem"] = top.dump_format.done_bit
    cycles = []
    for seed in seeds:
        lat, jit = MEM_TIMING[seed]
        sc = Scenario(packed, outs, [sim_ctl_word(lat, jit, seed)] + config, seed=seed)
        got, n = run_scenario(top, sc, backend, name)
        cycles.append(n)
        for hp in outs:
            if hp == "o_mem":
                words = [t.payload for t in top.dump_format.unpack_all(got[hp])[:-1]]
                want_image, _ = memory_image({k: expected["_memory"][k] for k in TENSORS}, TILE, DEPTH)
                assert len(words) == DEPTH
                if [TILE.pack(w) for w in words] != want_image:
                    got_c = unpack_tensor([TILE.pack(w) for w in words][ADDR[tensor] // 8:], *TENSORS[tensor].shape,
                                          TILE)
                    raise AssertionError(f"{kind} memory (seed {seed}, {backend}):\n got {tensor}\n{got_c}\n"
                                         f" want\n{expected['_memory'][tensor]}")
                continue
            want = expected[lang_port(hp)]
            tokens = unit.fmt(hp).unpack_all(got[hp])
            if tokens != want:
                raise AssertionError(f"{kind} port {hp} (seed {seed}, {backend}):\n"
                                     f"  got  {format_tokens(tokens, 60)}\n  want {format_tokens(want, 60)}")
    return cycles


# ----------------------------------------------------------------------------- layout helpers

def test_layout_round_trip():
    a = TENSORS["A"]
    words = pack_tensor(a, TILE)
    assert len(words) == 16
    assert np.array_equal(unpack_tensor(words, 8, 8, TILE), a)
    # tile index 5 = grid row 1, column 1; element (1, 0) of the tile is element 2 (bits 32..47)
    assert TILE.unpack(words[5])[1, 0] == a[3, 2]
    assert (words[5] >> 32) & 0xFFFF == int(a[3, 2]) & 0xFFFF
    assert np.array_equal(read_tensor(IMAGE, ADDR["B"], 4, 8, TILE), TENSORS["B"])
    assert ADDR == {"A": 0, "B": 128, "C": 192}


# ----------------------------------------------------------------------------- LinearOffChipLoad

LOAD_CASES = [
    ("A", [4, 4], [4, 1], 0),                 # the whole tensor
    ("A", [2, 3], [0, 1], 5),                 # stride 0 re-reads
    ("A", [2, 2, 2], [8, 1, 4], 1),           # several stop levels
    ("A", [2, 2, 2, 2], [8, 4, 2, 1], 0),     # four dimensions
    ("A", [5], [-3], 15),                     # negative stride
    ("B", [2, 4], [4, 1], 0),                 # tensor at a non-zero address
    ("A", [2, 0, 3], [1, 1, 1], 0),           # empty middle dimension
    ("A", [3, 0], [1, 1], 0),                 # empty innermost dimension
    ("A", [0, 3], [1, 1], 0),                 # empty outermost dimension
    ("A", [2, 2, 0], [4, 1, 1], 0),
]


@pytest.mark.parametrize("burst", [0, 32], ids=["tiles", "bursts"])
@pytest.mark.parametrize("tensor, out_shape, stride, base", LOAD_CASES)
def test_linear_load(sim_backend, tensor, out_shape, stride, base, burst):
    """Also with bursts of up to four 8-byte tiles per 32-byte block (the consecutive tiles of an innermost run
    that steps by one tile: the whole tensor, the negative stride's single tiles, the re-reads)."""
    unit = LinearOffChipLoad(LinearLoadParams(**offchip(burst_bytes=burst)))
    op = dict(tensor=tensor, tile=[2, 2], out_shape=out_shape, stride=stride, base=base)
    check_mem_unit(unit, "LinearOffChipLoad", {}, op, sim_backend, f"lload_{burst}")


LOAD_REF_CASES = [
    (ints(3), "7 8 9 D", [2], [4, 1]),                                  # rank-0 ref: eager block ends
    (ints(3, L), "1 2 S1 S1 3 S1 D", [2], [4, 2, 1]),                   # ragged ref with an empty run
    (ints(2, 3), "1 2 3 S1 4 5 6 S1 D", [], [4, 1]),                    # no out_shape: one tile per element
    (ints(3), "1 2 3 D", [2, 0], [1, 1, 1]),                            # empty inner dim, eager
    (ints(2), "1 2 D", [0, 2], [1, 1, 1]),                              # empty outer dim, eager
    (ints(2, L), "1 S1 2 3 S1 D", [0], [4, 1, 1]),                      # empty out dim under a ref
    (ints(2, 2, L), "1 S1 2 3 S2 S1 4 S2 D", [2], [8, 4, 2, 1]),        # several ref stop levels
    (ints(2, L), "1 2 S1 3 S1 D", [2, 2], [5, 1, 2, 1]),                # ref rank 1 + two out dims
]


@pytest.mark.parametrize("burst", [0, 32], ids=["tiles", "bursts"])
@pytest.mark.parametrize("ref_t, ref_text, out_shape, stride", LOAD_REF_CASES)
def test_linear_load_ref(sim_backend, ref_t, ref_text, out_shape, stride, burst):
    unit = LinearOffChipLoad(LinearLoadParams(**offchip(ref=True, burst_bytes=burst)))
    op = dict(tensor="A", tile=[2, 2], out_shape=out_shape, stride=stride, base=0)
    check_mem_unit(unit, "LinearOffChipLoad", {"ref": (ref_t, toks(ref_text))}, op, sim_backend,
                   f"lload_ref_{burst}")


def _nested(rng, levels, outer=None, leaf=lambda: 1):
    """Random nested lists: ``levels`` levels, sizes 0..3 (the outermost ``outer`` if given)."""
    n = rng.randint(0, 3) if outer is None else outer
    if levels == 1:
        return [leaf() for _ in range(n)]
    return [_nested(rng, levels - 1, leaf=leaf) for _ in range(n)]


def _index_tuples(nested, levels):
    """Multi-indices of a nested list's leaves (ragged) plus the index tuples where it is empty."""
    if levels == 0:
        return [()]
    out = []
    for k, item in enumerate(nested):
        out += [(k,) + t for t in _index_tuples(item, levels - 1)]
    return out


def random_load_case(k):
    """A random load: 0..2 ref dims (ragged), out dims of size 0..3, strides keeping indices in A."""
    rng = random.Random(1000 + k)
    while True:
        n_ref = k % 3
        n_out = rng.randint(0 if n_ref else 1, 3 if n_ref < 2 else 2)
        out_shape = [rng.choice([0, 1, 2, 2, 3]) for _ in range(n_out)]
        ref = _nested(rng, n_ref, outer=rng.randint(1, 4)) if n_ref else None
        stride = [rng.randint(-2, 4) for _ in range(n_ref + n_out)]
        ref_idx = _index_tuples(ref, n_ref) if n_ref else [()]
        out_idx = list(itertools.product(*[range(d) for d in out_shape]))
        idx = [sum(i * s for i, s in zip(r + o, stride)) for r in ref_idx for o in out_idx] or [0]
        if max(idx) - min(idx) <= 15:
            base = -min(idx) + rng.randint(0, 15 - (max(idx) - min(idx)))
            break
    ref_in = None
    if n_ref:
        shape = [dyn("N")] + [L] * (n_ref - 1)
        ref_in = (ints(*shape), encode(_nested_map(ref, n_ref, lambda v: np.array([[v]], np.int32)), n_ref - 1))
    return ref_in, dict(tensor="A", tile=[2, 2], out_shape=out_shape, stride=stride, base=base)


def _nested_map(nested, levels, f):
    return [f(x) for x in nested] if levels == 1 else [_nested_map(x, levels - 1, f) for x in nested]


@pytest.mark.parametrize("pipeline", [False, True], ids=["", "pipeline"])
@pytest.mark.parametrize("k", range(9))
def test_linear_load_random(sim_backend, k, pipeline):
    ref_in, op = random_load_case(k)
    params = LinearLoadParams(**offchip(ref=ref_in is not None, burst_bytes=32 if k % 2 else 0, pipeline=pipeline))
    inputs = {"ref": ref_in} if ref_in else {}
    check_mem_unit(LinearOffChipLoad(params), "LinearOffChipLoad", inputs, op, sim_backend,
                   ("lload_ref" if ref_in else "lload") + ("_pipe" if pipeline else "") + ("_b" if k % 2 else ""))


@pytest.mark.parametrize("ref", [False, True], ids=["", "ref"])
def test_pipelined_load_is_one_cycle_later(sim_backend, ref):
    """With ``pipeline`` the walk's requests pass a register slice: with no stall anywhere and a fixed memory
    latency, every output token leaves exactly one cycle later than without (the declared ``latency`` 1),
    back to back as before (II 1)."""
    ref_in, op = (ints(2, 3), toks("1 2 3 S1 4 5 6 S1 D")) if ref else None, None
    op = dict(tensor="A", tile=[2, 2], out_shape=[2, 4] if not ref else [2], stride=[4, 1] if not ref else [4, 1, 1],
              base=0)
    out_cycles = []
    for pipeline in (False, True):
        unit = LinearOffChipLoad(LinearLoadParams(**offchip(ref=ref, burst_bytes=32, pipeline=pipeline)))
        inputs = {"ref": ref_in} if ref else {}
        config = unit.configure(op, {p: st for p, (st, _) in inputs.items()}, tensor_addr=ADDR["A"])
        mem = SimMemory(unit.params.port, DEPTH, IMAGE, max_inflight=4)
        top = MemoryHarness(unit, mem, dump_words=0, dump_format=TILE)
        timing: dict = {}
        run_scenario(top, Scenario(unit.pack_inputs(inputs), unit.output_done_bits(),
                                   [sim_ctl_word(1, 0, 0)] + config, p_gap=0, p_drop=0), sim_backend,
                     f"lload_lat_{int(ref)}_{int(pipeline)}", timing=timing)
        out_cycles.append(timing["out_cycles"]["o"])
        assert unit.latency == int(pipeline)
    plain, piped = out_cycles
    assert len(plain) == len(piped) > 4
    assert [c + 1 for c in plain] == piped, (plain, piped)


# ----------------------------------------------------------------------------- LinearOffChipStore

def tile_tokens(text, seed=3):
    """Tile tokens from a structure text: each number becomes a random 2x2 int16 tile."""
    rng = np.random.default_rng(seed)
    return [data(rng.integers(-500, 500, (2, 2)).astype(np.int16)) if t.is_data else t for t in toks(text)]


STORE_CASES = [
    (tiles(2, 2, 5, dt="int16"), "1 2 3 4 5 D", 0),
    (tiles(2, 2, 2, 3, dt="int16"), "1 2 3 S1 4 5 6 S1 D", 4),
    (tiles(2, 2, 3, L, dt="int16"), "1 S1 S1 2 3 4 S1 D", 9),             # ragged with an empty run
    (tiles(2, 2, 2, 2, L, dt="int16"), "1 2 S1 3 S2 S1 4 S2 D", 1),       # several stop levels
    (tiles(2, 2, 0, dt="int16"), "D", 0),                                 # empty stream
]


@pytest.mark.parametrize("burst", [0, 32], ids=["tiles", "bursts"])
@pytest.mark.parametrize("st, text, base", STORE_CASES)
def test_linear_store(sim_backend, st, text, base, burst):
    """Also with bursts: tiles collected up to their 32-byte block's end, a stop, done or a cycle without a
    tile (random stalls make bursts of every length), written in one burst each."""
    unit = LinearOffChipStore(OffChipParams(**offchip(burst_bytes=burst)))
    op = dict(tensor="C", tile=[2, 2], base=base)
    check_mem_unit(unit, "LinearOffChipStore", {"in": (st, tile_tokens(text))}, op, sim_backend,
                   f"lstore_{burst}", store=True)


def request_beats(unit, op, inputs=None) -> tuple[int, int, int]:
    """(read requests, write beats, write bursts) the unit sends its memory in a run without stalls (Amaranth)."""
    from amaranth.sim import Simulator
    from step_hdl.sim.stalls import Stalls
    from step_hdl.sim.streams import receive, send, write_config
    mem = SimMemory(unit.params.port, DEPTH, IMAGE, latency=3, max_inflight=8)
    top = MemoryHarness(unit, mem)
    inputs = inputs or {}
    config = [sim_ctl_word(3)] + unit.configure(op, {p: st for p, (st, _) in inputs.items()},
                                                tensor_addr=ADDR[op["tensor"]])
    beats = [0, 0, 0]
    finished = []

    async def drive(ctx):
        await write_config(ctx, top.cfg, config)
        for port, values in unit.pack_inputs(inputs).items():
            await send(ctx, getattr(top, port), values, Stalls(0, 0))
        if "o" in unit.fmts:
            await receive(ctx, top.o, Stalls(0, 0), unit.fmt("o").done_bit, [])
        else:
            while not (await ctx.tick().sample(unit.finished))[-1]:
                pass
        finished.append(True)

    async def count(ctx):
        req = unit.mem.req
        while True:
            _, _, valid, ready, write, words = await ctx.tick().sample(req.valid, req.ready, req.payload.write,
                                                                       req.payload.words)
            if valid and ready:
                beats[write] += 1
                beats[2] += bool(write and words)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(drive)
    sim.add_testbench(count, background=True)
    sim.run()
    assert finished
    return tuple(beats)


def test_contiguous_run_of_a_walk():
    from step_hdl.units.offchip import contiguous_run
    assert contiguous_run([4, 4], [1, 4]) == 16          # a whole grid row after row
    assert contiguous_run([2, 8], [1, 2]) == 16
    assert contiguous_run([2, 8], [1, 3]) == 2           # the rows are apart
    assert contiguous_run([1, 1, 64], [1, 1, 1]) == 64   # [1, P] rows of a row-tiled tensor, one after the other
    assert contiguous_run([1, 5], [7, 1]) == 5           # a dimension of size 1 never steps
    assert contiguous_run([3], [2]) == 1                 # not a tile apart: no bursts
    assert contiguous_run([3, 4], [0, 1]) == 1           # re-reads


def test_linear_units_move_a_block_in_one_request():
    """With 32-byte bursts a load of the whole 16-tile tensor A (8-byte tiles, four per block) sends 4 read
    requests instead of 16, also walked as 8 runs of 2 (a burst goes on across dimensions whose tiles are
    consecutive); re-reads by stride 0 are not consecutive: a request each; a store of 8 tiles sent back to
    back writes 2 bursts of 4 beats (8 beats, each burst one block)."""
    def load(burst, out_shape, stride):
        unit = LinearOffChipLoad(LinearLoadParams(**offchip(burst_bytes=burst)))
        return request_beats(unit, dict(tensor="A", tile=[2, 2], out_shape=out_shape, stride=stride, base=0))
    assert load(0, [4, 4], [4, 1]) == (16, 0, 0)
    assert load(32, [4, 4], [4, 1]) == (4, 0, 0)
    assert load(32, [8, 2], [2, 1]) == (4, 0, 0)         # runs of 2 tiles, consecutive: bursts across them
    assert load(32, [2, 3], [0, 1]) == (2, 0, 0)         # [0 1 2] twice: one burst each
    assert load(32, [3, 2], [1, 0]) == (6, 0, 0)         # the innermost dim re-reads: no bursts
    st = tiles(2, 2, 8, dt="int16")
    for burst, want in ((0, (0, 8, 8)), (32, (0, 8, 2))):
        unit = LinearOffChipStore(OffChipParams(**offchip(burst_bytes=burst)))
        assert request_beats(unit, dict(tensor="C", tile=[2, 2], base=0),
                             {"in": (st, tile_tokens("1 2 3 4 5 6 7 8 D"))}) == want


# ----------------------------------------------------------------------------- random access

RANDOM_LOAD_CASES = [
    ("A", ints(6), "3 0 15 3 7 1 D", 0),
    ("A", ints(3, L), "1 2 S1 S1 5 S1 D", 4),                              # ragged with an empty run
    ("B", ints(2, 2, L), "0 S1 1 2 S2 S1 7 S2 D", 0),                     # several stop levels
    ("A", ints(0), "D", 0),                                               # empty stream
]


@pytest.mark.parametrize("tensor, st, text, base", RANDOM_LOAD_CASES)
def test_random_load(sim_backend, tensor, st, text, base):
    unit = RandomOffChipLoad(OffChipParams(**offchip()))
    op = dict(tensor=tensor, tile=[2, 2], base=base)
    check_mem_unit(unit, "RandomOffChipLoad", {"addr": (st, toks(text))}, op, sim_backend, "rload")


RANDOM_STORE_CASES = [
    (5, "3 0 15 8 1 D", 0),
    ((3, L), "1 2 S1 S1 5 S1 D", 4),                                       # ragged with an empty run
    ((2, 2, L), "0 S1 1 2 S2 S1 6 S2 D", 1),                              # several stop levels
    ((4,), "2 9 2 4 D", 0),                                               # the same slot twice: last wins
]


@pytest.mark.parametrize("shape, text, base", RANDOM_STORE_CASES)
def test_random_store(sim_backend, shape, text, base):
    shape = shape if isinstance(shape, tuple) else (shape,)
    unit = RandomOffChipStore(OffChipParams(**offchip()))
    op = dict(tensor="C", tile=[2, 2], base=base)
    inputs = {"addr": (ints(*shape), toks(text)), "data": (tiles(2, 2, *shape, dt="int16"), tile_tokens(text))}
    check_mem_unit(unit, "RandomOffChipStore", inputs, op, sim_backend, "rstore", store=True)


# ----------------------------------------------------------------------------- OnChipBuffer

BUFFER_CASES = [
    ((3, L), "1 2 3 4 S1 5 S1 6 7 S1 D", 1, None),           # rank-0 buffer stream: eager ends
    ((3, L), "1 2 3 4 S1 5 S1 6 7 S1 D", 1, 3),              # repeat count
    ((4, L), "S1 1 S1 S1 2 S1 D", 1, 2),                     # empty buffers
    ((2, 3, L), "1 2 S1 S1 3 S2 S1 4 S2 D", 2, 2),           # rank-2 buffers with empty rows
    ((2, 2, L), "1 2 S1 3 S2 S1 4 S2 D", 1, 2),              # input stops above the buffer rank
    ((2, 2, L), "1 2 S1 3 S2 S1 4 S2 D", 1, None),
    ((8, L), " ".join(f"{k} {k + 1} {k + 2} S1" for k in range(8)) + " D", 1, 2),   # back to back
    ((2, 2, 2, L), "1 S1 2 S2 3 4 S1 5 S3 6 S1 S2 7 S3 D", 2, None),               # three stop levels
]


@pytest.mark.parametrize("shape, text, b, repeat", BUFFER_CASES)
def test_onchip_buffer(sim_backend, shape, text, b, repeat):
    st = tiles(2, 2, *shape, dt="int16")
    tokens = tile_tokens(text)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256))
    want = buffer_reference(st, tokens, b, repeat)
    config = unit.configure({"rank": b, "repeat": repeat}, {"in": st})
    fmt = unit.fmt("o")
    for seed in SEEDS:
        sc = Scenario({"i": fmt.pack_all(tokens)}, {"o": fmt.done_bit}, config, seed=seed)
        got, _ = run_scenario(unit, sc, sim_backend, "onchip_buffer")
        got = fmt.unpack_all(got["o"])
        assert got == want, f"seed {seed}:\n got  {format_tokens(got, 80)}\n want {format_tokens(want, 80)}"


def _refs(levels, nested):
    return encode(_nested_map(nested, levels, lambda v: np.array([[v]], np.int32)), levels - 1)


BUFFER_REF_CASES = [
    ((3, L), "1 2 3 4 S1 5 S1 6 7 S1 D", 1, (ints(3), _refs(1, [7, 7, 7]))),                 # c = 0, eager
    ((3, L), "1 2 3 4 S1 5 S1 6 7 S1 D", 1, (ints(3, L), _refs(2, [[7, 7], [], [7]]))),     # c = 1, ragged
    ((2, L), "1 2 S1 3 S1 D", 1, (ints(2, L, L), _refs(3, [[[7], [7, 7]], [[]]]))),           # c = 2
    ((2, 2, L), "1 2 S1 3 S2 S1 4 S2 D", 1, (ints(2, 2, L), _refs(3, [[[7, 7], [7]], [[], [7, 7, 7]]]))),
    ((2, 2, L), "1 2 S1 S1 3 S2 4 S1 S2 D", 2, (ints(2, L), _refs(2, [[7, 7], [7]]))),       # rank-2 buffers
]


@pytest.mark.parametrize("shape, text, b, ref", BUFFER_REF_CASES)
@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
def test_onchip_buffer_ref(sim_backend, shape, text, b, ref, out_reg):
    st = tiles(2, 2, *shape, dt="int16")
    tokens = tile_tokens(text)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256, ref=True,
                                           out_reg=out_reg))
    assert unit.latency == 2 + out_reg
    want = buffer_reference(st, tokens, b, None, ref)
    config = unit.configure({"rank": b, "repeat": None}, {"in": st, "ref": ref[0]})
    fmt = unit.fmt("o")
    for seed in SEEDS:
        sc = Scenario({"i": fmt.pack_all(tokens), "i_ref": unit.fmt("i_ref").pack_all(ref[1])},
                      {"o": fmt.done_bit}, config, seed=seed)
        got, _ = run_scenario(unit, sc, sim_backend, "onchip_buffer_ref")
        got = fmt.unpack_all(got["o"])
        assert got == want, f"seed {seed}:\n got  {format_tokens(got, 80)}\n want {format_tokens(want, 80)}"


BUFFER_AFFINE_CASES = [
    ((3, 4), "1 2 3 4 S1 5 6 7 8 S1 9 10 11 12 S1 D", 1, None, None, ([2, 2], [1, 2])),     # transpose
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, 2, None, ([3], [0])),                          # re-read, repeat
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, None, None, ([2, 0], [1, 1])),                 # empty inner dim
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, None, None, ([0, 2], [1, 1])),                 # empty outer dim
    ((2, 2, 2), "1 2 S1 3 4 S2 5 S1 6 7 S2 D", 2, 3, None, ([3], [1])),                   # rank-2 buffers
    ((2, 3), "1 2 3 S1 4 5 6 S1 D", 1, None, (ints(2, L), _refs(2, [[7, 7], [7]])), ([2], [2])),   # with a ref
]


@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
@pytest.mark.parametrize("shape, text, b, repeat, ref, read", BUFFER_AFFINE_CASES)
def test_onchip_buffer_affine(sim_backend, shape, text, b, repeat, ref, read, out_reg):
    """Affine readings; with ``out_reg`` (a pipelined fabric's build) the SRAM's data registered, the walk's
    last-step flags and the modes registers, a skid register before the merger."""
    st = tiles(2, 2, *shape, dt="int16")
    tokens = tile_tokens(text)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256,
                                           ref=ref is not None, read_dims=2, out_reg=out_reg))
    want = buffer_reference(st, tokens, b, repeat, ref, read)
    in_types = {"in": st} | ({"ref": ref[0]} if ref else {})
    config = unit.configure({"rank": b, "repeat": repeat, "read_shape": read[0], "read_stride": read[1]}, in_types)
    fmt = unit.fmt("o")
    inputs = {"i": fmt.pack_all(tokens)} | ({"i_ref": unit.fmt("i_ref").pack_all(ref[1])} if ref else {})
    for seed in SEEDS:
        sc = Scenario(inputs, {"o": fmt.done_bit}, config, seed=seed)
        got, _ = run_scenario(unit, sc, sim_backend, "onchip_buffer_affine" + ("_ref" if ref else ""))
        got = fmt.unpack_all(got["o"])
        assert got == want, f"seed {seed}:\n got  {format_tokens(got, 80)}\n want {format_tokens(want, 80)}"


BUFFER_MERGE_CASES = [
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, None, None, ([2, 2], [2, 1]), 1),          # a matmul operand's read
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, 2, None, ([2, 2], [0, 1]), 1),             # with a repeat
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, None, None, ([2, 2, 2], [0, 2, 1]), 1),    # three dims, merge 1
    ((2, 4), "1 2 3 4 S1 5 6 7 8 S1 D", 1, None, None, ([2, 2, 2], [0, 2, 1]), 2),    # three dims, merge 2
    ((2, 2, 2), "1 2 S1 3 4 S2 5 S1 6 7 S2 D", 2, None, None, ([2, 3], [1, 0]), 1),   # rank-2 buffers
    ((2, 3), "1 2 3 S1 4 5 6 S1 D", 1, None, (ints(2, L), _refs(2, [[7, 7], [7]])), ([2, 2], [1, 1]), 1),  # ref
]


@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
@pytest.mark.parametrize("shape, text, b, repeat, ref, read, merge", BUFFER_MERGE_CASES)
def test_onchip_buffer_fused_flatten(sim_backend, shape, text, b, repeat, ref, read, merge, out_reg):
    """A Flatten(0, merge) of each reading fused into the buffer: the tokens of Streamify -> Flatten, and
    the closes it drops cost no cycle of their own (fewer cycles, by at most the stops it drops: a dropped
    close may fall where the reading waits for its next entry to be written anyway)."""
    st = tiles(2, 2, *shape, dt="int16")
    tokens = tile_tokens(text)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256,
                                           ref=ref is not None, read_dims=3, out_reg=out_reg))
    want = buffer_reference(st, tokens, b, repeat, ref, read, merge)
    unfused = buffer_reference(st, tokens, b, repeat, ref, read)
    in_types = {"in": st} | ({"ref": ref[0]} if ref else {})
    op = {"rank": b, "repeat": repeat, "read_shape": read[0], "read_stride": read[1]}
    fmt = unit.fmt("o")
    inputs = {"i": fmt.pack_all(tokens)} | ({"i_ref": unit.fmt("i_ref").pack_all(ref[1])} if ref else {})
    cycles = {}
    for m in (merge, None):
        config = unit.configure(op | {"merge": m}, in_types)
        for seed in SEEDS if m else (0,):
            sc = Scenario(inputs, {"o": fmt.done_bit}, config, seed=seed, **({} if seed else dict(p_gap=0, p_drop=0)))
            got, n = run_scenario(unit, sc, sim_backend, "onchip_buffer_merge" + ("_ref" if ref else ""))
            got = fmt.unpack_all(got["o"])
            assert got == (want if m else unfused), (f"merge {m} seed {seed}:\n got  {format_tokens(got, 80)}\n"
                                                     f" want {format_tokens(want, 80)}")
            if not seed:
                cycles[m] = n
    dropped = sum(1 for t in unfused if t.stop) - sum(1 for t in want if t.stop)
    assert dropped > 0 and 0 < cycles[None] - cycles[merge] <= dropped


@pytest.mark.parametrize("merge", [None, 1])
def test_onchip_buffer_streams_before_the_close(sim_backend, merge):
    """An affine reading of the chunk being written starts on its first entry, not after the chunk's close:
    8 tiles in at one per cycle, read [2, 4] (merged or not), the first tile leaves 3 cycles after the first
    comes in (write, SRAM read, output register) and the reading keeps pace with the writes; the reading's
    last tile waits for the close."""
    st = tiles(2, 2, 1, 8, dt="int16")
    tokens = tile_tokens("1 2 3 4 5 6 7 8 S1 D")
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256, read_dims=2))
    read = ([2, 4], [4, 1])
    want = buffer_reference(st, tokens, 1, None, None, read, merge)
    config = unit.configure({"rank": 1, "repeat": None, "read_shape": read[0], "read_stride": read[1],
                             "merge": merge}, {"in": st})
    fmt = unit.fmt("o")
    timing: dict = {}
    got, _ = run_scenario(unit, Scenario({"i": fmt.pack_all(tokens)}, {"o": fmt.done_bit}, config, p_gap=0,
                                         p_drop=0), sim_backend, "onchip_buffer_stream", timing=timing)
    assert fmt.unpack_all(got["o"]) == want
    start = [c - timing["first_in"] for c in timing["out_cycles"]["o"]]
    # the first 7 entries right behind their writes (the stop between the rows, unless merged, in the slack:
    # the next entry is not written before cycle 8 anyway); the last entry once the close came in at cycle
    # 8: at 11, merged or not; then the block end and done
    assert start[:5] == [3, 4, 5, 6, 7] and (start[5] if merge else start[4:6]) == (8 if merge else [7, 8])
    assert start[len(want) - 3] == 11 and start[-1] == 13, start


def test_onchip_buffer_fused_flatten_errors():
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, read_dims=2))
    not_elaborated(unit)  # built only to check configure(): never elaborated
    st = tiles(2, 2, 2, 4, dt="int16")
    op = {"rank": 1, "repeat": None, "read_shape": [2, 2], "read_stride": [1, 1]}
    with pytest.raises(ParamError, match=r"a fused Flatten\(0, 2\) needs an affine read_shape of more than 2 "
                                         r"dims \(got \[2, 2\]\)"):
        unit.configure(op | {"merge": 2}, {"in": st})
    with pytest.raises(ParamError, match=r"a fused Flatten needs read_shape sizes >= 1, got \[2, 0\]"):
        unit.configure(op | {"read_shape": [2, 0], "merge": 1}, {"in": st})
    with pytest.raises(ParamError, match=r"a fused Flatten\(0, 1\) needs an affine read_shape"):
        unit.configure({"rank": 1, "repeat": 2, "merge": 1}, {"in": st})


@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
@pytest.mark.parametrize("k", range(4))
def test_onchip_buffer_affine_random(sim_backend, k, out_reg):
    rng = random.Random(3000 + k)
    size, n = rng.randint(1, 5), rng.randint(1, 3)
    while True:
        read_shape = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(1, 2))]
        stride = [rng.randint(0, 2) for _ in read_shape]
        if sum((d - 1) * st for d, st in zip(read_shape, stride) if d) < size:
            break
    repeat = rng.choice([None, 2])
    text = " ".join(" ".join(["1"] * size) + " S1" for _ in range(n)) + " D"
    test_onchip_buffer_affine(sim_backend, (n, size), text, 1, repeat, None, (read_shape, stride), out_reg)


@pytest.mark.parametrize("k", range(6))
@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
def test_onchip_buffer_random(sim_backend, k, out_reg):
    """Random buffers, repeats and ranks; with ``out_reg`` the SRAM's data registered (a stage more)."""
    rng = random.Random(2000 + k)
    r = 1 + k % 2
    b = 1 + (k // 2) % r
    repeat = rng.choice([None, 1, 2, 3])
    nprng = np.random.default_rng(k)
    nested = _nested(rng, r + 1, outer=rng.randint(1, 4),
                     leaf=lambda: nprng.integers(-500, 500, (2, 2)).astype(np.int16))
    st = tiles(2, 2, *([dyn("N")] + [L] * r), dt="int16")
    tokens = encode(nested, r)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256,
                                           out_reg=out_reg))
    want = buffer_reference(st, tokens, b, repeat)
    config = unit.configure({"rank": b, "repeat": repeat}, {"in": st})
    check_buffer(unit, tokens, config, want, sim_backend, "onchip_buffer", f"b {b} repeat {repeat} ")


def check_buffer(unit, tokens, config, want, backend, name, context=""):
    """Run the buffer ``unit`` on input ``tokens`` for each seed (random stalls); its output must be ``want``."""
    fmt = unit.fmt("o")
    for seed in SEEDS:
        sc = Scenario({"i": fmt.pack_all(tokens)}, {"o": fmt.done_bit}, config, seed=seed)
        got, _ = run_scenario(unit, sc, backend, name)
        got = fmt.unpack_all(got["o"])
        assert got == want, (f"{context}seed {seed}:\n in   {format_tokens(tokens, 80)}\n"
                             f" got  {format_tokens(got, 80)}\n want {format_tokens(want, 80)}")


@pytest.mark.parametrize("k", range(4))
@pytest.mark.parametrize("out_reg", [False, True], ids=["", "out_reg"])
def test_onchip_buffer_transpose(sim_backend, k, out_reg):
    """Transposed reads of rank-2 buffers of their own sizes (1..4 rows of 1..3 tiles, some partial tiles):
    each buffer column by column, as the lowering packs and unpacks a block of rows."""
    rng, nprng = random.Random(4000 + k), np.random.default_rng(k)
    chunks = [[[nprng.integers(-500, 500, (rng.choice([1, 2]), 2)).astype(np.int16) for _ in range(cols)]
               for _ in range(rng.randint(1, 4))] for cols in (rng.randint(1, 3) for _ in range(rng.randint(1, 4)))]
    st = tiles(2, 2, dyn("N"), L, Ragged("C", integer=True, nonnegative=True), dt="int16")
    tokens = encode(chunks, 2)
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256,
                                           read_dims=2, transpose=True, out_reg=out_reg))
    g = Graph("transpose")
    g.output(g.streamify(g.bufferize(g.source(st, data="x", name="src"), 2, name="buf"), transpose=True,
                         name="sfy"), name="y")
    want = run(g, {}, {"x": tokens}).outputs["y"]
    config = unit.configure({"rank": 2, "repeat": None, "transpose": True}, {"in": st})
    check_buffer(unit, tokens, config, want, sim_backend, "onchip_buffer_transpose")


def test_transposed_reads_need_the_hardware_and_rank_2():
    st = tiles(2, 2, 3, 2, dt="int16")
    plain = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, read_dims=2))
    not_elaborated(plain)  # built only to check configure(): never elaborated
    with pytest.raises(ParamError, match=r"the Streamify node transposes but the unit was built without transpose"):
        plain.configure({"rank": 2, "repeat": None, "transpose": True}, {"in": st})
    unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, read_dims=2, transpose=True))
    not_elaborated(unit)
    with pytest.raises(ParamError, match=r"transpose reads rank-2 buffers without a read_shape, got rank 1"):
        unit.configure({"rank": 1, "repeat": None, "transpose": True}, {"in": st})
    with pytest.raises(ParamError, match=r"transpose reads walk 2 dimensions: read_dims must be >= 2, got 0"):
        OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, transpose=True)


# ----------------------------------------------------------------------------- parameters

def test_bad_memory_parameters():
    with pytest.raises(ParamError, match="unsupported element type"):
        LinearLoadParams(**{**offchip(), "dtype": "int4"})
    with pytest.raises(ParamError, match="max_inflight"):
        OffChipParams(**offchip(max_inflight=0))
    with pytest.raises(ParamError, match="tag_bits"):
        OffChipParams(**offchip(max_inflight=32, tag_bits=4))
    with pytest.raises(ParamError, match="max_dims"):
        LinearLoadParams(**offchip(max_dims=5))
    with pytest.raises(ParamError, match="depth"):
        SimMemory(MemPortShape(64), 0)
    with pytest.raises(ParamError, match="larger than an SRAM bank"):
        OnChipBufferParams(rows=8, cols=8, dtype="int32", sram_bytes=256)
    with pytest.raises(ParamError, match="unsupported element type"):
        OnChipBufferParams(dtype="uint8")
    unit = LinearOffChipLoad(LinearLoadParams(**offchip()))
    not_elaborated(unit)  # built only to check configure(): never elaborated
    with pytest.raises(ParamError, match="physical tile"):
        unit.configure(dict(tensor="A", tile=[4, 4], out_shape=[2], stride=[1]), {})
    with pytest.raises(ParamError, match="ref"):
        unit.configure(dict(tensor="A", tile=[2, 2], out_shape=[2], stride=[1, 1]), {"ref": ints(3)})
