"""sim.compare: statistics, the `step-hdl compare` command, and the model against measured RTL cycles."""

import json

import numpy as np
import pytest

from step_hdl.cli import main
from step_hdl.sim.compare import compare, load_rtl_points, mape, pearson, swiglu_model_fn

# SwiGLU B=64 H=256 I=512 int16 on 16x16 physical tiles, DRAM preset 'paper', every point bit-exact:
# `python bench/rtl_sim.py --tiles 16 --sweep` (Verilator), 2026-12-02 (MatMul units summing their k-runs,
# on-chip buffers that stream).
# (tile_b, tile_inter) -> cycles
RTL_SWIGLU_16 = {
    (16, 16): 16660, (16, 32): 14612, (16, 64): 13616, (16, 128): 13164, (16, 256): 13028,
    (32, 16): 10545, (32, 32): 8507, (32, 64): 7543, (32, 128): 7153, (32, 256): 7143,
    (64, 16): 7473, (64, 32): 5540, (64, 64): 4713, (64, 128): 4423, (64, 256): 4766,
}


def test_statistics_on_known_numbers():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert mape([100, 200], [110, 180]) == pytest.approx(10.0)
    pts = [{"tile_b": 1, "tile_inter": 1, "cycles": 100}, {"tile_b": 1, "tile_inter": 2, "cycles": 200},
           {"tile_b": 2, "tile_inter": 1, "cycles": 400}]
    model = {(1, 1): 105, (1, 2): 190, (2, 1): 480}
    c = compare(pts, lambda p: model[p["tile_b"], p["tile_inter"]])
    assert [p["error_pct"] for p in c.points] == pytest.approx([5.0, -5.0, 20.0])
    assert c.mape == pytest.approx(10.0)
    assert c.pearson == pytest.approx(np.corrcoef([100, 200, 400], [105, 190, 480])[0, 1])
    assert c.worst["tile_b"] == 2 and c.worst["error_pct"] == pytest.approx(20.0)
    with pytest.raises(ValueError):
        compare([{"tile_b": 1, "tile_inter": 1}], lambda p: 1)


def test_load_rtl_points_accepts_a_list_or_bench_output(tmp_path):
    pts = [{"tile_b": 16, "tile_inter": 16, "cycles": 5}, {"tile_b": 16, "tile_inter": 32, "status": "hung",
                                                           "cycles": 9}]
    (tmp_path / "a.json").write_text(json.dumps(pts))
    (tmp_path / "b.json").write_text(json.dumps({"sweep": pts}))
    assert load_rtl_points(tmp_path / "a.json") == pts[:1] == load_rtl_points(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps({"other": 1}))
    with pytest.raises(ValueError):
        load_rtl_points(tmp_path / "c.json")


def test_cli_compare_on_fabricated_rtl(tmp_path, capsys):
    # a small SwiGLU (B=32 H=64 I=64) on 16x16 tiles; the 'RTL' cycles are made up
    pts = [{"tile_b": 16, "tile_inter": 16, "cycles": 1000}, {"tile_b": 32, "tile_inter": 32, "cycles": 600},
           {"tile_b": 16, "tile_inter": 64, "cycles": 700}]
    path = tmp_path / "rtl.json"
    path.write_text(json.dumps(pts))
    args = ["compare", "swiglu", "--rtl-json", str(path), "--size", "32", "64", "64"]
    assert main(args + ["--json", "--plot", str(tmp_path / "cmp.png")]) == 0
    out = json.loads(capsys.readouterr().out)
    fn = swiglu_model_fn((32, 64, 64))
    assert [(p["tile_b"], p["tile_inter"], p["rtl_cycles"]) for p in out["points"]] == \
        [(p["tile_b"], p["tile_inter"], p["cycles"]) for p in pts]
    assert [p["model_cycles"] for p in out["points"]] == [fn(p) for p in pts]
    assert out["mape"] == pytest.approx(mape([p["cycles"] for p in pts], [fn(p) for p in pts]), rel=1e-5)
    assert -1 <= out["pearson"] <= 1
    assert (tmp_path / "cmp.png").stat().st_size > 0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "rtl_cycles" in text and "pearson" in text and "mape" in text



def test_compare_without_rtl_json_runs_the_rtl_sweep(capsys, monkeypatch):
    """Without --rtl-json, compare runs the RTL itself (here stubbed: the real 16x16 sweep takes minutes)."""
    from step_hdl.sim import compare as cmp_mod
    from step_hdl.sim.compare import paper_points
    assert paper_points(tile=4)[:2] == [(4, 4), (4, 8)] and len(paper_points()) == 15
    seen = {}

    def fake(size, tile, backend, dram, progress=None):
        seen.update(size=size, tile=tile, backend=backend)
        return [{"tile_b": 4, "tile_inter": 4, "cycles": 1000}, {"tile_b": 8, "tile_inter": 4, "cycles": 900}]
    monkeypatch.setattr(cmp_mod, "run_rtl_sweep", fake)
    assert main(["compare", "swiglu", "--size", "16", "8", "64", "--phys-tile", "4", "--backend", "amaranth",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen == {"size": (16, 8, 64), "tile": 4, "backend": "amaranth"} and len(out["points"]) == 2


def test_model_tracks_rtl_swiglu_paper_sweep():
    # the memory-system issue's target: pearson >= 0.995, MAPE <= 3 %; and every point within 10 %
    pts = [{"tile_b": tb, "tile_inter": ti, "cycles": c} for (tb, ti), c in RTL_SWIGLU_16.items()]
    c = compare(pts, swiglu_model_fn())
    bad = [(p["tile_b"], p["tile_inter"], p["error_pct"]) for p in c.points if abs(p["error_pct"]) > 10]
    assert not bad, f"model off by more than 10 %: {bad}; pearson {c.pearson:.3f}, mape {c.mape:.1f} %"
    assert c.pearson >= 0.995 and c.mape <= 3, f"pearson {c.pearson:.4f}, mape {c.mape:.2f} %"
