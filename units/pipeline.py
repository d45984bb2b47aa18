"""Pipeline registers at a function's cut points.

A compute unit evaluates its function between its input handshake and its
output register. Where that logic is too deep for the clock (a matmul's
multipliers and adder tree, SiLU's multiplier and shifter), the function's
builder marks *cut points*: :meth:`Pipe.cut` puts a register on every value
crossing it. All the registers of a unit's pipeline load together when the
pipeline advances (``en``: the unit's output, or the stage behind the
pipeline, can take a token), so tokens keep their order and the unit keeps
II 1; a valid bit per stage (:meth:`Pipe.delay`) says which stages hold a
token. The unit's latency grows by the number of stages
(:attr:`Pipe.depth`).

A builder calls :meth:`cut` at most ``depth`` times, in data-flow order; cuts
past the budget are the identity (a build without a pipeline, ``depth`` 0, is
the combinational one). :meth:`finish` adds the stages the builder did not
use at the end, so every function of a unit has the same depth.

Multipliers between two cuts (operands registered, then their products) are
what an FPGA's DSP blocks hold with their own input and output registers:
:meth:`Pipe.products` asks the platform the unit is elaborated for (the FPGA
flow's, ``fpga.ecp5``) for such blocks; with no platform (the simulators) or
none to give, the builder cuts and multiplies in logic, with the same values
in the same cycles.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Value

__all__ = ["Pipe", "NO_PIPE"]


class Pipe:
    """``depth`` stages of registers of module ``m``, loading when ``en`` is high.

    Parameters
    ----------
    m : Module or None
        Where the registers go (None only with ``depth`` 0).
    en : Value or None
        The pipeline's advance: every register loads in a cycle where it is high.
    depth : int
        Stages (0: no register, every cut is the identity).
    prefix : str
        Prefix of the registers' names (``{prefix}{name}{stage}_{k}``).
    platform : object, optional
        What the unit is elaborated for; its ``registered_products`` (if it has one) gives
        :meth:`products` hard multipliers.
    """

    def __init__(self, m, en, depth: int, prefix: str = "", platform=None):
        if depth < 0:
            raise ValueError(f"Pipe: depth must be >= 0, got {depth}")
        self.m, self.en, self.depth, self.prefix, self.platform = m, en, depth, prefix, platform
        self.used = 0

    def sub(self, prefix: str) -> "Pipe":
        """A pipeline of the same stages, enable and platform for one function of the unit (its registers
        named ``prefix``...); :data:`NO_PIPE` without stages."""
        return Pipe(self.m, self.en, self.depth, prefix, self.platform) if self.depth else NO_PIPE

    def _stage(self, values, name: str, stage: int) -> list:
        out = []
        for k, v in enumerate(values):
            v = Value.cast(v)
            r = Signal(v.shape(), name=f"{self.prefix}{name}{stage}_{k}")
            with self.m.If(self.en):
                self.m.d.sync += r.eq(v)
            out.append(r)
        return out

    def cut(self, values, name: str) -> list:
        """``values`` registered at the next stage (the values themselves once the stages are used up)."""
        if self.used == self.depth:
            return list(values)
        self.used += 1
        return self._stage(values, name, self.used)

    def products(self, pairs, name: str) -> list | None:
        """The products ``a * b`` of ``pairs`` through the next two stages (the operands registered, then
        the products) in the platform's registered multiplier blocks; ``None`` (no stage used) when there
        are not two stages left or the platform has no such blocks for them: the builder then cuts the
        operands, multiplies and cuts the products itself, which is the same in every cycle."""
        give = getattr(self.platform, "registered_products", None)
        if give is None or self.depth - self.used < 2:
            return None
        # the blocks load where the builder's registers would: with ``en``, under the conditions the builder
        # is in (a unit's function is built inside the case of its selector)
        ce = Signal(name=f"{self.prefix}{name}_ce")
        self.m.d.comb += ce.eq(self.en)
        out = give(self.m, [(Value.cast(a), Value.cast(b)) for a, b in pairs], ce, f"{self.prefix}{name}")
        if out is not None:
            self.used += 2
        return out

    def finish(self, values, name: str) -> list:
        """``values`` through the stages no :meth:`cut` took, so they leave the pipeline's last stage."""
        values = list(values)
        while self.used < self.depth:
            values = self.cut(values, name)
        return values

    def delay(self, values, name: str, before_last: bool = False):
        """``values`` through all ``depth`` stages (what travels beside the data: valid bits, a token's stop
        and done); with ``before_last``, ``(last, before)``: also what the last stage loads next (the values
        after ``depth - 1`` stages)."""
        values = before = list(values)
        for s in range(self.depth):
            before, values = values, self._stage(values, name, s + 1)
        return (values, before) if before_last else values


#: the pipeline of a combinational build: no stage
NO_PIPE = Pipe(None, None, 0)
