"""Structural parameters of hardware units: frozen, validated, JSON-serializable dataclasses."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from step_hdl.errors import StepError
from step_hdl.types import DTYPES, DType, concrete, dtype as make_dtype


class ParamError(StepError):
    """A unit was built with parameters it cannot have."""


def concrete_param(d, bindings, unit, what) -> int:
    """A node parameter's integer value under ``bindings`` (:func:`step_hdl.types.concrete`), or a
    :class:`ParamError` naming ``unit`` and ``what``."""
    try:
        v = concrete(d, bindings)
    except (TypeError, ValueError, AttributeError, StepError):
        v = None
    if v is None:
        raise ParamError(f"{type(unit).__name__}: {what} {d} is not a concrete integer; pass bindings")
    return v


def check_ref(params) -> None:
    """The ``ref`` fields of a unit that re-reads by a row stream (``ref``, ``ref_rows``, ``ref_cols``,
    ``ref_dtype``: the off-chip load and the on-chip buffer)."""
    if not isinstance(params.ref, bool):
        raise ParamError(f"{params.owner}: ref must be True or False, got {params.ref!r}")
    positive(params.owner, "ref_rows", params.ref_rows)
    positive(params.owner, "ref_cols", params.ref_cols)
    if params.ref_dtype not in DTYPES:
        raise ParamError(f"{params.owner}: unsupported ref element type {params.ref_dtype!r}; "
                         f"supported: {sorted(DTYPES)}")


def positive(owner: str, name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParamError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class UnitParams:
    """Base class: subclasses list their fields and extend :meth:`validate`."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        pass

    @property
    def owner(self) -> str:
        return type(self).__name__

    def to_json(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.name if isinstance(v, DType) else (list(v) if isinstance(v, tuple) else v)
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, obj: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - names
        if unknown:
            raise ParamError(f"{cls.__name__}: unknown parameter(s) {sorted(unknown)}; it takes {sorted(names)}")
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in obj:
                v = obj[f.name]
                kwargs[f.name] = tuple(v) if isinstance(v, list) else v
        return cls(**kwargs)


@dataclass(frozen=True)
class TileParams(UnitParams):
    """The physical tile a unit works on: ``rows × cols`` elements of ``dtype``."""

    rows: int = 4
    cols: int = 4
    dtype: str = "int16"

    def validate(self):
        positive(self.owner, "rows", self.rows)
        positive(self.owner, "cols", self.cols)
        if self.dtype not in DTYPES:
            raise ParamError(f"{self.owner}: unsupported element type {self.dtype!r}; "
                             f"supported: {sorted(DTYPES)}")

    @property
    def dt(self) -> DType:
        return make_dtype(self.dtype)


@dataclass(frozen=True)
class StreamParams(TileParams):
    """A unit that moves tokens of one tile format: the physical tile plus ``max_rank``."""

    max_rank: int = 3

    def validate(self):
        super().validate()
        positive(self.owner, "max_rank", self.max_rank, minimum=0)
        if self.max_rank > 15:
            raise ParamError(f"{self.owner}: max_rank {self.max_rank} > 15 is not supported")
