"""``step_hdl.flow.sweep``: points, the content-hash cache and resume, the executors, the table, the Pareto front
and ``step-hdl sweep``'s errors."""

import csv
import json

import pytest

from step_hdl.flow.cli import main
from step_hdl.metrics import metrics
from step_hdl.flow import model
from step_hdl.flow.sweep import ResultCache, SweepError, SweepPoint, grid, identical, pareto, point_key, run_sweep
from step_hdl.flow.sweep.command import points_of
from step_hdl.workloads import swiglu

from helpers import REDUCED, SWEEP

SMALL = {"batch": 16, "hidden": 64, "inter": 128}


def small_grid(evals=("metrics", "model")):
    return grid("swiglu", {"tile-b": [4, 8], "tile-inter": [4, 16]}, SMALL, evals)


def test_grid_expands_every_combination_with_defaults_filled():
    pts = grid("swiglu", {"tile-b": [4, 8], "phys-tile": [4, 16], "fabric.mem_inflight": [32, 64]}, SMALL)
    assert len(pts) == 8
    assert [(p.params["tile-b"], p.tile, p.fabric["mem_inflight"]) for p in pts[:3]] == \
        [(4, 4, 32), (4, 4, 64), (4, 16, 32)]
    # every parameter is there, the element type the RTL's
    assert pts[0].params == {**SMALL, "tile-b": 4, "tile-inter": 16, "dtype": "int16", "seed": 0}
    assert pts[0].evals == ("model",) and pts[0].dram == "paper"


@pytest.mark.parametrize("axes, fixed, message", [
    ({"tilex": [4]}, {}, "point 0 (tilex=4): workload swiglu has no parameter tilex; it takes batch, hidden, "
                         "inter, tile-b, tile-inter, dtype, seed (a sweep axis may also be phys-tile, dram or "
                         "fabric.<field>)"),
    ({"tile-b": [0]}, {}, "point 0 (tile-b=0): tile-b: expected an integer >= 1, got 0"),
    ({"tile-b": ["x"]}, {}, "point 0 (tile-b=x): tile-b must be an integer, got 'x'"),
    ({"dtype": ["fp8"]}, {}, "point 0 (dtype=fp8): dtype 'fp8' is not one of fp32, bf16, int8, int16, int32"),
    ({"dram": ["hbm9"]}, {}, "point 0 (dram=hbm9): unknown DRAM preset 'hbm9'; presets: paper, paper-studies, "
                             "paper-interval1"),
    ({"phys-tile": [0]}, {}, "point 0 (phys-tile=0): tile must be an integer >= 1, got 0"),
    ({"fabric.mem_inflight": [0]}, {}, "point 0 (fabric.mem_inflight=0): fabric: mem_inflight must be an integer "
                                       ">= 1, got 0"),
    ({"fabric.nope": [1]}, {}, "point 0 (fabric.nope=1): fabric: unknown field(s) ['nope']"),
    ({"fabric.tile": [8]}, {}, "point 0 (fabric.tile=8): fabric.tile: set it as the point's tile instead"),
    ({"tile-b": []}, {}, "axis tile-b: expected a non-empty list of values, got []"),
    ({"tile-b": [4, 4]}, {}, "axis tile-b: a value is repeated in [4, 4]"),
    ({"tile-b": [4]}, {"tile-b": 8}, "tile-b: given both as an axis and as a fixed value"),
])
def test_bad_axes_are_named(axes, fixed, message):
    with pytest.raises(SweepError, match="^" + __import__("re").escape(message)):
        grid("swiglu", axes, fixed)


def test_bad_points_are_named():
    with pytest.raises(SweepError, match=r"^point: unknown workload 'mlp'; workloads: swiglu, moe, gqa$"):
        SweepPoint.make("mlp")
    with pytest.raises(SweepError, match=r"evaluations must be one or more of metrics, model, sim without "
                                         r"repeats, got model, model"):
        SweepPoint.make("swiglu", evals=("model", "model"))
    with pytest.raises(SweepError, match=r"^p3: unknown field\(s\) size; a point has dram, evals, fabric, group, "
                                         r"params, tile, workload$"):
        SweepPoint.from_json({"workload": "swiglu", "size": 3}, "p3")
    pts = small_grid()
    with pytest.raises(SweepError, match=r"^points 0 and 4 are the same \(swiglu batch=16"):
        run_sweep(pts + pts[:1], "serial", cache=False)


