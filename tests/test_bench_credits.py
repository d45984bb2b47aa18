"""bench/credits.py: its arguments are checked before any build, and its fabric is the cross-validation's."""

import importlib.util
from pathlib import Path

import pytest


def _bench():
    path = Path(__file__).resolve().parent.parent / "bench" / "credits.py"
    spec = importlib.util.spec_from_file_location("bench_credits", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("argv, msg", [
    (["--credits", "64", "0"], "--credits must be >= 1 (got [0])"),
    (["--workers", "0"], "--workers must be >= 1, got 0"),
])
def test_bad_arguments_exit_2(argv, msg, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(argv)
    assert exc.value.code == 2 and msg in capsys.readouterr().err


def test_json_into_a_folder_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _bench().main(["--json", str(tmp_path)])
    assert exc.value.code == 2 and "is a folder" in capsys.readouterr().err


def test_the_point_and_fabric_are_the_cross_validations():
    """At 64 credits the bench's point is bench/data/crossval-rtl.json's (RTL 5,231): the model gives the
    cross-validation's 4,667 on it."""
    from step_hdl.flow import model
    bench = _bench()
    fab = bench.fabric("paper")
    assert fab.mem_inflight == 64 and fab.sram_bytes == 16384
    assert model(bench.workload("paper"), fab, "paper").cycles == 4667
