"""The random stall model shared by the Amaranth and cocotb stream drivers (standard library only)."""

from __future__ import annotations

import random


class Stalls:
    """A reproducible stream of stall decisions: ``True`` with probability ``p``.

    A sender leaves a valid gap before a token when it is true; a receiver
    drops ``ready`` for a cycle. Seeded, so a failing scenario replays exactly.
    """

    def __init__(self, seed: int, p: float):
        self.rng = random.Random(seed)
        self.p = p

    def __call__(self) -> bool:
        return self.p > 0 and self.rng.random() < self.p
