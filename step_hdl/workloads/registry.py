"""Named workloads with their command-line parameters (used by the CLI and benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:       # the registry is read by the command line before any workload is built
    from .base import Workload


@dataclass(frozen=True)
class Param:
    flag: str           # command-line flag without dashes, e.g. "tile-b"
    type: type
    default: object
    help: str
    choices: tuple | None = None
    #: the smallest value an integer parameter takes
    minimum: int | None = None

    @property
    def dest(self) -> str:
        return self.flag.replace("-", "_")

    def check(self, value):
        """``value``, or a ValueError naming the parameter, the value and what it takes."""
        if self.minimum is not None and (isinstance(value, bool) or not isinstance(value, int)
                                         or value < self.minimum):
            raise ValueError(f"--{self.flag}: expected an integer >= {self.minimum}, got {value!r}")
        return value


def _swiglu(a) -> Workload:
    from .swiglu import swiglu
    return swiglu(a.batch, a.hidden, a.inter, a.tile_b, a.tile_inter, a.dtype, a.seed)


def _moe(a) -> Workload:
    import numpy as np
    from .moe import moe
    from .traces import model_of, routing_trace
    routing = routing_trace(a.trace)
    if a.tokens:
        routing = routing[: a.tokens]
    experts = model_of(a.trace)["experts"]
    return moe(np.asarray(routing), experts, a.hidden, a.inter, a.tile_inter, a.dtype, a.tiling, a.tile,
               a.experts_per_region, a.seed)


def _gqa(a) -> Workload:
    from .gqa import gqa_decode, scale_lengths
    from .traces import kv_lengths, kv_trace
    lens = scale_lengths(kv_lengths(kv_trace(a.batch, a.kv_trace), a.batch), a.scale)
    return gqa_decode(lens, a.kv_heads, a.group, a.head_dim, a.regions, a.strategy, a.dtype, a.seed)


DTYPE_CHOICES = ("fp32", "bf16", "int8", "int16", "int32")
#: every command's element type unless told otherwise: the one every RTL unit takes, so ``model``,
#: ``metrics``, ``run``, ``sim``, ``compare`` and ``synth`` on the same arguments describe the same hardware
DEFAULT_DTYPE = "int16"
DTYPE_HELP = "element type (the hardware takes int8/int16/int32/bf16)"

WORKLOADS: dict[str, tuple[Callable, list[Param], str]] = {
    "swiglu": (_swiglu, [
        Param("batch", int, 64, "batch size B", minimum=1),
        Param("hidden", int, 256, "hidden size H", minimum=1),
        Param("inter", int, 512, "intermediate size I", minimum=1),
        Param("tile-b", int, 16, "batch tile tb", minimum=1),
        Param("tile-inter", int, 16, "intermediate tile ti", minimum=1),
        Param("dtype", str, DEFAULT_DTYPE, DTYPE_HELP, DTYPE_CHOICES),
        Param("seed", int, 0, "seed of the random inputs", minimum=0),
    ], "SwiGLU layer (one MoE expert) with the paper's schedule"),
    "moe": (_moe, [
        Param("trace", str, "mixtral_b64", "routing trace", ("mixtral_b64", "mixtral_b1024", "qwen_b64",
                                                             "qwen_b1024")),
        Param("tokens", int, 0, "use only the first N tokens of the trace (0 = all)", minimum=0),
        Param("hidden", int, 64, "hidden size (scaled down from the model's)", minimum=1),
        Param("inter", int, 128, "expert intermediate size (scaled down)", minimum=1),
        Param("tile-inter", int, 32, "intermediate tile", minimum=1),
        Param("tiling", str, "dynamic", "token tiling", ("static", "dynamic")),
        Param("tile", int, 16, "static token tile (rows)", minimum=1),
        Param("experts-per-region", int, 1, "experts sharing one region (time-multiplexing)", minimum=1),
        Param("dtype", str, DEFAULT_DTYPE, DTYPE_HELP, DTYPE_CHOICES),
        Param("seed", int, 0, "seed of the random inputs", minimum=0),
    ], "Mixture-of-Experts layer driven by a real routing trace"),
    "gqa": (_gqa, [
        Param("batch", int, 16, "batch size of the KV trace (16, 64, 80)", minimum=1),
        Param("kv-trace", str, "0", "KV trace: file name, or index into the sorted b<batch> files"),
        Param("scale", int, 64, "divide KV lengths by this factor", minimum=1),
        Param("kv-heads", int, 1, "KV heads", minimum=1),
        Param("group", int, 4, "query heads per KV head", minimum=1),
        # 4: a random load's logical tile is one physical tile on the default 4x4 fabric (a [16, 4] K tile
        # spans four and does not map), so the defaults run on every command
        Param("head-dim", int, 4, "head dimension", minimum=1),
        Param("regions", int, 4, "parallel regions", minimum=1),
        Param("strategy", str, "dynamic", "parallelization", ("interleaved", "contiguous", "dynamic")),
        Param("dtype", str, DEFAULT_DTYPE, "element type (int8/int16: the fixed-point variant)",
              ("fp32", "bf16", "int8", "int16")),
        Param("seed", int, 0, "seed of the random inputs", minimum=0),
    ], "grouped-query attention decode over a real KV-length trace"),
}


def build(name: str, args) -> Workload:
    """Build workload ``name`` from an object with the workload's parameters as attributes (each checked
    first: a ValueError names the parameter, what was given and what it takes)."""
    for prm in WORKLOADS[name][1]:
        prm.check(getattr(args, prm.dest))
    return WORKLOADS[name][0](args)


def defaults(name: str, **overrides):
    """A namespace of a workload's default parameters, with overrides (Python API helper)."""
    from types import SimpleNamespace
    ns = {p.dest: p.default for p in WORKLOADS[name][1]}
    unknown = set(overrides) - set(ns)
    if unknown:
        raise TypeError(f"workload {name!r} has no parameter(s) {sorted(unknown)}; it takes {sorted(ns)}")
    ns.update(overrides)
    return SimpleNamespace(**ns)