def test_point_json_round_trips():
    p = grid("moe", {"tile": [4]}, {"trace": "mixtral_b64", "fabric.mem_inflight": 32}, ("metrics",), "g")[0]
    assert SweepPoint.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert p.params["tile"] == 4 and p.tile == 4 and p.group == "g"     # MoE's token tile, not the physical


def test_results_agree_with_the_flow_and_the_metrics():
    res = run_sweep(small_grid(), "serial", cache=False)
    assert (res.computed, res.cached, res.failed) == (4, 0, 0)
    for row in res.rows:
        w = swiglu(16, 64, 128, row["tile-b"], row["tile-inter"], "int16")
        assert row["model_cycles"] == model(w, 4).cycles
        assert row["offchip_bytes"] == int(metrics(w.graph).subs(w.subs).offchip_bytes)
        assert row["status"] == "ok" and row["cached"] is False


def test_the_cache_serves_a_rerun_and_resumes_an_interrupted_sweep(tmp_path):
    cache = ResultCache(tmp_path)
    pts = small_grid()
    first = run_sweep(pts[:2], "serial", cache=cache)         # as if stopped after two points
    assert first.computed == 2
    again = run_sweep(pts, "serial", cache=cache)
    assert (again.computed, again.cached) == (2, 2)           # only the two not done before
    assert [r["cached"] for r in again.rows] == [True, True, False, False]
    assert identical(again.rows[:2], first.rows)
    full = run_sweep(pts, "serial", cache=cache)
    assert (full.computed, full.cached) == (0, 4) and identical(full.rows, again.rows)
    assert len(list(tmp_path.rglob("*.json"))) == 4


def test_the_key_follows_what_determines_a_result(routing):
    a, b = small_grid()[:2]
    assert point_key(a) == point_key(a) and point_key(a) != point_key(b)
    # the evaluations' code and the fabric group are part of it
    assert point_key(a) != point_key(SweepPoint.make("swiglu", a.params, evals=("metrics",)))
    assert point_key(a) != point_key(a, (a.key_json(), b.key_json()))
    routing("mixtral_b64")
    moe = grid("moe", {"trace": ["mixtral_b64", "qwen_b64"]}, {"tiling": "static"}, ("metrics",))
    assert point_key(moe[0]) != point_key(moe[1])


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, routing):
    routing("mixtral_b64")
    cache = ResultCache(tmp_path)
    # a static token tile wider than the physical tile's rows cannot be retiled: the model raises
    pts = grid("moe", {"phys-tile": [4, 32]}, {"trace": "mixtral_b64", "hidden": 16, "inter": 32,
                                               "tile-inter": 16, "tiling": "static", "tile": 4})
    res = run_sweep(pts, "serial", cache=cache)
    assert [r["status"] for r in res.rows] == ["ok", "error"] and res.failed == 1
    assert res.rows[1]["error"].startswith("StepTypeError: Accum 'e0_pack'")
    assert res.rows[0]["model_cycles"] > 0 and "model_cycles" not in res.rows[1]
    # the point's own failure (a StepError) is cached like a result: a re-run computes nothing
    again = run_sweep(pts, "serial", cache=cache)
    assert (again.computed, again.cached, again.failed) == (0, 2, 1) and identical(again.rows, res.rows)


