"""The fabric's Verilog: one module per distinct unit design and FIFO shape, and the synthesizable top level.

A design has many units of one design (class and structural parameters; their per-program settings live in
configuration registers): :func:`unit_modules` converts each design's unit once, and each FIFO shape once,
cached under the build folder by what it is and the generator's source (so designs that share a unit design
share its conversion too); :class:`~step_hdl.mapper.top.FabricTop` instantiates them
(:mod:`~step_hdl.mapper.shared`). :func:`fabric_verilog` is the top level a synthesis or a user's own testbench
takes; the simulation harness around it is ``step_hdl.sim.fabric``'s.
"""

from __future__ import annotations

from amaranth.hdl import Shape

from step_hdl.sources import fingerprint
from step_hdl.units.stream import Queue
from step_hdl.units.verilog import build_root, submodule, to_verilog, write_whole

from .design import Design, built_units
from .shared import design_groups, module_name, module_ports
from .top import FabricTop

#: what the unit modules' Verilog comes from: with everything it imports (the units, the bit-exact constants of
#: ``step_hdl.functions``) the source part of their cache key
UNIT_GENERATOR = ("step_hdl.mapper.verilog", "step_hdl.mapper.top")


def unit_modules(design: Design) -> tuple[dict, str]:
    """``(shared, Verilog)`` for :class:`FabricTop`'s ``shared``: one module per distinct unit design of
    ``design`` (:mod:`step_hdl.mapper.shared`) and one per FIFO width and depth, each converted once and
    cached by what it is and the generator's source, so designs that share a unit design share its
    conversion too."""
    units = built_units(design)
    shared: dict = {"units": {}, "queues": {}}
    texts = []
    source = fingerprint(UNIT_GENERATOR)      # hashes every generator source file: once, not per module

    def module(mod: str, make) -> frozenset:
        path = build_root() / "verilog" / "units" / f"{mod}-{source}.v"
        if path.exists():
            text = path.read_text()
        else:
            text = submodule(to_verilog(make(), mod))
            write_whole(path, text)
        texts.append(text)
        return module_ports(text, mod)
    for specs in design_groups(design.units):
        mod = module_name(specs[0])
        ports = module(mod, lambda: units[specs[0].name])
        for spec in specs:
            shared["units"][spec.name] = (mod, ports)
    queues: dict = {}
    for e in design.edges:
        shape = getattr(units[e.src], e.src_port).payload.shape()
        queues.setdefault((Shape.cast(shape).width, e.depth), (shape, []))[1].append(e.label)
    for (width, depth), (shape, labels) in queues.items():
        mod = f"queue_w{width}_d{depth}"
        ports = module(mod, lambda: Queue(shape, depth))
        for label in labels:
            shared["queues"][label] = (mod, ports)
    return shared, "".join("\n" + t for t in texts)


def fabric_verilog(design: Design, name: str) -> str:
    """Verilog of ``design``'s synthesizable top level (module ``name``: no testbench counters, no DRAM model),
    with one module per distinct unit design and FIFO shape."""
    modules, unit_text = unit_modules(design)
    return to_verilog(FabricTop(design, counters=False, shared=modules), name) + unit_text
