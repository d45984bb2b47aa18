"""Fabric description, binding and the checked mapping flow."""

import pytest

from step_hdl import fn
from step_hdl.mapper import lower as lowering
from step_hdl.mapper.fabric import Fabric, FabricError
from step_hdl.mapper.sizing import FitFabric, fabric_for
from step_hdl.mapper.lower import Pass, PassCheckError, lower
from step_hdl.workloads import swiglu


@pytest.fixture(scope="module")
def small():
    return swiglu(32, 64, 128, 16, 32, "int16")


def test_fabric_json_round_trip_and_validation():
    f = Fabric(tile=4, units={"Map": 3, "Accum": 1})
    assert Fabric.from_json(f.dumps()) == f
    for bad, msg in [(dict(tile=0), "tile must be an integer >= 1, got 0"),
                     (dict(dtype="fp64"), "dtype 'fp64' is not one of"),
                     (dict(units={"Map": -1}), "unit count for 'Map' must be an integer >= 0"),
                     (dict(map_functions=("gelu",)), "unknown Map function 'gelu'"),
                     (dict(tile=64, sram_bytes=1024), "cannot double-buffer one 64x64 int16 tile")]:
        with pytest.raises(FabricError, match=msg):
            Fabric(**bad)
    with pytest.raises(FabricError, match=r"unknown field\(s\) \['tiles'\]"):
        Fabric.from_json('{"tiles": 4}')
    # a JSON value of the wrong kind is named, not taken apart (a list of units, text for a list)
    for bad, msg in [('{"units": [1, 2]}', r"^fabric: units must be an object \(a mapping\), got \(1, 2\)$"),
                     ('{"map_functions": "add"}', r"^fabric: map_functions must be a list, got 'add'$")]:
        with pytest.raises(FabricError, match=msg):
            Fabric.from_json(bad)


def test_merge_keeps_every_field_by_its_rule():
    """A sweep's shared fabric: the largest sizes, every unit kind and function, and the fields that must agree
    (tile, element types, ``pipeline``) kept or refused, never dropped."""
    a = Fabric(tile=4, units={"Map": 2}, pipeline=True, mem_inflight=32, map_functions=("add",))
    b = Fabric(tile=4, units={"Map": 1, "Accum": 1}, pipeline=True, fifo_depth=4, pools=False)
    m = Fabric.merge([a, b])
    assert m.units == {"Accum": 1, "Map": 2} and m.pipeline is True and m.pools is False
    assert (m.mem_inflight, m.fifo_depth) == (64, 4) and "add" in m.map_functions and "silu" in m.map_functions
    with pytest.raises(FabricError, match=r"^fabric: cannot merge pipeline: the values differ \(false, true\)$"):
        Fabric.merge([a, b.replace(pipeline=False)])
    with pytest.raises(FabricError, match=r"^fabric: cannot merge tile: the values differ \(4, 8\)$"):
        Fabric.merge([a, Fabric(tile=8)])
    # hashable, and equal fabrics hash alike (a design's key and a dict key)
    assert {a: 1}[Fabric.from_json(a.dumps())] == 1 and a.key() != b.key()
    with pytest.raises(TypeError, match="parameters are frozen"):
        a.units["Map"] = 3


def test_a_design_is_hashable(small):
    from step_hdl.flow import prepare
    d = prepare(small, 4).design
    assert hash(d) == hash(prepare(small, 4).design)


def test_lower_sizes_a_fitting_fabric_and_binds_every_node(small):
    lo = lower(small.graph, FitFabric(4), small.tensors)
    assert [name for name, _ in lo.stages] == ["tile_physical"]
    rep = lo.binding.report()
    assert all(u["used"] == u["available"] for u in rep["units"].values())
    assert len(rep["nodes"]) == len(lo.graph.nodes)
    assert lo.fabric == fabric_for(lo.graph, 4)


def test_graph_that_does_not_fit_says_what_is_missing(small):
    fab = Fabric(tile=4, units={"Map": 2, "LinearOffChipLoad": 4, "LinearOffChipStore": 1, "Accum": 4,
                                "Broadcast": 1, "Bufferize": 6, "Streamify": 6})
    with pytest.raises(FabricError, match=r"needs 6 Map unit\(s\) \(gate_requant, .*\); the fabric has 2\n"
                                         r"  the graph needs 3 MatMul unit\(s\) \(gate_proj, up_proj, down_proj\); "
                                         r"the fabric has 0"):
        lower(small.graph, fab)
    fab = fabric_for(lower(small.graph, FitFabric(4)).graph, 4, map_functions=("matmul", "mul", "requantize"))
    with pytest.raises(FabricError, match="Map 'silu' needs function 'silu'"):
        lower(small.graph, fab)


def test_unlowered_tiles_do_not_bind(small):
    from step_hdl.mapper.binding import bind
    with pytest.raises(FabricError, match=r"carries int16\[16,64\] tiles; the fabric's physical tile is 4x4"):
        bind(small.graph, Fabric(tile=4, units={k: 99 for k in ("Map", "Accum", "Broadcast",
                                                                 "LinearOffChipLoad", "LinearOffChipStore")}))


def test_a_pass_that_changes_the_result_is_caught(small, monkeypatch):
    def broken(g, f):
        out = lowering.tile_physical(g, f.tile)
        out.nodes["gate_requant"].params["fn"] = fn("requantize", shift=9, dtype="int16")
        return out
    monkeypatch.setattr(lowering, "PASSES", [Pass("broken", broken)])
    with pytest.raises(PassCheckError, match="pass 'broken' changed tensor 'y'"):
        lower(small.graph, FitFabric(4), small.tensors)


def test_the_inputs_of_a_reassemble_get_the_deep_fifo():
    """An in-order Reassemble's data inputs are built with ``max_fifo_depth`` in the RTL and in the model
    alike (``mapper.fifo.join_inputs``); its selector and ordinary edges keep the fabric's depth."""
    import numpy as np
    from step_hdl.flow import prepare
    from step_hdl.mapper.fifo import capped_depths, join_inputs
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    w = moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="static", tile=4)
    assert join_inputs(w.graph) == {"e0_unpad.out0", "e1_unpad.out0"}
    logical = capped_depths(w.graph, 2, 64)
    assert logical["e0_unpad.out0"] == logical["e1_unpad.out0"] == 64 and logical["e0_keep.out"] == 2
    prep = prepare(w, 4)
    built = {e.label: e.depth for e in prep.design.edges}
    fab = prep.design.fabric
    assert built["e0_unpad.out0"] == built["e1_unpad.out0"] == fab.max_fifo_depth > fab.fifo_depth
    assert built["e0_unpack.out"] == fab.fifo_depth
