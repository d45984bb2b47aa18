"""Formal proofs of the stream contract for every unit family (SymbiYosys, boolector; ``units/formal.py``).

Each unit, at a small size (1x1 or 2x2 int8 tiles, narrow addresses, few
credits: the handshake logic is the same at any size, the solver's work is not),
is checked for ``BMC_CYCLES`` (20) cycles of traffic after its configuration (a unit behind its test memory
for at least 20 cycles in all, 12 of them traffic):
valid held until ready, payload stable while stalled, stop levels within the
rank, a stop or done token's payload zero, nothing after done, and, for the
units that pass tokens on one for one, none lost, duplicated or reordered.
Inputs are free except for their own contract. Two deliberately broken
components show that the harness catches what it claims to.

The default suite proves six units (``QUICK``: plumbing with token tracking, a
shape, a routing, a compute unit and a store behind its test memory; 50 s);
``pytest -m formal`` the other 28 (about 20 minutes, most of it the random load
and store).
"""

from __future__ import annotations

import pytest
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.units import stream as plumbing
from step_hdl.units.formal import ContractHarness, prove, streams_of

#: cycles of traffic after the configuration writes
BMC_CYCLES = 20
#: a unit behind its test memory: the whole bound at least 20 cycles, at least 12 of them traffic (a
#: request, its response a cycle later, tiles out and done); the solver's time grows steeply past that
MEMORY_BMC_CYCLES = 12


def _depth(h) -> int:
    return max(20, h.cfg_cycles + MEMORY_BMC_CYCLES) if h.inner else h.cfg_cycles + BMC_CYCLES


def _unit(u, **kw):
    """The harness of a unit: every register written with any value, then ``start`` (if it has one)."""
    agree = kw.pop("agree", ())
    return ContractHarness(u, cfg_cycles=len(u.regs.regs), max_rank=u.params.max_rank,
                           start=u.regs.index.get("start"), agree=agree, **kw)


def _with_memory(u):
    """A unit with a memory port, in front of a small test memory; its port's streams are checked too."""
    from step_hdl.units.memport import MemoryHarness, SimMemory
    mem = SimMemory(u.params.port, 4, latency=1, max_inflight=u.params.max_inflight)
    inner = {f"mem_{k}": s for k, s, _ in streams_of(u.mem)}
    # (the test memory keeps latency 1: the configuration writes go to the unit's registers only)
    return ContractHarness(MemoryHarness(u, mem), cfg_cycles=len(u.regs.regs), max_rank=u.params.max_rank,
                           start=u.regs.index.get("start"), inner=inner)


