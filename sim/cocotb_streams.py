"""cocotb 2 stream driver and monitor, and the generic unit-scenario test.

The driver and monitor use the stall model of :mod:`step_hdl.sim.streams`
(same seeds, same probabilities) on Amaranth's Verilog port names
(``<port>__payload``, ``<port>__valid``, ``<port>__ready``). Handshakes are
sampled in the read-only phase before a rising edge and driven after it, which
behaves the same on Icarus and Verilator.

``test_scenario`` is the cocotb test the RTL runner starts: it reads a
:class:`~step_hdl.sim.streams.Scenario` from the JSON file named by
``STEP_HDL_SCENARIO``, runs it, and writes the received tokens and the cycle
count to ``STEP_HDL_RESULT``.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from .stalls import Stalls


class StreamDriver:
    """Sends packed tokens on a DUT input stream."""

    def __init__(self, dut, name: str, stalls: Stalls):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.stalls = stalls
        self.sent = 0
        self.first = None
        self.clock = [0]
        self.valid.value = 0
        # an undriven payload is X under Icarus (0 under Verilator and the Amaranth simulator), and a unit's
        # ready may depend on it
        self.payload.value = 0

    async def send(self, values):
        """Call right after a rising edge; returns right after the last transfer's edge."""
        for v in values:
            while self.stalls():
                await RisingEdge(self.clk)
            self.valid.value = 1
            self.payload.value = v
            if self.first is None:
                self.first = self.clock[0]   # offered now
            while True:
                await ReadOnly()
                accepted = bool(self.ready.value)
                await RisingEdge(self.clk)
                if accepted:
                    break
            self.valid.value = 0
            self.sent += 1


class StreamMonitor:
    """Receives packed tokens from a DUT output stream until the done token."""

    def __init__(self, dut, name: str, stalls: Stalls, done_bit: int):
        self.clk = dut.clk
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.stalls = stalls
        self.done_bit = done_bit
        self.received: list[int] = []
        self.when: list[int] = []
        self.clock = [0]
        self.ready.value = 0

    async def run(self):
        while True:
            self.ready.value = 0 if self.stalls() else 1
            await ReadOnly()
            fire = bool(self.valid.value) and bool(self.ready.value)
            value = self.payload.value.to_unsigned() if fire else 0
            await RisingEdge(self.clk)
            if fire:
                self.received.append(value)
                self.when.append(self.clock[0])
                if value >> self.done_bit & 1:
                    self.ready.value = 0
                    return


async def reset(dut, cycles: int = 2):
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def write_config(dut, writes):
    if not writes:
        return
    for w in writes:
        dut.cfg__valid.value = 1
        dut.cfg__payload.value = w
        await RisingEdge(dut.clk)
    dut.cfg__valid.value = 0


@cocotb.test()
async def test_scenario(dut):
    """Run the scenario named by STEP_HDL_SCENARIO; write outputs to STEP_HDL_RESULT."""
    with open(os.environ["STEP_HDL_SCENARIO"]) as f:
        sc = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    drivers = {p: StreamDriver(dut, p, Stalls(sc["seed"] * 1000 + k, sc["p_gap"]))
               for k, p in enumerate(sc["inputs"])}
    monitors = {p: StreamMonitor(dut, p, Stalls(sc["seed"] * 1000 + 500 + k, sc["p_drop"]), done_bit)
                for k, (p, done_bit) in enumerate(sc["outputs"].items())}
    if hasattr(dut, "cfg__valid"):
        dut.cfg__valid.value = 0
    await reset(dut)
    await write_config(dut, sc["config"])
    clock = [0]   # one cycle counter shared by drivers and monitors (transfer cycles)
    for x in list(drivers.values()) + list(monitors.values()):
        x.clock = clock
    for p, d in drivers.items():
        cocotb.start_soon(d.send(sc["inputs"][p]))
    tasks = [cocotb.start_soon(m.run()) for m in monitors.values()]
    while not all(t.done() for t in tasks):
        await RisingEdge(dut.clk)
        clock[0] += 1
        if clock[0] > sc["max_cycles"]:
            break
    firsts = [d.first for d in drivers.values() if d.first is not None]
    result = {"outputs": {p: m.received for p, m in monitors.items()},
              # the last output transfer's cycle plus one, as on the Amaranth back-end (sim.streams)
              "cycles": max((m.when[-1] for m in monitors.values() if m.when), default=clock[0] - 1) + 1,
              "sent": {p: d.sent for p, d in drivers.items()},
              "first_in": min(firsts) if firsts else None,
              "out_cycles": {p: m.when for p, m in monitors.items()},
              "timeout": clock[0] > sc["max_cycles"]}
    with open(os.environ["STEP_HDL_RESULT"], "w") as f:
        json.dump(result, f)
    assert not result["timeout"], (f"no progress after {sc['max_cycles']} cycles: sent {result['sent']}, "
                                   f"received { {p: len(v) for p, v in result['outputs'].items()} }")
