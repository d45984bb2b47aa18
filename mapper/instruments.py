"""A fabric's testbench instrumentation in one component: its counters, read back one at a time, and the
sampler that records some of them over a run.

:class:`FabricTop` keeps what only it can see (the handshakes of every unit and FIFO, the bytes of every
memory transfer, the watchdog's idle count, the units' status flags) and hands it to :class:`Instruments`
as plain bits and values; the registers, the read-back table and the sampler are here. So the Verilog can
convert them apart from the top level (``sim.fabric.verilog_for``: one module, instanced through
:class:`~step_hdl.mapper.shared.SharedUnit`), which halves the top level's netlist: the 8-expert MoE fabric
has 1,950 counters of 32 bits.
"""

from __future__ import annotations

import hashlib
import json

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .design import COUNTER_BITS
from step_hdl.units.base import not_elaborated

__all__ = ["Instruments"]

#: what a counter is (:class:`Instruments`' ``sources``)
KINDS = ("count", "add", "stamp", "value")


class Instruments(wiring.Component):
    """The counters named ``names``, each made as ``sources[name]`` says, and with ``samples > 0`` a
    sampler of the counters ``sample_names``.

    Parameters
    ----------
    names : list of str
        The counters in read-back order (``ctr_addr`` ``k`` reads ``names[k]``).
    sources : dict
        Per name, ``(kind, index)``: ``("count", i)`` adds event bit ``events[i]`` every cycle while
        ``live``; ``("add", j)`` adds value ``j`` of ``adds`` while ``live``; ``("stamp", i)`` becomes the
        ``cycles`` counter plus one in every cycle ``live & events[i]`` (when a unit last moved); ``("value",
        j)`` is value ``j`` of ``values`` as it is now. One counter must be ``cycles``, a ``count``.
    sample_names : list of str
        The counters the sampler records (with ``samples > 0``).
    samples : int
        Rows of the sampler's memory (0: no sampler).

    Attributes
    ----------
    live : ``In(1)``
        The program runs (counting happens only then).
    events, adds, values : ``In(n_events)``, ``In(COUNTER_BITS * n_adds)``, ``In(COUNTER_BITS * n_values)``
        What the counters count, add and show: bit ``i``, and value ``j`` in bits ``j * COUNTER_BITS`` up.
    ctr_addr, ctr_data : ``In(16)``, ``Out(COUNTER_BITS)``
        Counter ``ctr_addr`` (combinational; 0 beyond the last).
    smp_every, smp_addr, smp_data, smp_count : with ``samples > 0``
        As :class:`~step_hdl.mapper.top.FabricTop`'s ports of the same names.

    Notes
    -----
    Counters are registers, updated at the clock edge; everything read back is combinational from them.
    """

    def __init__(self, names: list, sources: dict, sample_names=(), samples: int = 0):
        self.names, self.sources = list(names), dict(sources)
        self.sample_names, self.samples = list(sample_names), samples
        bad = [n for n in self.names if n not in self.sources or self.sources[n][0] not in KINDS]
        missing = [n for n in self.sample_names if n not in self.sources]
        problem = (f"counters without a source (kind one of {', '.join(KINDS)}): {', '.join(bad[:5])}" if bad else
                   "a 'cycles' counter of kind 'count' is needed (stamps and the sampler read it)"
                   if self.sources.get("cycles", ("",))[0] != "count" else
                   f"sampled counters that are not counters: {', '.join(missing[:5])}" if missing else None)
        if problem:
            not_elaborated(self)  # no 'created but never used' warning for a rejected component
            raise ValueError(f"Instruments: {problem}")

        def count(kind):
            return 1 + max([i for k, i in self.sources.values() if k in kind] or [-1])
        self.n_events, self.n_adds, self.n_values = count(("count", "stamp")), count(("add",)), count(("value",))
        members = {"live": In(1), "events": In(max(1, self.n_events)),
                   "adds": In(max(1, COUNTER_BITS * self.n_adds)), "values": In(max(1, COUNTER_BITS * self.n_values)),
                   "ctr_addr": In(16), "ctr_data": Out(COUNTER_BITS)}
        if samples:
            members.update({"smp_every": In(COUNTER_BITS), "smp_addr": In(range(samples)),
                            "smp_data": Out(COUNTER_BITS * len(self.sample_names)),
                            "smp_count": Out(range(samples + 1))})
        super().__init__(members)

    def key(self) -> str:
        """What makes two banks one Verilog module: their counters, sources and sampler."""
        text = json.dumps([self.names, sorted(self.sources.items()), self.sample_names, self.samples])
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def elaborate(self, platform):
        m = Module()
        live = self.live
        counters = {}
        cycles = Signal(COUNTER_BITS, name="ctr_cycles")
        for name in self.names:
            kind, i = self.sources[name]
            if kind == "value":
                counters[name] = self.values[i * COUNTER_BITS:(i + 1) * COUNTER_BITS]
                continue
            c = cycles if name == "cycles" else Signal(COUNTER_BITS, name="ctr_" + name.replace(".", "__"))
            if kind == "count":
                with m.If(live):
                    m.d.sync += c.eq(c + self.events[i])
            elif kind == "add":
                with m.If(live):
                    m.d.sync += c.eq(c + self.adds[i * COUNTER_BITS:(i + 1) * COUNTER_BITS])
            else:       # stamp
                with m.If(live & self.events[i]):
                    m.d.sync += c.eq(cycles + 1)
            counters[name] = c
        table = Array([counters[n] for n in self.names])
        with m.If(self.ctr_addr < len(self.names)):
            m.d.comb += self.ctr_data.eq(table[self.ctr_addr])
        if self.samples:
            self._sampler(m, counters, cycles)
        return m

    def _sampler(self, m, counters, cycles):
        """The counters of :attr:`sample_names` into a memory, one row every ``smp_every`` cycles."""
        row = Cat(*[counters[n] for n in self.sample_names])
        m.submodules.samples = mem = memory.Memory(shape=len(row), depth=self.samples, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        count = Signal(range(self.samples + 1), name="smp_rows")
        next_at = Signal(COUNTER_BITS, name="smp_next")
        with m.If(~self.live):
            m.d.sync += next_at.eq(self.smp_every)
        take = self.live & (self.smp_every != 0) & (cycles == next_at) & (count < self.samples)
        m.d.comb += [wp.addr.eq(count), wp.data.eq(row), wp.en.eq(take),
                     rp.addr.eq(self.smp_addr), self.smp_data.eq(rp.data), self.smp_count.eq(count)]
        with m.If(take):
            m.d.sync += [count.eq(count + 1), next_at.eq(next_at + self.smp_every)]