def _cases():
    from step_hdl.units.compute import Accum, AccumParams, FlatMap, FlatMapParams, Map, MapParams, Scan
    from step_hdl.units.matmul import MatMul, MatMulParams
    from step_hdl.units.merger import StopMerger
    from step_hdl.units.layout import TokenFormat, tile_format
    from step_hdl.units.offchip import (LinearLoadParams, LinearOffChipLoad, LinearOffChipStore, OffChipParams,
                                        RandomOffChipLoad, RandomOffChipStore)
    from step_hdl.units.onchip import OnChipBuffer, OnChipBufferParams
    from step_hdl.units.params import StreamParams
    from step_hdl.units.routing import EagerMerge, Partition, Reassemble, RoutingParams
    from step_hdl.units.shape import (Expand, ExpandParams, Flatten, Promote, RepeatParams, RepeatStatic, Reshape,
                                      ReshapeParams, Zip, ZipParams)
    from step_hdl.units.source import IndexSource, IndexSourceParams
    small = dict(addr_bits=8, tag_bits=2, max_inflight=2)
    t = (1, 1, "int8", 3)
    return {
        # plumbing: every token passes whole and in order
        "Queue": lambda: ContractHarness(plumbing.Queue(unsigned(4), 2), track=("i", "o", True)),
        "ForwardSlice": lambda: ContractHarness(plumbing.ForwardSlice(unsigned(4)), track=("i", "o", True)),
        "BackwardSlice": lambda: ContractHarness(plumbing.BackwardSlice(unsigned(4)), track=("i", "o", True)),
        "FullSlice": lambda: ContractHarness(plumbing.FullSlice(unsigned(4)), track=("i", "o", True)),
        "Broadcast": lambda: ContractHarness(plumbing.Broadcast(unsigned(4), 2), track=("i", "o1", True)),
        "StopMerger": lambda: ContractHarness(StopMerger(TokenFormat(tile_format("int8", 1, 1), 3)), max_rank=3),
        # shape
        "Flatten": lambda: _unit(Flatten(StreamParams(*t))),
        "Promote": lambda: _unit(Promote(StreamParams(*t))),
        "RepeatStatic": lambda: _unit(RepeatStatic(RepeatParams(*t))),
        "Reshape": lambda: _unit(Reshape(ReshapeParams(*t))),
        "Expand": lambda: _unit(Expand(ExpandParams(*t))),
        "Zip": lambda: _unit(Zip(ZipParams(1, 1, "int8", 1, 1, "int8", 3)), agree=("i0", "i1")),
        # routing
        "Partition": lambda: _unit(Partition(RoutingParams(*t, 2))),
        "Reassemble": lambda: _unit(Reassemble(RoutingParams(*t, 2))),
        "EagerMerge": lambda: _unit(EagerMerge(RoutingParams(*t, 2))),
        "IndexSource": lambda: _unit(IndexSource(IndexSourceParams(capacity=4))),
        # compute: a Map passes stops and done on one for one
        "Map[relu]": lambda: _unit(Map(MapParams(2, 2, "int8", 3, fns=("relu",))), track=("i0", "o", False)),
        "Map[add]": lambda: _unit(Map(MapParams(2, 2, "int8", 3, fns=("add",))), agree=("i0", "i1")),
        "Map[matmul]": lambda: _unit(Map(MapParams(2, 2, "int8", 3, fns=("matmul",))), agree=("i0", "i1")),
        "MatMul": lambda: _unit(MatMul(MatMulParams(2, 2, "int8", 3, matmul_transpose_a=False))),
        # pipelined: the stages' advance from two registers (MatMul), the adder tree's stage (both)
        "Map[matmul] pipelined": lambda: _unit(Map(MapParams(2, 2, "int8", 3, fns=("matmul",), pipeline=True)),
                                               agree=("i0", "i1")),
        "MatMul pipelined": lambda: _unit(MatMul(MatMulParams(2, 2, "int8", 3, matmul_transpose_a=False,
                                                              pipeline=True))),
        "Accum": lambda: _unit(Accum(AccumParams(2, 2, "int8", 3))),
        # kept positions: two banks of state memory; pipelined: the update in two cycles, the emitter's
        # registered end flag and inner-stop flags, the decoded keep + rank
        "Accum kept": lambda: _unit(Accum(AccumParams(1, 1, "int8", 3, positions=2))),
        "Accum kept pipelined": lambda: _unit(Accum(AccumParams(1, 1, "int8", 3, positions=2, pipeline=True))),
        "Scan": lambda: _unit(Scan(AccumParams(2, 2, "int8", 3))),
        "FlatMap": lambda: _unit(FlatMap(FlatMapParams(2, 2, "int8", 3))),
        # memory
        "OnChipBuffer": lambda: _unit(OnChipBuffer(OnChipBufferParams(*t, sram_bytes=8))),
        "OnChipBuffer out_reg": lambda: _unit(OnChipBuffer(OnChipBufferParams(*t, sram_bytes=8, out_reg=True))),
        # rank 1 (two address dimensions): the walk's counters and strides are 16 and 32 bits each
        "LinearOffChipLoad": lambda: _with_memory(LinearOffChipLoad(LinearLoadParams(1, 1, "int8", 1, max_dims=2,
                                                                                     **small))),
        # pipelined: the request slice, the order queue's registered head, the decoded count registers
        "LinearOffChipLoad pipelined": lambda: _with_memory(LinearOffChipLoad(LinearLoadParams(
            1, 1, "int8", 1, max_dims=2, pipeline=True, **small))),
        "RandomOffChipLoad": lambda: _with_memory(RandomOffChipLoad(OffChipParams(*t, **small))),
        "LinearOffChipStore": lambda: _with_memory(LinearOffChipStore(OffChipParams(*t, **small))),
        "RandomOffChipStore": lambda: _with_memory(RandomOffChipStore(OffChipParams(*t, **small))),
    }