def test_a_crash_is_not_cached(tmp_path, monkeypatch):
    """An evaluation that crashes (not a StepError the point causes) is recorded with its traceback and tried
    again on the next run."""
    from step_hdl.flow.sweep import evaluate as ev
    cache = ResultCache(tmp_path)
    pts = small_grid(("model",))[:1]
    monkeypatch.setattr(ev, "_model", lambda *a: 1 / 0)
    res = run_sweep(pts, "serial", cache=cache)
    assert res.failed == 1 and res.rows[0]["error"] == "ZeroDivisionError: division by zero"
    assert "Traceback" in res.rows[0]["traceback"]
    monkeypatch.undo()
    assert run_sweep(pts, "serial", cache=cache).computed == 1


def test_the_process_pool_gives_the_serial_results():
    pts = small_grid()
    serial = run_sweep(pts, "serial", cache=False)
    pool = run_sweep(pts, "process", workers=2, cache=False)
    assert identical(pool.rows, serial.rows)


def test_ray_gives_the_serial_results():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e .[ray]); the Ray executor is "
                                            "not tested")
    pts = small_grid(("model",))
    serial = run_sweep(pts, "serial", cache=False)
    res = run_sweep(pts, "ray", workers=2, cache=False)
    assert identical(res.rows, serial.rows)
    assert not ray.is_initialized()         # the local cluster the sweep started is shut down


def test_rtl_points_of_a_group_share_one_fabric_and_agree_with_the_flow(reduced_sweep):
    fab, ws, preps = reduced_sweep
    sizes = {k: REDUCED[k] for k in ("batch", "hidden", "inter")}
    pts = [SweepPoint.make("swiglu", {**sizes, "tile-b": tb, "tile-inter": ti}, 4, evals=("model", "sim"),
                           group="reduced") for tb, ti in SWEEP]
    res = run_sweep(pts, "serial", cache=False)
    assert res.failed == 0
    assert len({r["rtl_design"] for r in res.rows}) == 1 == len({p.design.key() for p in preps})
    assert res.rows[0]["rtl_design"] == preps[0].design.key()       # the fabric the flow shares: one build
    for row, w in zip(res.rows, ws):
        assert row["rtl_outputs_match"] is True and row["rtl_status"] == "done"
        assert row["model_cycles"] == model(w, fab).cycles
        assert row["rtl_offchip_bytes"] == int(metrics(w.graph).subs(w.subs).offchip_bytes)


def test_a_fabric_field_of_a_sweep_reaches_the_rtl(capsys, tmp_path):
    """``--set fabric.pipeline=true`` simulates the pipelined fabric: the row's fabric says so and its cycles
    are ``step-hdl sim --pipeline``'s (the shared fabric's merge once dropped the field: the plain fabric's
    cycles, silently). On the Amaranth simulator: no build (its cycles are Verilator's)."""
    sizes = ["batch=16", "hidden=8", "inter=64", "tile-b=8", "tile-inter=16"]
    argv = ["sweep", "swiglu", *[a for s in sizes for a in ("--set", s)], "--set", "fabric.pipeline=true",
            "--eval", "sim", "--group", "g", "--executor", "serial", "--backend", "amaranth",
            "--cache", str(tmp_path / "cache"), "--json"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    row, = json.loads(out)["points"]
    assert row["rtl_fabric"]["pipeline"] is True and row["rtl_outputs_match"] is True
    flags = [x for s in sizes for x in ("--" + s.split("=")[0], s.split("=")[1])]
    code, out, err = run_cli(capsys, "sim", "swiglu", *flags, "--pipeline", "--backend", "amaranth", "--no-model",
                             "--json")
    assert code == 0, err
    plain = run_cli(capsys, "sim", "swiglu", *flags, "--backend", "amaranth", "--no-model", "--json")[1]
    assert json.loads(out)["cycles"] == row["rtl_cycles"] != json.loads(plain)["cycles"]


def test_pareto_front():
    rows = [{"a": 1, "b": 9}, {"a": 2, "b": 5}, {"a": 3, "b": 5}, {"a": 4, "b": 1}, {"a": 5, "b": 7},
            {"a": 2}, {"a": 1, "b": 9.5}]
    assert pareto(rows, "a", "b") == [0, 1, 3]
    with pytest.raises(SweepError, match=r"^--pareto x,y: no row has numbers in both"):
        pareto(rows, "x", "y")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_table_plot_and_json(capsys, tmp_path):
    args = ["sweep", "swiglu", "--grid", "tile-b=4,8", "--grid", "tile-inter=4,16", "--set", "batch=16",
            "--set", "hidden=64", "--set", "inter=128", "--eval", "metrics,model", "--executor", "serial",
            "--cache", str(tmp_path / "cache")]
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "t.csv"), "--plot", str(tmp_path / "p.png"))
    assert code == 0, err
    assert "4 points: 4 computed, 0 from the cache, 0 failed" in out
    assert "tile-b=4 tile-inter=4: offchip_bytes 264,192  onchip_bytes 7,944  model_cycles 4,667" in out
    assert "Pareto front of onchip_bytes and model_cycles" in out
    with open(tmp_path / "t.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["model_cycles"] for r in rows][:1] == ["4667"] and (tmp_path / "p.png").stat().st_size > 0
    code, out, err = run_cli(capsys, *args, "--json")
    rep = json.loads(out)
    assert code == 0 and rep["cached"] == 4 and rep["computed"] == 0 and err == ""
    # an existing output file is not overwritten without --force
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "t.csv"))
    assert code == 2 and f"--out {tmp_path / 't.csv'}: the file exists; give --force to overwrite it" in err


