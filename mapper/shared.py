"""Unit instances that share one Verilog module.

A fabric has many units of one design: the same class and structural parameters, their per-program
settings in configuration registers. Converting each instance on its own writes the same module once per
instance (and Verilator compiles each). Instead, :class:`SharedUnit` stands in for an instance inside the
top level: it has the unit's ports and attributes, and elaborates to an ``Instance`` of the design's one
module (converted once, by :func:`step_hdl.mapper.verilog.unit_modules`). The module's ports are the unit's
signature flattened with ``__`` (Amaranth's own naming), plus ``clk`` and ``rst`` where the design is
clocked.
"""

from __future__ import annotations

import hashlib
import json
import re

from amaranth.hdl import ClockSignal, Instance, ResetSignal, Shape, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["SharedUnit", "design_groups", "design_key", "module_name", "module_ports"]


def design_key(spec) -> str:
    """What makes two unit instances one design: the class and the structural parameters."""
    return json.dumps([spec.cls, spec.to_json()["params"]], sort_keys=True)


def design_groups(specs) -> list[list]:
    """The unit specs ``specs`` grouped by design (:func:`design_key`), each group in the specs' order, the
    groups in the order of their first spec."""
    groups: dict = {}
    for spec in specs:
        groups.setdefault(design_key(spec), []).append(spec)
    return list(groups.values())


def module_name(spec) -> str:
    """The Verilog module name of the design of ``spec`` (a :class:`~step_hdl.mapper.design.UnitSpec`)."""
    digest = hashlib.sha256(design_key(spec).encode()).hexdigest()[:10]
    return re.sub(r"[^A-Za-z0-9_]", "_", spec.cls).lower() + "_" + digest


def module_ports(verilog_text: str, name: str) -> frozenset:
    """The port names of module ``name`` in ``verilog_text`` (Amaranth's conversion of one unit)."""
    m = re.search(r"^module " + re.escape(name) + r"\(([^)]*)\);", verilog_text, re.M)
    if m is None:
        raise ValueError(f"no module {name} in the converted Verilog")
    return frozenset(p.strip() for p in m.group(1).split(",") if p.strip())


class SharedUnit(wiring.Component):
    """Stands in for ``unit`` in a top level: the same ports (and, through it, the same attributes: registers,
    parameters), elaborated as an ``Instance`` of ``module``, whose ports are ``ports``."""

    def __init__(self, unit, module: str, ports: frozenset):
        self._unit, self._module, self._ports = unit, module, ports
        super().__init__(unit.signature)
        self._plain_ports()
        self._delegate = True

    def _plain_ports(self):
        """Back every port that has a layout (a stream's payload) with a plain signal of its width, seen
        through the same layout: the top level still reads its fields, but its Verilog gets no wire per
        field of every instance's ports (they were about half of the MoE fabric's top-level lines)."""
        for path, member, value in self.signature.flatten(self):
            if isinstance(value, Value):
                continue
            shape = value.shape()
            plain = Signal(Shape.cast(shape), init=member._init_as_const.value, name="__".join(map(str, path)))
            _put(self, path, shape(plain))

    def __getattr__(self, name):
        # only for what the stub itself lacks (its ports are its own): the unit's registers, parameters
        if name.startswith("__") or not self.__dict__.get("_delegate"):
            raise AttributeError(name)
        return getattr(self._unit, name)

    def adopt(self, name: str, port) -> None:
        """Make this stub's port ``name`` the signals of ``port`` (another stub's port of the same stream),
        so the two instances are wired to each other directly: no second set of signals and no assignment
        between them in the top level (a FIFO between two units: most of the top level's netlist)."""
        for path, _member, value in port.signature.flatten(port):
            _put(self, (name, *path), value)

    def elaborate(self, platform):
        args = {}
        for path, member, value in self.signature.flatten(self):
            port = "__".join(map(str, path))
            if port not in self._ports:
                raise ValueError(f"shared unit module {self._module} has no port {port} (ports: "
                                 f"{', '.join(sorted(self._ports))})")
            args[("i_" if member.flow == In else "o_") + port] = Value.cast(value)
        if "clk" in self._ports:
            args["i_clk"] = ClockSignal()
        if "rst" in self._ports:
            args["i_rst"] = ResetSignal()
        return Instance(self._module, **args)


def _put(obj, path: tuple, value) -> None:
    """Set the member at ``path`` (names and array indices, as ``Signature.flatten`` gives them) of ``obj``."""
    for step in path[:-1]:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    if isinstance(path[-1], int):
        obj[path[-1]] = value
    else:
        setattr(obj, path[-1], value)
