"""Graph object: JSON round trip, DOT export, topological order, validation."""

import json

import numpy as np
import pytest

from step_hdl import Graph, StepGraphError, run
from step_hdl.workloads import gqa_decode, moe, swiglu


def workloads():
    routing = np.array([[0, 1], [1, 2], [2, 0], [0, 1]])
    yield swiglu(32, 64, 128, 16, 32, "int16")
    yield moe(routing, 3, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static", tile=2)
    yield moe(routing, 4, hidden=16, inter=32, tile_inter=16, dtype="int16", experts_per_region=2)
    yield gqa_decode([3, 1, 4, 1, 5], regions=2, strategy="dynamic")
    yield gqa_decode([3, 1, 4, 1, 5], regions=2, strategy="contiguous")


@pytest.mark.parametrize("w", list(workloads()), ids=lambda w: w.graph.name)
def test_json_round_trip_is_exact_and_runs(w):
    text = w.graph.dumps()
    g2 = Graph.from_json(text)
    assert g2.dumps() == text
    assert json.loads(text)["nodes"][0]["op"]
    res = run(g2, w.tensors, w.streams)
    assert w.mismatches(res) == {}
    for a, b in zip(w.graph.nodes.values(), g2.nodes.values()):
        assert a.out_types == b.out_types


def test_dot_labels_edges_with_shapes_and_tiles():
    w = swiglu(64, 256, 512, 16, 32, "fp32")
    dot = w.graph.to_dot()
    assert dot.startswith('digraph "swiglu"')
    assert '"load_x" -> "bcast_x" [label="[4, 16]\\nfp32[16,256]"]' in dot
    assert '"accum_down" -> "store_y" [label="[4]\\nfp32[16,256]"]' in dot
    assert dot.count("->") == sum(1 for _ in w.graph.edges())


def test_topological_order():
    for w in workloads():
        order = [n.name for n in w.graph.topological_order()]
        pos = {n: i for i, n in enumerate(order)}
        assert len(order) == len(w.graph.nodes)
        for ref, consumer, _ in w.graph.edges():
            if ref.node.kind != "Feedback":
                assert pos[ref.node.name] < pos[consumer]


def test_cycle_through_eager_merge_is_accepted():
    w = gqa_decode([2, 2, 2], regions=2, strategy="dynamic")
    cycles = w.graph._cycles()
    assert cycles and all(any(w.graph.nodes[n].kind == "EagerMerge" for n in c) for c in cycles)
    w.graph.validate()


def test_validate_reports_unconsumed_output():
    g = Graph("t")
    g.tensor("x", 4, 4, "fp32")
    g.load("x", tile=(4, 4), out_shape=[1], stride=[1], name="lx")
    with pytest.raises(StepGraphError, match="LinearOffChipLoad 'lx' output 'out'.*has no consumer"):
        g.validate()
