"""bench/memory.py runs (a small configuration) and its RTL and model columns agree where they must."""

import importlib.util
import json
from pathlib import Path


def test_memory_bench_small(tmp_path, capsys):
    path = Path(__file__).resolve().parent.parent / "bench" / "memory.py"
    spec = importlib.util.spec_from_file_location("bench_memory", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "mem.json"
    assert bench.main(["--ports", "2", "--bytes", "64", "--requests", "8", "--json", str(out)]) == 0
    rows = {r["pattern"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"sequential", "random", "one-channel"}
    # one channel, one 64-byte block every 2 cycles: both sides time it alike
    assert rows["one-channel"]["ratio"] == 1.0 and rows["one-channel"]["rtl_bytes_per_cycle"] <= 32
    assert all(0 < r["of_peak"] <= 1 for r in rows.values())
    assert bench.main(["--ports", "0"]) == 2
    assert "ports, bytes and requests must be >= 1, got 0" in capsys.readouterr().err
