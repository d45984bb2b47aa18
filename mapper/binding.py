"""Binding: every node of a lowered graph to one unit instance of the fabric."""

from __future__ import annotations

from dataclasses import dataclass

from .fabric import Fabric, FabricError
from .sizing import needed_units
from .fusion import unit_label, units


@dataclass(frozen=True)
class Binding:
    """``instances[node name] = (kind, index)``: the node runs on unit ``kind`` number ``index``."""

    fabric: Fabric
    instances: dict

    def report(self) -> dict:
        used = needed_units_from(self.instances)
        return {"units": {k: {"used": used.get(k, 0), "available": self.fabric.units.get(k, 0)}
                          for k in sorted(set(used) | set(self.fabric.units))},
                "nodes": {n: f"{k}#{i}" for n, (k, i) in self.instances.items()}}


def needed_units_from(instances) -> dict:
    """Units of each kind the binding uses (a unit that runs a chain of nodes once)."""
    out: dict = {}
    for kind, _ in set(instances.values()):
        out[kind] = out.get(kind, 0) + 1
    return out


def bind(graph, fabric: Fabric) -> Binding:
    """Bind ``graph``'s nodes to ``fabric``'s units, or raise a :class:`FabricError` listing what is missing."""
    problems = []
    unit_of = {n: head for head, (_, nodes) in units(graph).items() for n in nodes}
    for node in graph.nodes.values():
        for port, ref in node.inputs.items():
            if ref is None or unit_of.get(ref.node.name, ref.node.name) == unit_of.get(node.name):
                continue        # a stream inside one unit (a float MatMul's group sums) is never a token
            t = ref.type.dtype
            rows = getattr(t, "rows", None)
            # physical tiles: P x P, or the partial ones of row-tiled streams ([1, P] rows, [1, 1] scalars),
            # narrow table rows ([1, c], c < P: an index table's (start, length)) and the [P, 1] column pieces
            # of row reductions
            if rows is not None and (t.rows, t.cols) not in ((fabric.tile, fabric.tile), (1, fabric.tile),
                                                             (fabric.tile, 1)) and \
                    not (t.rows == 1 and t.cols < fabric.tile):
                problems.append(f"{node.kind} '{node.name}' port '{port}' carries {t} tiles; the fabric's "
                                f"physical tile is {fabric.tile}x{fabric.tile} (or [1, {fabric.tile}] rows; "
                                f"run the tiling pass first)")
        if node.kind == "Map" and node.p("fn").name not in fabric.map_functions:
            problems.append(f"Map '{node.name}' needs function {node.p('fn').name!r}; the fabric's Map units "
                            f"support {', '.join(fabric.map_functions)}")
    need = needed_units(graph)
    for kind, n in sorted(need.items()):
        have = fabric.units.get(kind, 0)
        if n > have:
            names = [unit_label(k, nodes) for k, nodes in units(graph).values() if k == kind] or \
                [x.name for x in graph.nodes.values() if x.kind == kind]
            problems.append(f"the graph needs {n} {kind} unit(s) ({', '.join(names[:6])}"
                            f"{', ...' if len(names) > 6 else ''}); the fabric has {have}")
    if problems:
        raise FabricError("graph does not fit the fabric:\n  " + "\n  ".join(problems))
    counters: dict[str, int] = {}
    instances = {}

    def instance(kind):
        counters[kind] = counters.get(kind, 0) + 1
        return kind, counters[kind] - 1

    for kind, nodes in units(graph).values():
        unit = instance(kind)
        for name in nodes:      # a buffer's Streamify is counted as a unit of its own, as fabrics list them
            instances[name] = instance("Streamify") if graph.nodes[name].kind == "Streamify" else unit
    return Binding(fabric, instances)
