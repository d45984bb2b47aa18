"""Stream plumbing and the StopMerger, under random stalls on any --sim back-end."""

import random

import numpy as np
import pytest

from step_hdl.process import Emitter
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.token import DONE, data, stop
from step_hdl.units.layout import TokenFormat, tile_format
from step_hdl.units.merger import StopMerger
from step_hdl.units.params import ParamError
from step_hdl.units.stream import BackwardSlice, Broadcast, ForwardSlice, FullSlice, Queue

FMT = TokenFormat(tile_format("int16", 2, 2), 3)
DONE_BIT = FMT.done_bit
SEEDS = (0, 1, 2)


def tokens(n=40):
    rng = np.random.default_rng(7)
    out = []
    for k in range(n):
        out.append(data(rng.integers(-100, 100, (2, 2)).astype(np.int16)))
        if k % 5 == 4:
            out.append(stop(1 + k % 3))
    return out + [DONE]


@pytest.mark.parametrize("make", [lambda: Queue(FMT.layout, 1), lambda: Queue(FMT.layout, 4),
                                  lambda: ForwardSlice(FMT.layout), lambda: BackwardSlice(FMT.layout),
                                  lambda: FullSlice(FMT.layout)],
                         ids=["queue1", "queue4", "forward", "backward", "full"])
@pytest.mark.parametrize("seed", SEEDS)
def test_pass_through_units(sim_backend, make, seed):
    toks = tokens()
    out, _ = run_scenario(make(), Scenario({"i": FMT.pack_all(toks)}, {"o": DONE_BIT}, seed=seed), sim_backend,
                          "plumb")
    assert FMT.unpack_all(out["o"]) == toks


@pytest.mark.parametrize("depth", [2, 4])
def test_queue_moves_one_token_per_cycle(depth):
    """From depth 2 a fabric edge is not a bottleneck: no stalls, one token per cycle (plus the latency)."""
    toks = tokens(60)
    out, cycles = run_scenario(Queue(FMT.layout, depth), Scenario({"i": FMT.pack_all(toks)}, {"o": DONE_BIT},
                                                                  p_gap=0, p_drop=0), "amaranth", "q")
    assert FMT.unpack_all(out["o"]) == toks
    assert cycles <= len(toks) + 4, (cycles, len(toks))


@pytest.mark.parametrize("seed", SEEDS)
def test_broadcast_independent_ready(sim_backend, seed):
    toks = tokens()
    outs = {f"o{k}": DONE_BIT for k in range(3)}
    out, _ = run_scenario(Broadcast(FMT.layout, 3), Scenario({"i": FMT.pack_all(toks)}, outs, seed=seed,
                                                              p_drop=0.5), sim_backend, "bcast3")
    for k in range(3):
        assert FMT.unpack_all(out[f"o{k}"]) == toks


def test_bad_plumbing_parameters():
    with pytest.raises(ParamError, match="Queue: depth must be an integer >= 1, got 0"):
        Queue(8, 0)
    with pytest.raises(ParamError, match="Broadcast: n must be an integer >= 1"):
        Broadcast(8, 0)


# ---------------------------------------------------------------- StopMerger against the interpreter's Emitter

class _Sink:
    """Just enough of Ports for an Emitter."""

    def __init__(self):
        self.node = None
        self.out = []

    def put(self, port, tok):
        self.out.append(tok)
        yield None


def reference(events):
    sink = _Sink()
    em = Emitter(sink, "o")
    for kind, level, eager, payload in events:
        gen = {"data": lambda: em.data(payload), "stop": lambda: em.stop(level), "done": em.done,
               "end": lambda: em.end_block(level), "data_end": lambda: em.data(payload)}[kind]()
        for _ in gen:
            pass
        if kind == "data_end":    # a data element carrying its block end: data, then end q
            for _ in em.end_block(level):
                pass
        if kind == "end" and eager:
            for _ in em._flush():
                pass
    return sink.out


def pack_event(kind, level, eager, payload):
    pw, sb = FMT.payload_width, FMT.stop_bits
    p = FMT.payload.pack_token(payload) if kind in ("data", "data_end") else 0
    return (p | ((level if kind in ("stop", "end") else 0) << pw) | (int(kind == "done") << (pw + sb))
            | (int(kind == "end") << (pw + sb + 1)) | (int(eager) << (pw + sb + 2))
            | ((level if kind == "data_end" else 0) << (pw + sb + 3)))


#: the event mix: data twice as often as a stop, block ends and data carrying their block end
KINDS = ("data", "data", "stop", "end", "end", "data_end")


def random_events(seed, n=60, kinds=KINDS):
    rng = random.Random(seed)
    ev = []
    for _ in range(n):
        kind = rng.choice(kinds)
        tile = np.full((2, 2), rng.randrange(-50, 50), np.int16)
        ev.append((kind, rng.randint(1, 3), kind != "data_end" and rng.random() < 0.3, tile))
    return ev + [("done", 0, False, None)]


@pytest.mark.parametrize("seed", SEEDS)
def test_stop_merger_matches_emitter(sim_backend, seed):
    events = random_events(seed)
    want = reference(events)
    out, _ = run_scenario(StopMerger(FMT), Scenario({"i": [pack_event(*e) for e in events]}, {"o": DONE_BIT},
                                                    seed=seed), sim_backend, "merger")
    assert FMT.unpack_all(out["o"]) == want