@pytest.mark.parametrize("argv, message", [
    (["sweep"], "SweepError: name a workload (step-hdl sweep WORKLOAD ...) or give --points"),
    (["sweep", "swiglu", "--grid", "tile-b"], "argument --grid: expected NAME=V1,V2,..., got 'tile-b'"),
    (["sweep", "swiglu", "--eval", "rtl"], "evaluations must be one or more of metrics, model, sim"),
    (["sweep", "swiglu", "--out", "t.txt"], "--out t.txt: expected a file name ending in .csv or .json"),
    (["sweep", "swiglu", "--pareto", "cycles"], "--pareto: expected two result fields X,Y, got 'cycles'"),
    (["sweep", "swiglu", "--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["sweep", "--points", "missing.json"], "cannot read sweep definition 'missing.json'"),
])
def test_cli_errors(capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as exc:      # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err


def test_definition_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"workload": "swiglu", "grid": {"tile-b": [4, 8]}, "set": SMALL,
                                "eval": ["metrics"], "points": [{"workload": "gqa", "params": {"head-dim": 4}}]}))

    class Args:
        workload, points, grid, set, eval, group = None, str(path), [], [], None, ""
    pts = points_of(Args)
    assert [p.workload for p in pts] == ["gqa", "swiglu", "swiglu"]
    assert all(p.evals == ("metrics",) for p in pts)
    path.write_text(json.dumps({"workload": "swiglu", "axes": {}}))
    with pytest.raises(SweepError, match=r"unknown field\(s\) axes; a definition has workload, grid, set, eval"):
        points_of(Args)


def _square(x):
    return {"y": x * x}


def test_run_tasks_caches_each_call_under_its_own_files(tmp_path):
    """``run_tasks`` (what the paper studies run with): a re-run takes every call from the cache, and a changed
    file recomputes only the calls that read it."""
    from step_hdl.flow.sweep.tasks import run_tasks
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    a.write_text("a")
    b.write_text("b")
    cache = ResultCache(tmp_path / "cache")
    calls = [{"x": 2, "trace": str(a)}, {"x": 3, "trace": str(b)}]
    done = []

    def run():
        return run_tasks(lambda x, trace: _square(x), calls, "serial", cache=cache,
                         files=lambda c: [c["trace"]], progress=done.append, label=lambda c: c["x"])
    assert run() == [{"y": 4}, {"y": 9}]
    assert run() == [{"y": 4}, {"y": 9}] and done[-2:] == ["2 (cached)", "3 (cached)"]
    b.write_text("b, changed")
    done.clear()
    run()
    assert done[0] == "2 (cached)" and not done[1].endswith("(cached)")
