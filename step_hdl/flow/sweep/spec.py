"""What a sweep evaluates: :class:`SweepPoint`, and :func:`grid` that expands axes into points.

A point is a built-in workload with every parameter given (by its command-line
name, ``tile-b``), the fabric it runs on (physical tile, element type, fabric
fields) and the DRAM preset, and the evaluations to run on it: ``metrics``
(symbolic metrics with the workload's sizes), ``model`` (the approximate
model), ``sim`` (the RTL on Verilator). Points of one ``group`` that run in RTL
share one fabric (one Verilator build), as ``step-hdl compare`` does.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

from step_hdl.errors import StepError

#: the evaluations a point can ask for, in the order they run
EVALS = ("metrics", "model", "sim")
#: the axes a sweep takes beside a workload's own parameters
POINT_AXES = ("phys-tile", "dram")
FABRIC_PREFIX = "fabric."
#: the element type of a point that does not set one: the RTL's (``sim`` refuses fp32)
DEFAULT_DTYPE = "int16"


class SweepError(StepError):
    """A sweep definition that cannot run: an unknown axis, workload or evaluation, a bad value."""


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep.

    Parameters
    ----------
    workload : str
        A registry workload (``swiglu``, ``moe``, ``gqa``).
    params : dict
        Every parameter of the workload by its command-line name (:meth:`make` fills the defaults).
    tile : int
        The physical tile side ``P``.
    dram : str
        A DRAM preset (``sim.dram_timing.DRAM_PRESETS``).
    fabric : dict
        :class:`~step_hdl.mapper.fabric.Fabric` fields that replace the default fabric's (``mem_inflight``).
    evals : tuple of str
        Evaluations, a subset of :data:`EVALS`.
    group : str
        Points of one group evaluated in RTL share one fabric sized for all of them (one build); a point
        without a group has a fabric of its own.
    """

    workload: str
    params: dict
    tile: int = 4
    dram: str = "paper"
    fabric: dict = field(default_factory=dict)
    evals: tuple = ("model",)
    group: str = ""

    @classmethod
    def make(cls, workload: str, params: dict | None = None, tile: int = 4, dram: str = "paper",
             fabric: dict | None = None, evals=("model",), group: str = "", where: str = "point") -> "SweepPoint":
        """A checked point: the workload's defaults fill the parameters not given (element type
        :data:`DEFAULT_DTYPE`); a :class:`SweepError` names what is wrong (``where`` says which point)."""
        from step_hdl.mapper.fabric import Fabric, FabricError
        from step_hdl.sim.model.dram import DRAM_PRESETS
        from step_hdl.workloads.registry import WORKLOADS
        if workload not in WORKLOADS:
            raise SweepError(f"{where}: unknown workload {workload!r}; workloads: {', '.join(WORKLOADS)}")
        specs = {p.flag: p for p in WORKLOADS[workload][1]}
        given = dict(params or {})
        unknown = sorted(set(given) - set(specs))
        if unknown:
            raise SweepError(f"{where}: workload {workload} has no parameter {', '.join(unknown)}; it takes "
                             f"{', '.join(specs)} (a sweep axis may also be phys-tile, dram or fabric.<field>)")
        full = {}
        for flag, prm in specs.items():
            value = given.get(flag, DEFAULT_DTYPE if flag == "dtype" else prm.default)
            full[flag] = _checked(value, prm, where)
        if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
            raise SweepError(f"{where}: tile must be an integer >= 1, got {tile!r}")
        if dram not in DRAM_PRESETS:
            raise SweepError(f"{where}: unknown DRAM preset {dram!r}; presets: {', '.join(DRAM_PRESETS)}")
        evals = tuple(evals)
        bad = [e for e in evals if e not in EVALS]
        if bad or not evals or len(set(evals)) != len(evals):
            raise SweepError(f"{where}: evaluations must be one or more of {', '.join(EVALS)} without repeats, "
                             f"got {', '.join(evals) or 'none'}")
        fabric = dict(fabric or {})
        for key in ("tile", "dtype"):
            if key in fabric:
                raise SweepError(f"{where}: fabric.{key}: set it as the point's {'tile' if key == 'tile' else 'dtype'} "
                                 f"instead (the workload's element type is the fabric's)")
        try:
            Fabric.from_json({**fabric, "tile": tile, "dtype": full.get("dtype", DEFAULT_DTYPE)})
        except FabricError as exc:
            raise SweepError(f"{where}: {exc}") from None
        return cls(workload, full, tile, dram, dict(sorted(fabric.items())),
                   tuple(e for e in EVALS if e in evals), str(group))

    def to_json(self) -> dict:
        return {"workload": self.workload, "params": dict(self.params), "tile": self.tile, "dram": self.dram,
                "fabric": dict(self.fabric), "evals": list(self.evals), "group": self.group}

    @classmethod
    def from_json(cls, obj, where: str = "point", evals=None) -> "SweepPoint":
        if not isinstance(obj, dict) or not isinstance(obj.get("workload"), str):
            raise SweepError(f"{where}: expected an object with 'workload' (a name), got {obj!r}"[:300])
        known = {"workload", "params", "tile", "dram", "fabric", "evals", "group"}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise SweepError(f"{where}: unknown field(s) {', '.join(unknown)}; a point has {', '.join(sorted(known))}")
        for key in ("params", "fabric"):
            if not isinstance(obj.get(key, {}), dict):
                raise SweepError(f"{where}: {key} must be an object, got {obj[key]!r}")
        return cls.make(obj["workload"], obj.get("params"), obj.get("tile", 4), obj.get("dram", "paper"),
                        obj.get("fabric"), obj.get("evals", evals or ("model",)), obj.get("group", ""), where)

    def label(self) -> str:
        fab = "".join(f" {k}={v}" for k, v in self.fabric.items())
        return f"{self.workload} " + " ".join(f"{k}={v}" for k, v in self.params.items()) + \
            f" P={self.tile} {self.dram}{fab}"

    def key_json(self) -> str:
        """What identifies the point, as canonical JSON (the cache adds what the results depend on)."""
        return json.dumps(self.to_json(), sort_keys=True)


