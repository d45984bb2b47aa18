"""Where a placed design loses its clock: nextpnr's timing endpoints, grouped by the instance they are in.

nextpnr's critical path names one path; a design whose clock is set by wire
lengths has thousands of paths within a nanosecond of it, and moving the first
one moves the clock very little. With ``--detailed-timing-report`` nextpnr's
JSON report lists, for every timing endpoint (a flip-flop's data, clock-enable
or reset input, a DSP block's operand input, a block RAM's or LUT RAM's write
input), the latest arrival of a signal there after the clock edge.
:func:`instance_timing` groups them by the first level of the design's hierarchy
(a fabric's units ``u_*`` and edge FIFOs ``q_*``; ``(top)`` for cells of the
top module itself), so a report says which units hold the clock back and how
many of their endpoints miss a given period.
"""

from __future__ import annotations

import re

__all__ = ["TOP", "instance_timing", "instances_of"]

#: the instance name of the top module's own cells
TOP = "(top)"


def _kind(port: str) -> str:
    """``enable``, ``reset`` or ``data``: what an endpoint's input port is (ECP5 cell port names)."""
    if port.startswith(("CE", "OCE")):
        return "enable"
    if port == "LSR" or port.startswith("RST"):
        return "reset"
    return "data"


def instances_of(rtlil: str, top: str) -> set[str]:
    """The names of the submodule instances in module ``top`` of the RTLIL text ``rtlil``: what a flattened
    netlist's cell names start with (``u_load_x.``), unlike the top's own cells, whose names may have dots of
    their own (a ``lib.data`` field: ``o__payload.payload``)."""
    body = re.search(rf"^module \\{re.escape(top)}\n(.*?)^end$", rtlil, re.M | re.S)
    if body is None:
        raise ValueError(f"no module {top!r} in the RTLIL text")
    return {m.group(1) for m in re.finditer(r"^  cell \\\S+ \\(\S+)$", body.group(1), re.M)}


def instance_timing(report: dict, period_ns: float, instances: set[str] | None = None) -> dict | None:
    """The timing endpoints of nextpnr's ``--report`` JSON (written with ``--detailed-timing-report``) per
    instance; ``None`` when the report has no detailed timing.

    Returns ``{"period_ns", "endpoints", "late", "late_by_kind", "instances"}``: endpoints in all, those whose
    latest arrival is after ``period_ns`` (``late``, the setup time not counted; by the kind of input,
    ``enable``, ``reset`` or ``data``), and per instance, slowest first, ``{"instance", "endpoints", "late",
    "late_enable", "worst_arrival_ns", "fmax_mhz"}``. ``instances``: the top's submodule instances (:func:`instances_of`); a cell whose name
    starts with none of them is the top's own; without them a cell belongs to its name's part before the
    first dot. ``fmax_mhz`` is ``1000 / worst_arrival_ns``: the instance's endpoints alone would allow that
    clock, less the setup time of the latest one, which the arrival does not include (on ECP5 0.1 ns at a
    flip-flop or DSP input, 0.4 ns at a LUT RAM's write port: a Queue's 3.41 ns critical path ends 3.02 ns).
    """
    nets = report.get("detailed_net_timings")
    if nets is None:
        return None
    if not period_ns > 0:
        raise ValueError(f"period_ns must be > 0, got {period_ns!r}")
    latest: dict[tuple, float] = {}
    for net in nets:
        for e in net.get("endpoints", ()):
            key = (e["cell"], e["port"])
            arrival = e["delay"][-1]        # [earliest, latest] arrival
            if arrival > latest.get(key, float("-inf")):
                latest[key] = arrival
    per: dict[str, dict] = {}
    by_kind = {"data": 0, "enable": 0, "reset": 0}
    for (cell, port), arrival in latest.items():
        name = cell.split(".", 1)[0] if "." in cell else TOP
        if instances is not None and name not in instances:
            name = TOP
        row = per.setdefault(name, {"instance": name, "endpoints": 0, "late": 0, "late_enable": 0,
                                    "worst_arrival_ns": 0.0})
        row["endpoints"] += 1
        if arrival > row["worst_arrival_ns"]:
            row["worst_arrival_ns"] = arrival
        if arrival > period_ns:
            kind = _kind(port)
            row["late"] += 1
            row["late_enable"] += kind == "enable"
            by_kind[kind] += 1
    rows = sorted(per.values(), key=lambda r: (-r["worst_arrival_ns"], r["instance"]))
    for r in rows:
        r["worst_arrival_ns"] = round(r["worst_arrival_ns"], 3)
        r["fmax_mhz"] = round(1000 / r["worst_arrival_ns"], 2) if r["worst_arrival_ns"] > 0 else None
    return {"period_ns": period_ns, "endpoints": len(latest), "late": sum(by_kind.values()),
            "late_by_kind": by_kind, "instances": rows}