def test_stop_merger_data_with_tail_costs_no_cycle(sim_backend):
    """``d`` + ``end 1`` per block is a cycle more per block than ``d`` carrying ``tail = 1``; same tokens."""
    tile = np.ones((2, 2), np.int16)
    blocks = 8
    split = [e for _ in range(blocks) for e in (("data", 0, False, tile), ("end", 1, False, None))]
    fused = [("data_end", 1, False, tile)] * blocks
    got = {}
    for name, events in (("split", split), ("fused", fused)):
        events = events + [("stop", 2, False, None), ("done", 0, False, None)]
        out, cycles = run_scenario(StopMerger(FMT), Scenario({"i": [pack_event(*e) for e in events]},
                                                             {"o": DONE_BIT}, p_gap=0, p_drop=0),
                                   sim_backend, "merger")
        assert FMT.unpack_all(out["o"]) == reference(events)
        got[name] = cycles
    assert got["split"] - got["fused"] == blocks, got


def test_missing_simulator_is_a_clear_error(monkeypatch):
    import shutil

    from step_hdl.sim.rtl import RtlError
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RtlError, match="Icarus Verilog \\(iverilog\\) is not installed: apt-get install iverilog"):
        run_scenario(Queue(FMT.layout, 2), Scenario({"i": [1 << DONE_BIT]}, {"o": DONE_BIT}), "icarus", "q")
    with pytest.raises(Exception, match="unknown simulation back-end 'xsim'"):
        run_scenario(Queue(FMT.layout, 2), Scenario({"i": [1 << DONE_BIT]}, {"o": DONE_BIT}), "xsim", "q")


def test_verilator_optimization_level_from_the_environment(monkeypatch, tmp_path):
    """``$STEP_HDL_VERILATOR_OPT=-O3`` adds Verilator's own slow optimizations to a C++ build at -O2; a level
    it does not know is refused before anything is built."""
    from step_hdl.sim.rtl import RtlError
    monkeypatch.setenv("STEP_HDL_BUILD", str(tmp_path))
    monkeypatch.setenv("STEP_HDL_VERILATOR_OPT", "-O4")
    scenario = Scenario({"i": [1, 2, 1 << DONE_BIT]}, {"o": DONE_BIT}, p_gap=0, p_drop=0)
    with pytest.raises(RtlError, match=r"\$STEP_HDL_VERILATOR_OPT must be one of -O0, -O1, -O2, -O3, pgo, got '-O4'"):
        run_scenario(Queue(FMT.layout, 2), scenario, "verilator", "q")
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("STEP_HDL_VERILATOR_OPT", "-O3")
    out, _ = run_scenario(Queue(FMT.layout, 2), scenario, "verilator", "q")
    assert out["o"] == [1, 2, 1 << DONE_BIT]
    bdir = next(tmp_path.glob("q-verilator-*"))
    command = next(ln for ln in (bdir / "Vtop__verFiles.dat").read_text().splitlines() if ln.startswith("C "))
    assert " -O3 " in command          # Verilator's own command line, as it records it
    compiles = [ln for ln in (bdir / "build.log").read_text().splitlines() if " -c -o " in ln]
    assert compiles and all(" -O2 " in f"{c} " and " -O3 " not in c for c in compiles)


@pytest.mark.slow      # two builds, about 45 s
def test_a_profile_guided_build_profiles_its_first_run_and_is_rebuilt_from_it(monkeypatch, tmp_path):
    """``$STEP_HDL_VERILATOR_OPT=pgo``: the first run is on an instrumented simulator and gives its result like
    any run; its profile then rebuilds the simulator, which the next run uses as it is, with the same tokens."""
    monkeypatch.setenv("STEP_HDL_BUILD", str(tmp_path))
    monkeypatch.setenv("STEP_HDL_VERILATOR_OPT", "pgo")
    scenario = Scenario({"i": [1, 2, 1 << DONE_BIT]}, {"o": DONE_BIT}, p_gap=0, p_drop=0)
    out, _ = run_scenario(Queue(FMT.layout, 2), scenario, "verilator", "q")
    assert out["o"] == [1, 2, 1 << DONE_BIT]
    bdir = next(tmp_path.glob("q-verilator-*"))
    assert (bdir / "pgo.done").exists() and not (bdir / "pgo.pending").exists()
    assert list(bdir.glob("*.gcda"))                    # the profile the first run wrote
    generate = [ln for ln in (bdir / "build.log").read_text().splitlines() if " -c -o " in ln]
    use = [ln for ln in (bdir / "pgo.log").read_text().splitlines() if " -c -o " in ln]
    assert generate and all("-fprofile-generate" in c for c in generate)
    assert use and all("-fprofile-use" in c for c in use)
    simulator = bdir / "q"                              # the runner names the simulator after the top level
    built = simulator.stat().st_mtime
    again, _ = run_scenario(Queue(FMT.layout, 2), scenario, "verilator", "q")
    assert again["o"] == out["o"] and simulator.stat().st_mtime == built


def test_every_verilator_build_is_optimized_but_a_unit_scenario(monkeypatch):
    """-O3 for every design (a big fabric included: bench/build_speed.py), -O0 for a short run, where the
    compile is all the time; the environment overrides both."""
    from step_hdl.sim.rtl import verilator_opt
    monkeypatch.delenv("STEP_HDL_VERILATOR_OPT", raising=False)
    assert [verilator_opt(), verilator_opt(short=True)] == ["-O3", "-O0"]
    monkeypatch.setenv("STEP_HDL_VERILATOR_OPT", "-O2")
    assert verilator_opt() == verilator_opt(short=True) == "-O2"
