"""SelectorSource: the configured selector masks come out in order under random ready drops."""

import random

import pytest

from step_hdl.interp import run_operator
from step_hdl.units.params import ParamError
from step_hdl.units.source import SelectorSource, SourceParams

from .harness import check_unit


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
    unit._MustUse__silence = True
    with pytest.raises(ParamError, match="3 elements exceed the unit's capacity 2"):
        unit.configure({"n": 4}, {}, values=[1, 2, 4])
    with pytest.raises(ParamError, match="n = 40 choices do not fit"):
        SourceParams(n=40)