CASES = _cases()
#: the default suite's subset (about 40 s): plumbing with token tracking, a shape, a routing and a compute unit,
#: and a unit with a memory port behind the test memory (the Queue's proof, 20 s, is in the formal suite)
QUICK = {"Broadcast", "Zip", "Partition", "Map[relu]", "LinearOffChipStore"}


def _proof_name(name: str) -> str:
    """A case's name as a file name: ``Map[matmul] pipelined`` -> ``Map_matmul_pipelined``."""
    return name.replace("[", "_").replace("]", "").replace(" ", "_")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.formal)
                                  for n in CASES])
def test_stream_contract(name, tmp_path):
    h = CASES[name]()
    p = prove(_proof_name(name), h, depth=_depth(h), workdir=tmp_path)
    assert p.passed, f"{name}: {p.status}\n" + "\n".join(line for line in p.log.splitlines()
                                                          if "failed" in line or "ERROR" in line)
    assert any(c.endswith("_hold") for c in p.checks)


class _Drops(wiring.Component):
    """Offers each token for one cycle only (breaks 'valid held until ready')."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(unsigned(4))), "o": Out(stream.Signature(unsigned(4)))})

    def elaborate(self, platform):
        m = Module()
        t = Signal()
        m.d.sync += t.eq(~t)
        m.d.comb += [self.o.valid.eq(self.i.valid & t), self.o.payload.eq(self.i.payload),
                     self.i.ready.eq(self.o.ready & t)]
        return m


class _Repeats(wiring.Component):
    """Passes every token on twice (a duplicate the handshake alone does not show)."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(unsigned(4))), "o": Out(stream.Signature(unsigned(4)))})

    def elaborate(self, platform):
        m = Module()
        second = Signal()
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += second.eq(~second)
        m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload),
                     self.i.ready.eq(self.o.ready & second)]
        return m


@pytest.mark.parametrize("component, fails_at", [(_Drops, "hold"), (_Repeats, "order")])
def test_the_harness_catches_a_broken_contract(component, fails_at, tmp_path):
    import re
    p = prove("broken", ContractHarness(component(), track=("i", "o", True)), depth=10, workdir=tmp_path)
    assert p.status == "FAIL"
    lines = {int(n) for n in re.findall(r"Assert failed in top: .*formal\.py:(\d+)", p.log)}
    from pathlib import Path
    from step_hdl.units import formal
    src = Path(formal.__file__).read_text().splitlines()
    assert lines and all(f'"{{name}}_{fails_at}' in src[n - 1] or f'"{fails_at}_' in src[n - 1] for n in lines), \
        [src[n - 1] for n in lines]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.formal)
                                  for n in CASES])
def test_every_checked_stream_carries_tokens(name, tmp_path):
    """The proofs are not vacuous: within the same bound, each checked stream can carry tokens (a token and
    its done on a token stream)."""
    h = CASES[name]()
    p = prove(_proof_name(name), h, depth=_depth(h), mode="cover",
              workdir=tmp_path)
    assert p.passed, f"{name}: {p.status}\n" + "\n".join(line for line in p.log.splitlines()
                                                          if "Unreached" in line or "ERROR" in line)
    assert h.covers
