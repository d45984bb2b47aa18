"""A user's own graph through the public flow API and the command line: graph files (``step-hdl export``'s
JSON) with their inputs (``.npz``) are accepted wherever a built-in workload is, with the same results."""

import json
import re

import numpy as np
import pytest

from step_hdl.flow.cli import main
from step_hdl.flow import InputError, load_workload, save_workload, workload
from step_hdl.workloads.registry import build, defaults

from helpers import relu_layer

SMALL_SWIGLU = ["--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8", "--tile-inter", "16",
                "--dtype", "int16"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def exported(capsys, tmp_path):
    """The small SwiGLU exported as a graph file with its inputs."""
    graph, inputs = tmp_path / "sw.json", tmp_path / "sw.npz"
    code, out, _ = run_cli(capsys, "export", "swiglu", *SMALL_SWIGLU, "-o", str(graph), "--inputs", str(inputs))
    assert code == 0 and "sw.npz (inputs, expected outputs, bindings)" in out
    return str(graph), str(inputs)


def _json(capsys, *argv):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    rep = json.loads(out)
    for k in ("workload", "params", "wall_s", "model_wall_s", "build_s", "run_s", "cycles_per_s"):
        rep.pop(k, None)
    return rep


@pytest.mark.parametrize("command", [["metrics"], ["run"], ["model", "--phys-tile", "4"]])
def test_graph_file_gives_what_the_builtin_gives(capsys, exported, command):
    graph, inputs = exported
    mine = _json(capsys, command[0], graph, "--inputs", inputs, *command[1:])
    builtin = _json(capsys, command[0], "swiglu", *SMALL_SWIGLU, *command[1:])
    assert mine == builtin


def test_sim_and_build_on_a_graph_file(capsys, exported, tmp_path):
    """The same design, cycles and bytes in RTL as the built-in workload; build writes the testbench."""
    graph, inputs = exported
    mine = _json(capsys, "sim", graph, "--inputs", inputs, "--backend", "amaranth")
    builtin = _json(capsys, "sim", "swiglu", *SMALL_SWIGLU, "--backend", "amaranth")
    assert mine["outputs_match"] and mine["cycles"] == builtin["cycles"] > 0
    assert mine["offchip_bytes"] == builtin["offchip_bytes"] and mine["model_cycles"] == builtin["model_cycles"]
    code, out, _ = run_cli(capsys, "build", "graph", graph, "--inputs", inputs, "-o", str(tmp_path / "b"))
    assert code == 0 and (tmp_path / "b" / "run.py").exists() and (tmp_path / "b" / "harness.v").exists()
    dot = tmp_path / "g.dot"
    assert run_cli(capsys, "draw", graph, "-o", str(dot))[0] == 0 and dot.read_text().startswith("digraph")


def test_expected_outputs_in_the_inputs_are_checked(capsys, tmp_path):
    """With expected outputs given, ``run`` checks the interpreter against them (exit 1 on a difference)."""
    g, t = relu_layer()
    w = workload(g, t)
    save_workload(w, tmp_path / "r.json", tmp_path / "r.npz")
    assert run_cli(capsys, "run", str(tmp_path / "r.json"), "--inputs", str(tmp_path / "r.npz"))[0] == 0
    wrong = dict(np.load(tmp_path / "r.npz"))
    wrong["expected.y"] = wrong["expected.y"] + 1
    np.savez(tmp_path / "wrong.npz", **wrong)
    code, out, _ = run_cli(capsys, "run", str(tmp_path / "r.json"), "--inputs", str(tmp_path / "wrong.npz"))
    assert code == 1 and "OUTPUTS DIFFER: y: 64 of 64 elements differ, first at (0, 0): got " in out


def test_sim_checks_the_expected_outputs(capsys, tmp_path):
    """``sim`` checks the RTL against the expected outputs as ``run`` does, beside the interpreter: the RTL
    matching the interpreter is not enough when the expected outputs say otherwise (a stale ``.npz``)."""
    g, t = relu_layer()
    save_workload(workload(g, t), tmp_path / "r.json", tmp_path / "r.npz")
    wrong = dict(np.load(tmp_path / "r.npz"))
    wrong["expected.y"][2, 3] += 1
    np.savez(tmp_path / "wrong.npz", **wrong)
    argv = ["sim", str(tmp_path / "r.json"), "--backend", "amaranth", "--no-model"]
    code, out, _ = run_cli(capsys, *argv, "--inputs", str(tmp_path / "r.npz"))
    assert code == 0 and "outputs match the interpreter and the expected outputs" in out
    code, out, _ = run_cli(capsys, *argv, "--inputs", str(tmp_path / "wrong.npz"))
    assert code == 1 and "outputs match the interpreter\n" in out
    want = int(wrong["expected.y"][2, 3])
    assert (f"OUTPUT y DIFFERS from the expected one: 1 of 64 elements differ, first at (2, 3): got {want - 1}, "
            f"want {want}") in out
    code, out, _ = run_cli(capsys, *argv, "--inputs", str(tmp_path / "wrong.npz"), "--json")
    rep = json.loads(out)
    assert code == 1 and rep["matches_interpreter"] and not rep["outputs_match"]
    assert list(rep["expected_mismatches"]) == ["y"]


def test_round_trip_keeps_bindings_and_stream_data(routing):
    """MoE's routing table (stream data) and its per-expert token counts (bindings) survive the files."""
    routing("mixtral_b64")
    w = build("moe", defaults("moe", tokens=16, hidden=16, inter=32, tile_inter=16, dtype="int16"))
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        save_workload(w, f"{d}/m.json", f"{d}/m.npz")
        back = load_workload(f"{d}/m.json", f"{d}/m.npz")
    assert back.subs == {str(k): v for k, v in w.subs.items()}
    assert np.array_equal(back.streams["routing"], w.streams["routing"])
    assert back.mismatches(back.run()) == {} and back.dtype == w.dtype


def test_graph_file_errors(capsys, tmp_path):
    g, t = relu_layer()
    save_workload(workload(g, t), tmp_path / "r.json", tmp_path / "r.npz")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    np.savez(tmp_path / "extra.npz", **t, z=np.zeros(3))
    np.savez(tmp_path / "binding.npz", **t, **{"binding.N": np.array([1, 2])})
    np.savez(tmp_path / "dtype.npz", x=t["x"].astype(np.int32), w=t["w"])
    r = str(tmp_path / "r.json")
    cases = [
        ((str(tmp_path / "missing.json"),), "InputError: cannot read graph file '.*missing.json': No such file"),
        ((str(tmp_path / "bad.json"),), "StepGraphError: graph file '.*bad.json': graph JSON is not valid JSON"),
        ((r, "--inputs", str(tmp_path / "bad.npz")), "InputError: cannot read inputs '.*bad.npz' \\(a .npz of "
                                                     "named arrays\\)"),
        ((r, "--inputs", str(tmp_path / "extra.npz")), "InputError: inputs '.*extra.npz': array 'z' is neither a "
                                                       "tensor of graph 'relu_layer' \\(w, x, y\\)"),
        ((r, "--inputs", str(tmp_path / "binding.npz")), "'binding.N' must be a non-negative integer scalar, got "
                                                         "int64 of shape \\(2,\\)"),
        ((r, "--inputs", str(tmp_path / "dtype.npz")), "off-chip tensor 'x': expected int16 \\(int16\\), got int32"),
        ((r,), "InputError: graph 'relu_layer' reads tensor\\(s\\) 'x', 'w' that no array is given for \\(given: "
               "none; in Python tensors=\\{'x': ...\\}, on the command line an array named 'x' in --inputs "
               "INPUTS.npz\\)"),
    ]
    import re
    for argv, message in cases:
        code, _, err = run_cli(capsys, "run", *argv)
        assert code == 2 and re.search(message, err), (argv, err)
        assert "Traceback" not in err
    with pytest.raises(InputError, match="expected output\\(s\\) 'q' are not stored by graph 'relu_layer'"):
        workload(g, t, expected={"q": np.zeros((8, 8))})


def test_a_name_that_is_neither_workload_nor_file(capsys):
    import pytest as _pytest
    with _pytest.raises(SystemExit) as exc:
        main(["sim", "swigl"])
    assert exc.value.code == 2
    assert "invalid choice: 'swigl' (choose from 'swiglu', 'moe', 'gqa', 'graph')" in capsys.readouterr().err


@pytest.mark.synth
def test_synth_a_graph_file(capsys, tmp_path):
    g, t = relu_layer()
    save_workload(workload(g, t), tmp_path / "r.json", tmp_path / "r.npz")
    code, out, _ = run_cli(capsys, "synth", str(tmp_path / "r.json"), "--inputs", str(tmp_path / "r.npz"),
                           "--no-place", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["dsps"] == 64 and rep["luts"] > 1000


def test_symbolic_metrics_need_no_inputs(capsys, exported, tmp_path, routing):
    """``metrics --symbolic`` reads the graph alone: the same expressions as the built-in workload's, and
    dynamic sizes stay symbols."""
    graph, inputs = exported
    mine = _json(capsys, "metrics", graph, "--symbolic")
    builtin = _json(capsys, "metrics", "swiglu", *SMALL_SWIGLU, "--symbolic")
    assert mine["symbolic"] == builtin["symbolic"] and mine["offchip_bytes"] == builtin["offchip_bytes"]
    routing("mixtral_b64")
    moe = tmp_path / "moe.json"
    assert run_cli(capsys, "export", "moe", "--tokens", "16", "--dtype", "int16", "-o", str(moe))[0] == 0
    rep = _json(capsys, "metrics", str(moe), "--symbolic")
    assert "route_n0" in rep["symbolic"]["offchip_bytes"] and rep["observed_in_run"] is False
    # without --symbolic: the values where every size is static, a named error where some are dynamic
    plain, given = _json(capsys, "metrics", graph), _json(capsys, "metrics", graph, "--inputs", inputs)
    assert plain["offchip_bytes"] == given["offchip_bytes"] and plain["flops"] == given["flops"]
    code, _out, err = run_cli(capsys, "metrics", str(moe))
    assert code == 2 and "InputError: graph 'moe_dynamic' has dynamic sizes (route_n0, " in err
    assert "give their values (binding.<symbol>, or the inputs that set them, in --inputs INPUTS.npz)" in err


def _source_graph():
    """Three [1, 4] rows from a source's stream data ``rows``, stored."""
    from step_hdl import Graph, StreamType, Tile
    g = Graph("rows")
    g.tensor("y", 3, 4, "int16")
    s = g.source(StreamType(Tile("int16", 1, 4), (3,)), data="rows", name="src")
    g.store(s, "y", tile=(1, 4), name="store_y")
    return g, {"rows": [np.full((1, 4), k, np.int16) for k in range(3)]}


def test_the_api_refuses_what_the_cli_refuses():
    """No array for an input tensor, no data for a source, a negative or non-integer binding: an InputError
    naming it, from the interpreter itself (not a run on zeros, not numpy's error)."""
    from step_hdl import run
    g, t = relu_layer()
    with pytest.raises(InputError, match="graph 'relu_layer' reads tensor\\(s\\) 'w' that no array is given for "
                                         "\\(given: 'x'; in Python tensors=\\{'w': ...\\}"):
        run(g, {"x": t["x"]})
    g, streams = _source_graph()
    assert np.array_equal(run(g, {}, streams).memory["y"][2], [2] * 4)
    with pytest.raises(InputError, match="StreamSource 'src': no data 'rows' for the source \\(given: none; in "
                                         "Python streams=\\{'rows': ...\\}, on the command line an array named "
                                         "'stream.rows' in --inputs INPUTS.npz\\)"):
        run(g, {}, {})
    for bad in (-1, 2.5, "4"):
        with pytest.raises(InputError, match=f"binding 'N': expected an integer >= 0 \\(a dynamic size\\), got "
                                             f"{re.escape(repr(bad))}"):
            run(g, {}, streams, bindings={"N": bad})


def test_a_source_without_its_stream_data_in_the_inputs_is_named(capsys, tmp_path):
    g, streams = _source_graph()
    save_workload(workload(g, {}, streams), tmp_path / "g.json", tmp_path / "g.npz")
    data = {k: v for k, v in np.load(tmp_path / "g.npz").items() if k != "stream.rows"}
    np.savez(tmp_path / "no_rows.npz", **data)
    code, _, err = run_cli(capsys, "run", str(tmp_path / "g.json"), "--inputs", str(tmp_path / "no_rows.npz"))
    assert code == 2 and "InputError: StreamSource 'src': no data 'rows' for the source" in err
    assert "an array named 'stream.rows' in --inputs INPUTS.npz" in err and "Traceback" not in err
