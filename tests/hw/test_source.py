"""SelectorSource and IndexSource: the configured values come out in order under random ready drops."""

import random

import numpy as np
import pytest

from step_hdl.interp import run_operator
from step_hdl.units.layout import TokenFormat
from step_hdl.units.offchip import INDEX
from step_hdl.units.params import ParamError
from step_hdl.units.source import IndexSource, IndexSourceParams, SelectorSource, SourceParams

from .harness import check_unit
from step_hdl.units.base import not_elaborated


@pytest.mark.parametrize("length", [0, 1, 13])
def test_selector_source(sim_backend, length):
    rng = random.Random(length)
    rows = [sorted(rng.sample(range(6), 2)) for _ in range(length)]
    op = dict(n=6, values=rows)
    unit = SelectorSource(SourceParams(n=6, capacity=16, max_rank=2))
    masks = [t.payload for t in run_operator("SelectorSource", {}, **op)["out"] if t.is_data]
    config = unit.configure(op, {}, values=masks) + unit.config_image(start=1)
    check_unit(unit, "SelectorSource", {}, op, config=config, backend=sim_backend)


def test_selector_source_rejects_too_many_values():
    unit = SelectorSource(SourceParams(n=4, capacity=2))
    not_elaborated(unit)
    with pytest.raises(ParamError, match="3 elements exceed the unit's capacity 2"):
        unit.configure({"n": 4}, {}, values=[1, 2, 4])
    with pytest.raises(ParamError, match="n = 40 choices do not fit"):
        SourceParams(n=40)


@pytest.mark.parametrize("length", [0, 1, 13])
def test_index_source(sim_backend, length):
    rng = random.Random(100 + length)
    extremes = [-(1 << 31), (1 << 31) - 1, -1, 0]
    values = [rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(length)]
    values[:len(extremes)] = extremes[:length]
    op = {"values": values}
    unit = IndexSource(IndexSourceParams(capacity=16, max_rank=2))
    assert unit.fmt("o") == TokenFormat(INDEX, 2)
    config = unit.configure(op, {}, values=values) + unit.config_image(start=1)
    assert len(config) == length + 2  # one write per 32-bit value, count, start
    check_unit(unit, "IndexSource", {}, op, config=config, backend=sim_backend, p_drop=0.5)


def test_index_source_takes_the_node_values():
    unit = IndexSource(IndexSourceParams(capacity=4, max_rank=1))
    not_elaborated(unit)
    assert unit.configure({"values": [3, -7]}, {}) == unit.configure({}, {}, values=[3, -7])
    assert unit.configure({}, {}, values=[np.int64(5), np.array([[6]], np.int32)]) == \
        unit.configure({}, {}, values=[5, 6])


def test_index_source_errors():
    unit = IndexSource(IndexSourceParams(capacity=2))
    not_elaborated(unit)
    with pytest.raises(ParamError, match="IndexSource: 3 elements exceed the unit's capacity 2"):
        unit.configure({}, {}, values=[1, 2, 3])
    with pytest.raises(ParamError, match="element 1 = 2147483648 does not fit int32"):
        unit.configure({}, {}, values=[0, 1 << 31])
    with pytest.raises(ParamError, match="element 0 = -2147483649 does not fit int32"):
        unit.configure({}, {}, values=[-(1 << 31) - 1])
    with pytest.raises(ParamError, match="element 0 must be an integer"):
        unit.configure({}, {}, values=[1.5])
    with pytest.raises(ParamError, match="no index values for this program"):
        unit.configure({}, {})
    with pytest.raises(ParamError, match="length is 3 but 2 values"):
        unit.configure({"length": 3}, {}, values=[1, 2])
    with pytest.raises(ParamError, match="parameters must be IndexSourceParams"):
        IndexSource(SourceParams(n=2))
    with pytest.raises(ParamError, match="capacity must be an integer >= 1"):
        IndexSourceParams(capacity=0)
