"""GQA decode over real KV-length traces, three parallelization strategies."""

import pytest

from step_hdl.metrics import metrics, observed_symbols
from step_hdl.workloads import gqa_decode, scale_lengths
from step_hdl.workloads.traces import kv_lengths, kv_stdev


@pytest.fixture(scope="module")
def three_b16(kv_files):
    files = kv_files(16)
    return [files[0], files[len(files) // 2], files[-1]]   # low, medium, high spread


@pytest.mark.parametrize("strategy", ["interleaved", "contiguous", "dynamic"])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_gqa_matches_numpy(three_b16, which, strategy):
    lens = scale_lengths(kv_lengths(three_b16[which]), 32)
    w = gqa_decode(lens, kv_heads=2, group=4, head_dim=16, regions=4, strategy=strategy)
    res = w.run()
    assert w.mismatches(res) == {}
    seen = observed_symbols(w.graph, res)
    assert metrics(w.graph).subs(seen).offchip_bytes == res.offchip_bytes


def test_spreads_are_ordered(three_b16):
    s = [kv_stdev(f) for f in three_b16]
    assert s == sorted(s) and s[0] < s[-1]


def test_dynamic_dispatch_uses_every_region_and_any_schedule(three_b16):
    lens = scale_lengths(kv_lengths(three_b16[2]), 32)
    w = gqa_decode(lens, regions=4, strategy="dynamic")
    for seed in (None, 1, 2):
        res = w.run(seed=seed)
        assert w.mismatches(res) == {}
        per_region = [sum(t.is_data for t in res.edges[f"dispatch.out{r}"]) for r in range(4)]
        assert sum(per_region) == 16 and min(per_region) >= 1


def test_static_assignments():
    from step_hdl.workloads.gqa import static_assignment
    assert static_assignment(8, 4, "interleaved").tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert static_assignment(8, 4, "contiguous").tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("strategy", ["interleaved", "contiguous", "dynamic"])
def test_fixed_point_gqa_matches_numpy_and_approximates_attention(three_b16, strategy):
    """The int16 variant (the one the hardware runs) is bit-exact with its numpy twin, moves the bytes its
    symbolic metrics say, and stays within a few units of float attention on the same integers."""
    import numpy as np
    from step_hdl.workloads.gqa import FRAC, SHIFT
    lens = scale_lengths(kv_lengths(three_b16[2]), 64)
    w = gqa_decode(lens, group=4, head_dim=4, regions=4, strategy=strategy, dtype="int16")
    res = w.run()
    assert w.mismatches(res) == {}
    assert metrics(w.graph).subs(observed_symbols(w.graph, res)).offchip_bytes == res.offchip_bytes
    t, out = w.tensors, w.expected["outT"]
    for i, (start, n) in enumerate(t["kv_table"]):
        q = t["qT"][:, 4 * i:4 * i + 4].astype(float)
        k, v = t["K"][start:start + n].astype(float), t["V"][start:start + n].astype(float)
        s = k @ q / 2 ** (SHIFT + FRAC)
        p = np.exp(s - s.max(axis=0))
        assert np.abs(v.T @ (p / p.sum(axis=0)) - out[:, 4 * i:4 * i + 4]).max() < 2.5


def test_gqa_rejects_wide_integers():
    with pytest.raises(ValueError, match="fixed-point int8/int16, got int32"):
        gqa_decode([3, 4], group=4, head_dim=4, regions=2, dtype="int32")