def _checked(value, prm, where: str):
    """``value`` of workload parameter ``prm`` as its type, or a :class:`SweepError`."""
    if prm.type is int and isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise SweepError(f"{where}: {prm.flag} must be an integer, got {value!r}") from None
    if prm.type is str and not isinstance(value, str):
        value = str(value)
    if prm.type is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise SweepError(f"{where}: {prm.flag} must be an integer, got {value!r}")
    if prm.choices and value not in prm.choices:
        raise SweepError(f"{where}: {prm.flag} {value!r} is not one of {', '.join(map(str, prm.choices))}")
    try:
        return prm.check(value)
    except ValueError as exc:
        raise SweepError(f"{where}: {str(exc).removeprefix('--')}") from None


def grid(workload: str, axes: dict | None = None, fixed: dict | None = None, evals=("model",),
         group: str = "") -> list[SweepPoint]:
    """Every combination of ``axes`` (name -> list of values), with ``fixed`` (name -> value) on each point.

    A name is one of the workload's parameters (``tile-b``), ``phys-tile`` (the physical tile side, as the
    command line's ``--phys-tile``), ``dram``, or ``fabric.<field>``
    (``fabric.mem_inflight``). The points come in the order of :func:`itertools.product` over the axes in
    the order given (the last axis varies fastest).
    """
    axes = dict(axes or {})
    fixed = dict(fixed or {})
    for name, values in axes.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise SweepError(f"axis {name}: expected a non-empty list of values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise SweepError(f"axis {name}: a value is repeated in {list(values)}")
    both = sorted(set(axes) & set(fixed))
    if both:
        raise SweepError(f"{', '.join(both)}: given both as an axis and as a fixed value")
    points = []
    names = list(axes)
    for combo in itertools.product(*(axes[n] for n in names)):
        values = {**fixed, **dict(zip(names, combo))}
        where = f"point {len(points)} ({', '.join(f'{k}={v}' for k, v in values.items())})"
        params, fabric, point = {}, {}, {"phys-tile": 4, "dram": "paper"}
        for name, v in values.items():
            if name in POINT_AXES:
                point[name] = v
            elif name.startswith(FABRIC_PREFIX):
                fabric[name[len(FABRIC_PREFIX):]] = v
            else:
                params[name] = v
        points.append(SweepPoint.make(workload, params, point["phys-tile"], point["dram"], fabric, evals, group,
                                      where))
    return points
