"""Structural parameters: frozen, validated, JSON-serializable, hashable dataclasses (:class:`Params`), the base
of every unit's parameters and of the fabric description (``mapper.fabric.Fabric``)."""

from __future__ import annotations

import dataclasses
import hashlib
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


class FrozenDict(dict):
    """A read-only, hashable ``dict`` (a parameter such as a fabric's unit counts); JSON writes it as an
    object."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))

    def _read_only(self, *args, **kwargs):
        raise TypeError("parameters are frozen: this mapping cannot change")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only


#: how :meth:`Params.merge` joins a field's values: ``same`` (they must be equal), ``max``, ``all``, ``any``,
#: ``union`` (a sorted tuple of every item), ``max_per_key`` (a mapping: each key's largest value)
MERGE_RULES = ("same", "max", "all", "any", "union", "max_per_key")


def param(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, merge: str = "same", minimum=None,
          flag: bool = False):
    """A :class:`Params` field: its default (or ``factory``), how :meth:`Params.merge` joins it (one of
    :data:`MERGE_RULES`), and the check every instance makes of it: ``minimum`` for an integer, ``flag`` for
    a boolean."""
    if merge not in MERGE_RULES:
        raise ValueError(f"param: merge must be one of {MERGE_RULES}, got {merge!r}")
    meta = {"merge": merge, "minimum": minimum, "flag": flag}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


#: the container fields' types a value must have (a list is frozen into a tuple, a dict into a FrozenDict)
_CONTAINERS = {"dict": (dict, "an object (a mapping)"), "tuple": ((list, tuple), "a list")}


@dataclass(frozen=True)
class Params:
    """Frozen, validated, JSON-serialisable, hashable parameters: the base of every unit's parameters and of
    the fabric description.

    A subclass lists its fields (with :func:`param` where a field has a check or a merge rule of its own)
    and extends :meth:`validate`. The base checks each field declared with ``minimum`` or ``flag``, freezes
    lists into tuples and dicts into :class:`FrozenDict`, and derives JSON (:meth:`to_json`,
    :meth:`from_json`), the content hash (:meth:`key`) and :meth:`merge` from the fields.
    """

    #: the error every check raises
    error = ParamError
    #: the word for a field in the unknown-field error (units take parameters, a fabric has fields)
    field_word = "parameter"

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            want = _CONTAINERS.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
            if want is not None and not isinstance(v, want[0]):
                # a JSON value of the wrong kind (a list for a mapping, text for a list) is named here, before
                # a check that would take it apart
                raise self.error(f"{self.owner}: {f.name} must be {want[1]}, got {v!r}")
            if isinstance(v, list):
                object.__setattr__(self, f.name, tuple(v))
            elif isinstance(v, dict) and not isinstance(v, FrozenDict):
                object.__setattr__(self, f.name, FrozenDict(sorted(v.items())))
            if f.metadata.get("flag") and not isinstance(v, bool):
                raise self.error(f"{self.owner}: {f.name} must be true or false, got {v!r}")
            if f.metadata.get("minimum") is not None:
                try:
                    positive(self.owner, f.name, v, f.metadata["minimum"])
                except ParamError as exc:
                    raise self.error(str(exc)) from None
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
            out[f.name] = (v.name if isinstance(v, DType) else list(v) if isinstance(v, tuple)
                           else dict(v) if isinstance(v, dict) else v)
        return out

    def dumps(self, indent=None) -> str:
        return json.dumps(self.to_json(), indent=indent, sort_keys=True)

    def key(self) -> str:
        """A hash of every field's value: equal parameters, equal keys."""
        return hashlib.sha256(self.dumps().encode()).hexdigest()[:12]

    @classmethod
    def from_json(cls, obj):
        """The parameters a JSON object (or its text) describes; unknown fields are an error naming them."""
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise cls.error(f"{cls.__name__}: not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise cls.error(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - names
        if unknown:
            raise cls.error(cls._unknown_fields(sorted(unknown), sorted(names)))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in obj.items()})

    @classmethod
    def _unknown_fields(cls, unknown: list, names: list) -> str:
        return f"{cls.__name__}: unknown {cls.field_word}(s) {unknown}; it takes {names}"

    @classmethod
    def merge(cls, items):
        """One set of parameters that serves everything each of ``items`` serves, field by field by its merge
        rule (:func:`param`; ``same`` where none is given: a field that differs is an error naming it)."""
        items = list(items)
        if not items:
            raise ValueError(f"{cls.__name__}.merge: nothing to merge")
        kw = {}
        for f in dataclasses.fields(cls):
            values = [getattr(p, f.name) for p in items]
            rule = f.metadata.get("merge", "same")
            if rule == "same":
                if any(v != values[0] for v in values[1:]):
                    shown = ", ".join(sorted({json.dumps(_plain(v)) for v in values}))
                    raise cls.error(f"{items[0].owner}: cannot merge {f.name}: the values differ ({shown})")
                kw[f.name] = values[0]
            elif rule == "max":
                kw[f.name] = max(values)
            elif rule == "all":
                kw[f.name] = all(values)
            elif rule == "any":
                kw[f.name] = any(values)
            elif rule == "union":
                kw[f.name] = tuple(sorted({x for v in values for x in v}))
            else:
                kw[f.name] = {k: max(v.get(k, 0) for v in values) for k in sorted({k for v in values for k in v})}
        return cls(**kw)


def _plain(v):
    return list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, dict) else v


@dataclass(frozen=True)
class TileParams(Params):
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
