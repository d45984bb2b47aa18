"""Sources: streams whose values are program input, written with the configuration.

:class:`SelectorSource` plays the language's ``SelectorSource``: a routing
decision per element (e.g. an MoE router's expert choices), which in a
program comes from outside the graph. :class:`IndexSource` plays the
language's ``IndexSource``: a stream of ``[1, 1]`` int32 indices (e.g. the
addresses of a gather). The values are part of the program's configuration
image (one register write per element), so new values need no new build and
move no off-chip bytes.

Both are a :class:`ConfiguredSource`: a memory of ``capacity`` payloads filled
by appending writes to register ``value``, emitted in order after a write to
``start``. They differ only in the payload format and how a program's values
become register words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.lib import memory

from .base import not_elaborated, StepUnit
from .config import DATA_BITS, Reg
from .layout import SelectorFormat, TokenFormat
from .offchip import INDEX
from .params import ParamError, Params, positive

__all__ = ["SourceParams", "IndexSourceParams", "ConfiguredSource", "SelectorSource", "IndexSource"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# one configuration write carries one value: a 32-bit index needs DATA_BITS >= 32
assert INDEX.width <= DATA_BITS, "an index no longer fits one configuration write"


def _check_common(owner: str, capacity, max_rank) -> None:
    positive(owner, "capacity", capacity)
    positive(owner, "max_rank", max_rank, minimum=0)


@dataclass(frozen=True)
class SourceParams(Params):
    """A :class:`SelectorSource`: selectors of ``n`` choices, at most ``capacity`` elements per program."""

    n: int = 2
    capacity: int = 64
    max_rank: int = 3

    def validate(self):
        positive(self.owner, "n", self.n)
        if self.n > DATA_BITS:
            raise ParamError(f"{self.owner}: n = {self.n} choices do not fit a {DATA_BITS}-bit configuration "
                             f"write")
        _check_common(self.owner, self.capacity, self.max_rank)


@dataclass(frozen=True)
class IndexSourceParams(Params):
    """An :class:`IndexSource`: at most ``capacity`` int32 indices per program, tokens up to ``max_rank``."""

    capacity: int = 64
    max_rank: int = 3

    def validate(self):
        _check_common(self.owner, self.capacity, self.max_rank)


class ConfiguredSource(StepUnit):
    """Common base: emit ``count`` configured payloads, then done.

    Subclasses set ``kind``, ``params_cls`` and ``value_signed``, and define
    :meth:`payload_format` and :meth:`encode_values` (a program's values ->
    register values of ``value``, one per element). The stored word is the raw
    payload (``payload_format().width`` bits, at most ``DATA_BITS``), so one
    configuration write appends one element.
    """

    params_cls: type = Params
    value_signed = False

    def __init__(self, params):
        if not isinstance(params, self.params_cls):
            not_elaborated(self)
            raise ParamError(f"{self.kind}: parameters must be {self.params_cls.__name__}, got {params!r}")
        super().__init__(params)

    def payload_format(self):
        raise NotImplementedError

    def encode_values(self, op_params: dict, values: list) -> list[int]:
        raise NotImplementedError

    def formats(self):
        return {"o": (True, TokenFormat(self.payload_format(), self.params.max_rank))}

    def registers(self):
        cap_bits = self.params.capacity.bit_length()
        width = self.payload_format().width
        what = "one signed 32-bit index" if self.value_signed else "one payload"
        return [Reg("count", cap_bits, 0, doc="elements of the stream"),
                Reg("value", width, 0, signed=self.value_signed, doc=f"append {what}"),
                Reg("start", 1, 0, doc="a write starts the stream")]

    def _check_capacity(self, values: list) -> None:
        if len(values) > self.params.capacity:
            raise ParamError(f"{self.kind}: {len(values)} elements exceed the unit's capacity "
                             f"{self.params.capacity}")

    def configure(self, op_params: dict, in_types: dict, values=None) -> list[int]:
        values = list(values) if values is not None else []
        self._check_capacity(values)
        regs = self.encode_values(op_params, values)
        words = [w for v in regs for w in self.config_image(value=v)]
        return words + self.config_image(count=len(values))

    def elaborate(self, platform):
        m = Module()
        p = self.params
        width = self.payload_format().width
        m.submodules.mem = mem = memory.Memory(shape=width, depth=p.capacity, init=[])
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        idx = self.regs.index
        cfg = self.cfg
        # registers by hand: 'value' appends instead of holding a value
        m.d.comb += cfg.ready.eq(1)
        count, wptr = Signal(range(p.capacity + 1)), Signal(range(p.capacity + 1))
        running, sent = Signal(), Signal(range(p.capacity + 1))
        with m.If(cfg.valid):
            with m.Switch(cfg.payload.addr):
                with m.Case(idx["count"]):
                    m.d.sync += count.eq(cfg.payload.data)
                with m.Case(idx["start"]):
                    m.d.sync += [running.eq(1), sent.eq(0)]
        m.d.comb += [wr.addr.eq(wptr), wr.data.eq(cfg.payload.data[:width]),
                     wr.en.eq(cfg.valid & (cfg.payload.addr == idx["value"]) & (wptr < p.capacity))]
        with m.If(wr.en):
            m.d.sync += wptr.eq(wptr + 1)

        o = self.o
        m.d.comb += rd.addr.eq(sent)
        with m.If(o.ready | ~o.valid):
            m.d.sync += o.valid.eq(0)
            with m.If(running):
                m.d.sync += [o.valid.eq(1), o.payload.stop.eq(0)]
                with m.If(sent == count):
                    m.d.sync += [o.payload.done.eq(1), o.payload.payload.eq(0), running.eq(0)]
                with m.Else():
                    m.d.sync += [o.payload.done.eq(0), o.payload.payload.eq(rd.data), sent.eq(sent + 1)]
        return m


class SelectorSource(ConfiguredSource):
    """Emit a configured sequence of selector tokens (STeP SelectorSource), then done.

    Parameters: :class:`SourceParams` ``(n, capacity, max_rank)``.
    Registers: ``count`` (elements), ``value`` (each write appends one
    selector mask, bit ``i`` = choice ``i``, to the unit's memory of
    ``capacity`` entries), ``start`` (a write starts the stream; the top level
    pulses it at start). The output is the rank-0 stream ``[count]``: ``count``
    data tokens, then the done token.

    Latency 1 (registered output), II 1. Combinational: none (``o.valid`` and
    the payload are registers; ``o.ready`` only enables their update).
    """

    kind = "SelectorSource"
    latency = 1
    params_cls = SourceParams

    def payload_format(self):
        return SelectorFormat(self.params.n)

    def configure(self, op_params: dict, in_types: dict, values=None) -> list[int]:
        """``values``: the selector masks (ints) of this program."""
        return super().configure(op_params, in_types, values)

    def encode_values(self, op_params: dict, values: list) -> list[int]:
        if op_params.get("n") != self.params.n:
            raise ParamError(f"SelectorSource: the node has n={op_params.get('n')!r} choices but the unit was "
                             f"built for n={self.params.n}")
        return [int(v) for v in values]


class IndexSource(ConfiguredSource):
    """Emit a configured sequence of ``[1, 1]`` int32 index tokens (STeP IndexSource), then done.

    Parameters: :class:`IndexSourceParams` ``(capacity, max_rank)``; the
    output ``o`` has the token format ``TokenFormat(INDEX, max_rank)`` of
    :mod:`step_hdl.units.offchip` (what ``RandomOffChipLoad.i_addr`` takes).
    Registers: ``count`` (elements), ``value`` (each write appends one signed
    32-bit index, two's complement in the 32-bit data word: one write per
    element, since ``DATA_BITS`` = 32), ``start`` (a write starts the stream;
    the top level pulses it at start). The output is the rank-0 stream
    ``[count]``: ``count`` data tokens, then the done token.

    Latency 1 (registered output), II 1. Combinational: none (``o.valid`` and
    the payload are registers; ``o.ready`` only enables their update).
    """

    kind = "IndexSource"
    latency = 1
    params_cls = IndexSourceParams
    value_signed = True

    def payload_format(self):
        return INDEX

    def configure(self, op_params: dict, in_types: dict, values=None) -> list[int]:
        """``values``: the indices (ints, or size-1 integer arrays) of this program; if ``None``,
        the node's own ``values`` parameter."""
        if values is None:
            values = op_params.get("values")
            if values is None:
                raise ParamError("IndexSource: no index values for this program (the node has no 'values'; "
                                 "pass values=[...])")
        return super().configure(op_params, in_types, values)

    def encode_values(self, op_params: dict, values: list) -> list[int]:
        length = op_params.get("length")
        if length is not None and getattr(length, "is_Integer", isinstance(length, int)) \
                and int(length) != len(values):
            raise ParamError(f"IndexSource: the node's length is {int(length)} but {len(values)} values were "
                             f"given")
        out = []
        for t, v in enumerate(values):
            arr = np.asarray(v)
            if arr.size != 1 or arr.dtype.kind not in "iu":
                raise ParamError(f"IndexSource: element {t} must be an integer, got {v!r}")
            x = int(arr.reshape(-1)[0])
            if not INT32_MIN <= x <= INT32_MAX:
                raise ParamError(f"IndexSource: element {t} = {x} does not fit int32 "
                                 f"({INT32_MIN}..{INT32_MAX})")
            out.append(x)
        return out
