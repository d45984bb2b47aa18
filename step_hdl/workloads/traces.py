"""Access to the real MoE routing and KV-cache traces in ``shared/traces``.

The traces are not part of the package. They are looked up in, in order: the
``STEP_HDL_TRACES`` environment variable, ``../shared/traces`` next to the
project checkout, and ``../shared/traces`` from the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import StepError

ROUTING_TRACES = ("mixtral_b64", "mixtral_b1024", "qwen_b64", "qwen_b1024")

#: model shapes that go with the routing traces (shared/traces/README.md)
MODELS = {
    "mixtral": {"experts": 8, "top_k": 2, "hidden": 4096, "inter": 14336},
    "qwen": {"experts": 128, "top_k": 8, "hidden": 2048, "inter": 768},
}


class TraceNotFound(StepError):
    """The traces folder or a trace file is missing."""


def traces_dir() -> Path:
    """The folder holding ``moe_expert_routing/`` and ``kv_cache_lengths/``: ``STEP_HDL_TRACES`` if set (and
    then only that: a wrong folder is an error, not silently replaced), else ``../shared/traces``."""
    env = os.environ.get("STEP_HDL_TRACES")
    if env:
        c = Path(env)
        if (c / "moe_expert_routing").is_dir() or (c / "kv_cache_lengths").is_dir():
            return c
        raise TraceNotFound(f"STEP_HDL_TRACES={env}: no moe_expert_routing/ or kv_cache_lengths/ folder there "
                            f"(expected the shared/traces folder)")
    candidates = []
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared" / "traces")
    candidates.append(Path.cwd().parent / "shared" / "traces")
    for c in candidates:
        if (c / "moe_expert_routing").is_dir() or (c / "kv_cache_lengths").is_dir():
            return c
    raise TraceNotFound("traces not found: looked in " + ", ".join(str(c) for c in candidates)
                        + " (set STEP_HDL_TRACES to the shared/traces folder)")


def routing_trace(name: str) -> np.ndarray:
    """Expert choices ``[tokens, top_k]`` of a routing trace, e.g. ``routing_trace('mixtral_b64')``."""
    if name not in ROUTING_TRACES:
        raise TraceNotFound(f"unknown routing trace {name!r}; known: {', '.join(ROUTING_TRACES)}")
    path = traces_dir() / "moe_expert_routing" / f"{name}.npz"
    if not path.exists():
        raise TraceNotFound(f"routing trace missing: {path}")
    return np.load(path)["data"].astype(np.int64)


def model_of(trace: str) -> dict:
    """Model shape of a routing trace (``mixtral`` or ``qwen``)."""
    return MODELS[trace.split("_")[0]]


def kv_traces(batch: int) -> list[Path]:
    """The KV-length trace files of one batch size (16, 64 or 80), sorted by spread."""
    base = traces_dir() / "kv_cache_lengths"
    folder = base / f"b{batch}"
    files = sorted(folder.glob("*.npy"))
    if not files:
        have = sorted(int(p.name[1:]) for p in base.glob("b*") if p.name[1:].isdigit())
        raise TraceNotFound(f"no KV-length traces for batch {batch} in {base} (batches with traces: "
                            f"{', '.join(map(str, have)) or 'none'})")
    return files


def kv_trace(batch: int, which: str) -> Path:
    """The KV-length trace ``which`` of batch ``batch``: an index into :func:`kv_traces` or a file name."""
    files = kv_traces(batch)
    if which.isdigit():
        if int(which) >= len(files):
            raise TraceNotFound(f"kv-trace {which}: batch {batch} has {len(files)} traces (0 to {len(files) - 1})")
        return files[int(which)]
    return Path(which)


def kv_lengths(path_or_name, batch: int | None = None) -> np.ndarray:
    """KV-cache lengths of one batch: a path, or a file name under ``kv_cache_lengths/b{batch}``."""
    path = Path(path_or_name)
    if not path.exists() and batch is not None:
        path = traces_dir() / "kv_cache_lengths" / f"b{batch}" / path.name
    if not path.exists():
        raise TraceNotFound(f"KV-length trace missing: {path}")
    return np.load(path).astype(np.int64)


def kv_stdev(path) -> int:
    """The spread (rounded standard deviation) encoded in a KV trace file name."""
    return int(Path(path).stem.split("_")[1].removeprefix("stdev"))
