"""Common base of the STeP hardware units.

A unit is an :class:`amaranth.lib.wiring.Component` with

* stream ports carrying the token layout of :mod:`step_hdl.units.layout`:
  inputs ``i``/``i0``/``i_<role>``, outputs ``o``/``o0``/``o_<role>``;
* a ``cfg`` port (:mod:`step_hdl.units.config`) for per-program settings;
* a frozen, validated parameter dataclass (:mod:`step_hdl.units.params`).

Port names follow the language's: operator port ``in`` is ``i``, ``in3`` is
``i3``, role ``sel`` is ``i_sel``; ``out`` is ``o``, ``out2`` is ``o2``, ``pad``
is ``o_pad``. :func:`hw_port` converts.
"""

from __future__ import annotations

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .config import ConfigRegs, Reg, config_signature
from .layout import TokenFormat
from .params import ParamError


def not_elaborated(*components) -> None:
    """Mark Amaranth components that are built but never elaborated (a unit rejected in its constructor, a
    unit or FIFO whose module is converted apart, a duplicate a sweep leaves out): no "created but never used"
    warning, which the tests turn into errors. The one place that sets Amaranth's private must-use flag."""
    for c in components:
        c._MustUse__silence = True


def reject(component, error):
    """Raise ``error`` (an exception, or the message of a :class:`ParamError`) from ``component``'s
    constructor, without Amaranth's "created but never used" warning."""
    not_elaborated(component)
    raise error if isinstance(error, Exception) else ParamError(error)


def hw_port(lang_port: str, output: bool) -> str:
    """Hardware port name of an operator port (``in`` -> ``i``, ``sel`` -> ``i_sel``, ``out1`` -> ``o1``)."""
    base, prefix = ("out", "o") if output else ("in", "i")
    if lang_port == base:
        return prefix
    if lang_port.startswith(base) and lang_port[len(base):].isdigit():
        return prefix + lang_port[len(base):]
    return f"{prefix}_{lang_port}"


def lang_port(hw: str) -> str:
    """Inverse of :func:`hw_port`."""
    prefix, rest = hw[0], hw[1:]
    base = "out" if prefix == "o" else "in"
    if rest == "":
        return base
    if rest.isdigit():
        return base + rest
    return rest.lstrip("_")


class StepUnit(wiring.Component):
    """Base class of the STeP units.

    Subclasses set ``kind`` (the language operator they implement, e.g.
    ``"Flatten"``) and define :meth:`formats` (hardware port -> (is_output,
    :class:`TokenFormat`)), :meth:`registers` and :meth:`configure`, which turns
    a language node's parameters and input stream types into the unit's
    configuration image.
    """

    kind = ""
    #: cycles from a token taken at an input to the first output token it makes being valid, with nothing
    #: pending: the pipeline registers on that path (0: combinational). The approximate model adds it to
    #: the FIFO cycle between units (``mapper.latency.chain_latency``).
    latency = 0
    #: it has a memory port ``mem`` (the top level arbitrates the off-chip units onto the DRAM's ports)
    memory_port = False
    #: it has a status output ``finished`` (1 once it has taken its input's done token: a store's program is
    #: done when every such unit has finished)
    finishes = False

    @classmethod
    def latency_of(cls, node, pipeline: bool = False) -> int:
        """:attr:`latency` of the unit built for the language node ``node`` on a fabric with (``pipeline``) or
        without pipelined functions (where it depends on those, a unit class says how)."""
        return cls.latency

    def __init__(self, params):
        self.params = params
        self.fmts: dict[str, tuple[bool, TokenFormat]] = self.formats()
        self.regs = ConfigRegs(type(self).__name__, self.registers())
        members = {"cfg": In(config_signature())}
        for port, (is_out, fmt) in self.fmts.items():
            members[port] = (Out if is_out else In)(stream.Signature(fmt.layout))
        members.update(self.extra_members())
        super().__init__(members)

    def extra_members(self) -> dict:
        """Ports besides ``cfg`` and the streams (a memory port, status outputs)."""
        return {}

    def formats(self) -> dict[str, tuple[bool, TokenFormat]]:
        raise NotImplementedError

    def registers(self) -> list[Reg]:
        return []

    def configure(self, op_params: dict, in_types: dict) -> list[int]:
        """Configuration image for a language node with ``op_params`` whose input ports
        (language names) have the stream types ``in_types``."""
        return []

    def config_image(self, **values) -> list[int]:
        """Packed configuration writes for the given register values."""
        return [ConfigRegs.pack(w) for w in self.regs.image(**values)]

    def fmt(self, port: str) -> TokenFormat:
        return self.fmts[port][1]

    def pack_inputs(self, inputs: dict) -> dict[str, list[int]]:
        """Packed tokens per hardware input port from ``{language port: (StreamType, tokens)}``."""
        return {hw_port(p, False): self.fmt(hw_port(p, False)).pack_all(toks) for p, (_, toks) in inputs.items()}

    def output_done_bits(self) -> dict[str, int]:
        """Every output port with the bit index of its done flag (what a Scenario collects)."""
        return {p: f.done_bit for p, (is_out, f) in self.fmts.items() if is_out}
