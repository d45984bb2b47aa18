"""Fault injection for RTL runs: random DRAM latency jitter and random back-pressure.

A fabric whose units keep the stream contract computes the same outputs
whatever the memory's timing; :class:`DramFaults` makes the simulation-only
:class:`~step_hdl.sim.dram.DramModel` vary that timing at random (from a seed,
so a run is reproducible) to show it:

* ``jitter``: in a cycle it may issue, a DRAM channel holds its next block back
  with this probability (so each block's latency grows by a random number of
  cycles, and the blocks behind it wait too);
* ``refuse``: a memory port's request is refused (``ready`` low) in a cycle
  with this probability: back-pressure on every load's address requests and
  every store's writes, the fabric's outputs;
* ``hold``: a response that is ready is held back (``valid`` not yet raised)
  in a cycle with this probability; once raised, ``valid`` stays high until the
  transfer, as the stream contract requires.

Probabilities are in 1/256 steps. Every source of randomness is its own
32-bit linear feedback shift register, stepped every cycle, seeded from
``seed`` and its position, so the pattern is the same on every back-end.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Signal

__all__ = ["DramFaults", "coin"]


@dataclass(frozen=True)
class DramFaults:
    """Probabilities (0 to 1) of the three faults and the seed of their pattern; see the module docstring."""

    jitter: float = 0.0
    refuse: float = 0.0
    hold: float = 0.0
    seed: int = 1

    def __post_init__(self):
        for name in ("jitter", "refuse", "hold"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"DramFaults: {name} must be a probability in [0, 1), got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 31:
            raise ValueError(f"DramFaults: seed must be an integer in 0 .. 2**31 - 1, got {self.seed!r}")

    @property
    def any(self) -> bool:
        return bool(self.jitter or self.refuse or self.hold)

    def threshold(self, p: float) -> int:
        """A cycle is faulty when 8 random bits are below this."""
        return round(p * 256)


# taps of a maximal-length 32-bit Galois LFSR (x^32 + x^22 + x^2 + x + 1)
_TAPS = 0x80200003


def coin(m: Module, faults: DramFaults, p: float, salt: int, name: str) -> Signal:
    """A signal that is high in a random ``p`` of the cycles (its own LFSR, seeded by ``faults.seed`` and
    ``salt``); constant low when ``p`` is 0."""
    out = Signal(name=name)
    if not p:
        return out
    state = (faults.seed * 0x9E3779B1 + salt * 0x85EBCA77 + 1) & 0xFFFFFFFF or 1
    lfsr = Signal(32, init=state, name=f"{name}_lfsr")
    m.d.sync += lfsr.eq((lfsr >> 1) ^ (lfsr[0].replicate(32) & _TAPS))
    m.d.comb += out.eq(lfsr[:8] < faults.threshold(p))
    return out
