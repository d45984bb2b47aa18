"""Per-program settings: configuration registers written through one small port.

Every unit has a ``cfg`` port, a stream of ``(addr, data)`` writes that the
unit always accepts. A unit lists its registers; register ``k`` answers address ``k``. The
mapper (and tests) turn per-program settings — counts, strides, ranks, function
selects, base addresses — into a *configuration image*: the list of writes to
send before the first token. One build then serves many programs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import data, stream

from .params import ParamError

ADDR_BITS = 8
DATA_BITS = 32

#: payload of the configuration port
CONFIG_LAYOUT = data.StructLayout({"addr": unsigned(ADDR_BITS), "data": unsigned(DATA_BITS)})


def config_signature() -> stream.Signature:
    # ready is a real signal (tied high by the unit): a Const cannot be a Verilog port
    return stream.Signature(CONFIG_LAYOUT)


@dataclass(frozen=True)
class Reg:
    """One configuration register."""

    name: str
    width: int
    init: int = 0
    signed: bool = False
    doc: str = ""

    def check(self, owner: str, value: int) -> int:
        lo, hi = ((-(1 << (self.width - 1)), (1 << (self.width - 1)) - 1) if self.signed
                  else (0, (1 << self.width) - 1))
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ParamError(f"{owner}: register {self.name} takes {lo}..{hi}, got {value!r}")
        return value & ((1 << DATA_BITS) - 1)


class ConfigRegs:
    """A unit's register file: signals in hardware, an image builder in Python."""

    def __init__(self, owner: str, regs: list[Reg]):
        if len(regs) > 1 << ADDR_BITS:
            raise ParamError(f"{owner}: {len(regs)} registers exceed the {1 << ADDR_BITS} addresses")
        for r in regs:
            if not 1 <= r.width <= DATA_BITS:
                raise ParamError(f"{owner}: register {r.name} width {r.width} not in 1..{DATA_BITS}")
        self.owner = owner
        self.regs = list(regs)
        self.index = {r.name: k for k, r in enumerate(regs)}
        self.signals = {r.name: Signal(signed(r.width) if r.signed else unsigned(r.width), init=r.init,
                                       name=f"cfg_{r.name}") for r in regs}

    def __getitem__(self, name: str) -> Signal:
        return self.signals[name]

    def elaborate(self, m: Module, port) -> None:
        """Decode writes from ``port`` into the registers (always ready)."""
        m.d.comb += port.ready.eq(1)
        with m.If(port.valid):
            with m.Switch(port.payload.addr):
                for k, r in enumerate(self.regs):
                    with m.Case(k):
                        m.d.sync += self.signals[r.name].eq(port.payload.data[:r.width])

    def decoded(self, m: Module, port, name, fn, init: int, width: int = 1) -> Signal:
        """A register of ``width`` bits holding ``fn(value)`` of register ``name``, decoded from the write
        itself, so it changes in the same cycle as the register (a token may follow the last write by one
        cycle) while the logic that reads it starts at a flip-flop. ``init``: its value for the register's
        reset value. ``name`` may be a tuple of registers: ``fn`` then takes one value per register, the
        written one from the write and the others from their registers."""
        names = (name,) if isinstance(name, str) else tuple(name)
        # (a name a netlist carries as it is: a lambda's "<lambda>" broke the Gowin router's net lookup)
        suffix = re.sub(r"\W", "_", getattr(fn, "__name__", "flag"))
        flag = Signal(width, init=init, name=f"cfg_{'_'.join(names)}_{suffix}")
        for n in names:
            k, r = self.index[n], self.regs[self.index[n]]
            value = port.payload.data[:r.width]
            args = [(value.as_signed() if r.signed else value) if o == n else self.signals[o] for o in names]
            with m.If(port.valid & (port.payload.addr == k)):
                m.d.sync += flag.eq(fn(*args))
        return flag

    def count_flags(self, m: Module, port, names: list) -> tuple[list, list, list]:
        """For count registers ``names``: ``count - 1`` of each (one bit wider, negative for 0), and whether
        it is 1 and whether it is 2, registers decoded from its writes (:meth:`decoded`): what a counter
        that counts down from ``count - 1`` restarts with, and its flags for the last step and the one
        before."""
        def less1(count):
            return Cat(count, Const(0, 1)).as_signed() - 1

        def is_one(count):
            return count == 1

        def is_two(count):
            return count == 2
        regs = [self.regs[self.index[n]] for n in names]
        return ([self.decoded(m, port, n, less1, (r.init - 1) & ((1 << (r.width + 1)) - 1), r.width + 1)
                 for n, r in zip(names, regs)],
                [self.decoded(m, port, n, is_one, int(r.init == 1)) for n, r in zip(names, regs)],
                [self.decoded(m, port, n, is_two, int(r.init == 2)) for n, r in zip(names, regs)])

    def image(self, **values) -> list[tuple[int, int]]:
        """The writes that set the named registers (others keep their reset values)."""
        unknown = set(values) - set(self.index)
        if unknown:
            raise ParamError(f"{self.owner}: no register(s) {sorted(unknown)}; registers: {list(self.index)}")
        return [(self.index[k], self.regs[self.index[k]].check(self.owner, v)) for k, v in values.items()]

    @staticmethod
    def pack(write: tuple[int, int]) -> int:
        addr, value = write
        return addr | (value << ADDR_BITS)
