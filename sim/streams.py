"""Amaranth testbench helpers: stream senders and receivers with random stalls.

The same stall model is used by the cocotb drivers (:mod:`step_hdl.sim.cocotb_streams`):
a sender leaves a valid gap before a token with probability ``p_gap``; a
receiver drops ``ready`` in a cycle with probability ``p_drop``. Both draw from
``random.Random(seed)`` so a failing scenario replays exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In

from .stalls import Stalls


def stream_ports(component: wiring.Component) -> tuple[list[str], list[str]]:
    """Names of a component's stream inputs and outputs (the ``cfg`` port excluded)."""
    ins, outs = [], []
    for name, member in component.signature.members.items():
        if not member.is_signature or not isinstance(member.signature, stream.Signature) or name == "cfg":
            continue
        (ins if member.flow == In else outs).append(name)
    return ins, outs


async def send(ctx, port, values, stalls: Stalls, offered=None):
    """Send packed tokens on an input stream, with random valid gaps.

    ``offered`` (optional) is called when a token's ``valid`` is first raised (after its gap)."""
    raw = port.payload.as_value() if hasattr(port.payload, "as_value") else port.payload
    for v in values:
        while stalls():
            await ctx.tick()
        if offered is not None:
            offered()
        ctx.set(port.valid, 1)
        ctx.set(raw, v)
        # (a loop of samples, not tick().until(): an unfinished until() raises at garbage collection)
        while not (await ctx.tick().sample(port.ready))[-1]:
            pass
        ctx.set(port.valid, 0)


async def receive(ctx, port, stalls: Stalls, done_bit: int, into: list, when: list | None = None,
                  clock: list | None = None):
    """Collect packed tokens from an output stream until the done token, with random ready drops.

    With ``when`` and ``clock`` (a one-element cycle counter), the cycle of each
    transfer is appended to ``when``.
    """
    raw = port.payload.as_value() if hasattr(port.payload, "as_value") else port.payload
    while True:
        ctx.set(port.ready, 0 if stalls() else 1)
        _, _, valid, ready, value = await ctx.tick().sample(port.valid, port.ready, raw)
        if valid and ready:
            into.append(value)
            if when is not None:
                when.append(clock[0])
            if value >> done_bit & 1:
                ctx.set(port.ready, 0)
                return


async def write_config(ctx, port, writes: list[int]):
    """Write a configuration image (packed ``addr | data << 8`` words), one per cycle."""
    for w in writes:
        ctx.set(port.valid, 1)
        ctx.set(port.payload.as_value(), w)
        await ctx.tick()
    ctx.set(port.valid, 0)


@dataclass
class Scenario:
    """One unit test run: inputs per port, expected outputs per port, stall settings.

    All token values are packed integers (see :class:`step_hdl.units.layout.TokenFormat`).
    """

    inputs: dict[str, list[int]]
    outputs: dict[str, int]            # output port -> bit index of its done flag
    config: list[int] = field(default_factory=list)
    seed: int = 0
    p_gap: float = 0.3
    p_drop: float = 0.3
    max_cycles: int = 200_000

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "outputs": self.outputs, "config": self.config, "seed": self.seed,
                "p_gap": self.p_gap, "p_drop": self.p_drop, "max_cycles": self.max_cycles}


class SimTimeout(AssertionError):
    """A scenario did not finish: probably a deadlock in the unit."""


def run_amaranth(component: wiring.Component, sc: Scenario, vcd: str | None = None,
                 timing: dict | None = None, checks=None) -> tuple[dict, int]:
    """Run a scenario on the Amaranth simulator; return (outputs per port, cycles).

    ``timing``, if given, receives ``first_in`` (the cycle the first input token
    is offered: its ``valid`` raised) and ``out_cycles`` (per output port, the
    cycle of each transfer), counted from the end of configuration. The cycles
    returned are the last output transfer's cycle plus one, as on the cocotb
    back-ends (:mod:`step_hdl.sim.cocotb_streams`), so every back-end counts alike. ``checks``, if given,
    is called once the component is elaborated and returns pairs of values that must be equal in every
    cycle (an ``AssertionError`` names the first cycle where they are not).
    """
    import sys

    from amaranth.sim import Simulator
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # wide payloads (toolchain notes)
    results = {p: [] for p in sc.outputs}
    when = {p: [] for p in sc.outputs}
    progress = {p: 0 for p in sc.inputs}
    cycles = [0]
    first_in = []
    sim = Simulator(component)
    sim.add_clock(1e-8)

    async def after_config(ctx, writer: bool):
        # one testbench writes the configuration (one write per cycle); every sender and receiver starts
        # when it is written, as under cocotb, so the stall draws line up cycle for cycle on every back-end
        if writer and sc.config:
            await write_config(ctx, component.cfg, sc.config)
        else:
            for _ in sc.config:
                await ctx.tick()

    def make_sender(k, p):
        async def tb(ctx):
            await after_config(ctx, k == 0)
            stalls = Stalls(sc.seed * 1000 + k, sc.p_gap)
            port = getattr(component, p)

            def offered():
                if not first_in:
                    first_in.append(cycles[0])
            for v in sc.inputs[p]:
                await send(ctx, port, [v], stalls, offered)
                progress[p] += 1
        return tb

    def make_receiver(k, p):
        async def tb(ctx):
            await after_config(ctx, not sc.inputs and k == 0)
            await receive(ctx, getattr(component, p), Stalls(sc.seed * 1000 + 500 + k, sc.p_drop),
                          sc.outputs[p], results[p], when[p], cycles)
        return tb

    async def watchdog(ctx):
        while True:
            await ctx.tick()
            cycles[0] += 1

    for k, p in enumerate(sc.inputs):
        sim.add_testbench(make_sender(k, p), background=True)
    for k, p in enumerate(sc.outputs):
        sim.add_testbench(make_receiver(k, p))
    sim.add_process(watchdog)

    if checks is not None:
        pairs = list(checks())

        async def check(ctx):
            while True:
                for k, (a, b) in enumerate(pairs):
                    if ctx.get(a) != ctx.get(b):
                        raise AssertionError(f"check {k}: {ctx.get(a)} != {ctx.get(b)} in cycle {cycles[0]}")
                await ctx.tick()
        sim.add_testbench(check, background=True)

    async def limit(ctx):
        for _ in range(sc.max_cycles):
            await ctx.tick()
        raise SimTimeout(f"no progress after {sc.max_cycles} cycles: inputs sent "
                         f"{ {p: f'{progress[p]}/{len(sc.inputs[p])}' for p in sc.inputs} }, outputs received "
                         f"{ {p: len(v) for p, v in results.items()} } (deadlock or missing done token)")
    sim.add_testbench(limit, background=True)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    cfg = len(sc.config)   # cycles spent on configuration writes do not count (as under cocotb)
    if timing is not None:
        timing["first_in"] = (first_in[0] - cfg) if first_in else None
        timing["out_cycles"] = {p: [c - cfg for c in v] for p, v in when.items()}
    last = max((v[-1] for v in when.values() if v), default=cycles[0] - 1)
    return results, last + 1 - cfg
