"""Compute units: Map, Accum, Scan and FlatMap (STeP's higher-order operators).

Integer arithmetic is bit-exact with :mod:`step_hdl.functions` (the hardware
function library is :mod:`step_hdl.units.functions`). Structural parameters
(physical tiles, element types, supported functions, ``max_rank``) are frozen
dataclasses; per-program settings (function select, shift, frac, rank, ...) are
configuration registers that :meth:`configure` fills from the language node's
parameters, so one build serves several programs.

======================  =======  ===========================  ==========================================
unit                    latency  II                           resources (beyond registers)
======================  =======  ===========================  ==========================================
Map                     1 (+     1 (matmul folded: ``M/g``)   the functions' logic, side by side;
                        stages)                               matmul ``M·K·N`` (``g·K·N``) multipliers
Accum (add/max)         1        1; 2 for ``S_k``, ``k > b``  one 32-bit adder/comparator per element
Accum (retile_row)      1        1; 2 for ``S_k``, ``k > b``  row-block write enables
Accum (keep ``q > 0``)  2        1; emission overlapped       two banks of ``P`` state tiles and ``P``
                                                              stop levels (``positions = P``)
Scan (add/max)          1        1                            one 32-bit adder/comparator per element
FlatMap                 0        ``R + 1`` / ``count + 1``    StopMerger, 32-bit counter (range)
======================  =======  ===========================  ==========================================

A Map built with ``pipeline`` adds its functions' ``stages`` (:mod:`step_hdl.units.pipeline`).
All outputs of Map/Accum/Scan are registered (``o.valid`` is a flip-flop);
their ``i.ready`` is combinational in ``o.ready`` (put a BackwardSlice or
Queue in front to cut the ready path). FlatMap's output is combinational from
its input through the StopMerger. No unit's ``o.valid`` depends on ``o.ready``.

Physical tiles are the logical tiles: a unit built for ``[4, 4]`` int16 tiles
takes exactly those (the mapper picks a unit whose tiles match the node's).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import memory

from step_hdl import floats
from step_hdl.errors import StepTypeError
from step_hdl.functions import fn as make_fn
from step_hdl.types import StreamType, Tile, as_dim, dims_equal, dtype as make_dtype

from .base import reject, StepUnit
from .config import Reg
from .functions import HW_FUNCTIONS, TileVal, UPDATES, as_fn, hw_fn, update_elems
from .layout import TileFormat, TokenFormat, has_short, tile_elems, token_short
from .merger import StopMerger
from .params import ParamError, StreamParams
from .pipeline import NO_PIPE, Pipe

__all__ = ["MapParams", "Map", "AccumParams", "Accum", "Scan", "FlatMapParams", "FlatMap"]

INT_TYPES = ("int8", "int16", "int32")
#: float formats the compute units take (each function says which it builds: ``HwFn.float_formats``)
FLOAT_TYPES = ("bf16", "fp32")


def _unit_dtype(owner: str, name: str, value) -> None:
    if value not in INT_TYPES + FLOAT_TYPES:
        raise ParamError(f"{owner}: unsupported element type {value!r} for {name}; "
                         f"the compute units take {list(INT_TYPES + FLOAT_TYPES)}")


def _valid_rows(tile: "TileVal | None", port, fn_name: str):
    """``tile`` (the payload of stream ``port``) with the rows past its valid count (``short``) replaced by
    the neutral value of ``fn_name``: 0 for sums and products, the lowest value (-Inf) for ``col_max``."""
    if tile is None or not has_short(port.payload.payload):
        return tile
    dt = tile.tile.dtype
    if fn_name == "col_max":
        fill = dt.min if dt.is_int else floats.fmt_of(dt).neg_inf
    else:
        fill = 0
    valid = tile.rows - token_short(port.payload.payload)
    return TileVal(tile.tile, [Mux(r < valid, tile.elems[r * tile.cols + c], fill)
                               for r in range(tile.rows) for c in range(tile.cols)])


def token_format(tile: Tile, max_rank: int) -> TokenFormat:
    """The token format of a stream of ``tile``s up to rank ``max_rank``."""
    return TokenFormat(TileFormat(tile.dtype, int(tile.rows), int(tile.cols)), max_rank)


def _check_input(owner: str, port: str, in_types: dict, tile: Tile, max_rank: int) -> StreamType:
    st = in_types.get(port)
    if st is None:
        raise ParamError(f"{owner}: no stream type for input {port!r}")
    t = st.dtype
    if not (isinstance(t, Tile) and t.dtype == tile.dtype and dims_equal(t.rows, tile.rows) is True
            and dims_equal(t.cols, tile.cols) is True):
        raise ParamError(f"{owner}: input {port!r} carries {t}, but the unit's physical tile is {tile}")
    if st.rank > max_rank:
        raise ParamError(f"{owner}: input {port!r} has rank {st.rank} > max_rank {max_rank}")
    return st



# =========================================================================== Map

@dataclass(frozen=True)
class MapParams(StreamParams):
    """Structural parameters of a :class:`Map` unit.

    ``rows × cols`` of ``dtype`` is the first operand's tile; a second operand
    (present when a binary function is supported) is ``in1_rows × in1_cols`` of
    ``in1_dtype`` (each defaulting to the first's). ``fns`` lists the supported
    functions (one is selected per program); all must produce the same output
    tile, which fixes the output port. ``out_dtype`` is requantize's target type.
    ``matmul_transpose_a``: None (default) builds the matmul modes that the tiles
    allow (a ``transpose_a`` register where both settings fit); True or False
    builds only the ``transpose_a`` (``a.T @ b``) or only the plain modes, which
    also picks the output tile where both fit with different sizes (two ``[1, P]``
    rows: ``[P, P]`` outer product with True, ``[1, 1]`` inner product otherwise;
    see :class:`~step_hdl.units.functions.MatMul`).
    """

    fns: tuple = ("add",)
    in1_rows: int | None = None
    in1_cols: int | None = None
    in1_dtype: str | None = None
    out_dtype: str | None = None
    matmul_rows: int | None = None
    matmul_transpose_a: bool | None = None
    matmul_groups: bool = False
    pipeline: bool = False

    def hw(self, name: str):
        """The hardware function ``name`` as this build makes it."""
        return hw_fn(self.owner, name, self.matmul_transpose_a, self.matmul_groups)

    def validate(self):
        super().validate()
        _unit_dtype(self.owner, "dtype", self.dtype)
        if self.matmul_rows is not None:
            if isinstance(self.matmul_rows, bool) or not isinstance(self.matmul_rows, int) or self.matmul_rows < 1:
                raise ParamError(f"{self.owner}: matmul_rows must be an integer >= 1, got {self.matmul_rows!r}")
            if "matmul" not in self.fns:
                raise ParamError(f"{self.owner}: matmul_rows is set but matmul is not in fns {self.fns!r}")
            if self.rows % self.matmul_rows:
                raise ParamError(f"{self.owner}: matmul_rows ({self.matmul_rows}) must divide rows ({self.rows})")
        for k in ("in1_rows", "in1_cols"):
            v = getattr(self, k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ParamError(f"{self.owner}: {k} must be an integer >= 1, got {v!r}")
        if self.in1_dtype is not None:
            _unit_dtype(self.owner, "in1_dtype", self.in1_dtype)
        if self.out_dtype is not None:
            _unit_dtype(self.owner, "out_dtype", self.out_dtype)
        if not isinstance(self.pipeline, bool):
            raise ParamError(f"{self.owner}: pipeline must be true or false, got {self.pipeline!r}")
        if not isinstance(self.matmul_groups, bool):
            raise ParamError(f"{self.owner}: matmul_groups must be true or false, got {self.matmul_groups!r}")
        if self.matmul_groups and "matmul" not in self.fns:
            raise ParamError(f"{self.owner}: matmul_groups is set but matmul is not in fns {self.fns!r}")
        if not isinstance(self.fns, tuple) or not self.fns:
            raise ParamError(f"{self.owner}: fns must be a non-empty tuple of function names, got {self.fns!r}")
        if len(set(self.fns)) != len(self.fns):
            raise ParamError(f"{self.owner}: fns lists a function twice: {self.fns!r}")
        if self.matmul_transpose_a is not None:
            if not isinstance(self.matmul_transpose_a, bool):
                raise ParamError(f"{self.owner}: matmul_transpose_a must be None, true or false, "
                                 f"got {self.matmul_transpose_a!r}")
            if "matmul" not in self.fns:
                raise ParamError(f"{self.owner}: matmul_transpose_a is set but matmul is not in fns {self.fns!r}")
        outs = {}
        for name in self.fns:
            f = self.hw(name)
            f.check_floats(self.owner, self.in0_tile, self.in1_tile if f.arity == 2 else None)
            try:
                outs[name] = f.out_tile(self.in0_tile, self.in1_tile if f.arity == 2 else None, self.out_dt)
            except StepTypeError as exc:
                raise ParamError(f"{self.owner}: function {name!r} cannot run on these tiles: {exc}") from None
        if len(set(outs.values())) != 1:
            raise ParamError(f"{self.owner}: the functions produce different output tiles "
                             f"({', '.join(f'{k}: {v}' for k, v in outs.items())}); one build has one output port")
        if self.matmul_rows is not None and int(outs["matmul"].rows) != self.rows:
            raise ParamError(f"{self.owner}: matmul_rows folds the first operand's rows, but this matmul's "
                             f"output has {outs['matmul'].rows} rows (a transpose_a build cannot be folded)")
        if self.matmul_rows is not None and not self.in0_tile.dtype.is_int:
            raise ParamError(f"{self.owner}: matmul_rows folds integer matmuls only, got {self.dtype} tiles")

    @property
    def in0_tile(self) -> Tile:
        return Tile(self.dtype, self.rows, self.cols)

    @property
    def in1_tile(self) -> Tile:
        return Tile(self.in1_dtype or self.dtype, self.in1_rows or self.rows, self.in1_cols or self.cols)

    @property
    def out_dt(self):
        return make_dtype(self.out_dtype) if self.out_dtype else None

    @property
    def binary(self) -> bool:
        return any(HW_FUNCTIONS[n].arity == 2 for n in self.fns)

    @property
    def out_tile(self) -> Tile:
        f = self.hw(self.fns[0])
        return f.out_tile(self.in0_tile, self.in1_tile if f.arity == 2 else None, self.out_dt)

    @property
    def matmul_passes(self) -> int:
        """Cycles per matmul tile (its II): ``rows / matmul_rows`` (1 when fully parallel)."""
        return self.rows // (self.matmul_rows or self.rows)

    @property
    def stages(self) -> int:
        """Pipeline stages in front of the output register (``units.pipeline``): with ``pipeline``, the most
        any supported function cuts its logic into; none for a folded matmul (its passes are its pipeline)."""
        if not self.pipeline or self.matmul_passes > 1:
            return 0
        return max(self.hw(n).stages(self.in0_tile) for n in self.fns)

    @property
    def multipliers(self) -> int:
        """Hardware multipliers of the build (every supported function is built; a folded
        matmul has ``matmul_rows·K·N``)."""
        return sum(self.hw(n).multipliers(self.in0_tile, self.in1_tile) // (self.matmul_passes if n == "matmul"
                                                                           else 1) for n in self.fns)


class Map(StepUnit):
    """STeP Map: one or two inputs (``i0``, ``i1``) -> ``o``, a library function per element.

    Every function in ``params.fns`` is built side by side (combinational; see
    :mod:`step_hdl.units.functions` for each one's multipliers); the ``fn``
    register selects one. A unary function ignores ``i1`` (never ready).
    ``matmul`` on ``[M,K] x [K,N]`` is fully parallel by default: ``M·K·N``
    multipliers, II 1. With ``matmul_rows = g`` (dividing ``M``) it computes
    ``g`` output rows per cycle: ``g·K·N`` multipliers, II ``M/g`` cycles per
    tile pair (the operands are held and the earlier row groups kept in an
    ``M·N`` int32 register), latency ``M/g``. Every other function: II 1.
    ``params.multipliers`` counts a build's multipliers. With ``params.pipeline`` the
    deep functions (integer matmul, mul, SiLU, exp) are cut into ``params.stages`` stages
    (:mod:`step_hdl.units.pipeline`), all moving when the output register is free.

    Registers: ``fn`` (index into ``params.fns``) and the functions' own
    (``shift``, ``frac``, ``transpose``, ``transpose_a``, ``scale``, ``offset``).

    Stops and done pass through in lockstep: with two inputs both must carry
    the same stop structure (the tokens of ``i1`` are consumed with those of
    ``i0``; a mismatch is a program error that the hardware does not detect).

    Latency ``1 + params.stages`` (registered output; ``M/g`` for a folded
    matmul), II 1 (see above). Combinational: ready only (``i0.ready``/``i1.ready`` from
    ``o.ready``, the other input's valid and ``i0``'s stop level);
    data and valid are registered (the function is evaluated in front of the
    output register).
    """

    kind = "Map"
    params_cls = MapParams

    def __init__(self, params: MapParams):
        if not isinstance(params, self.params_cls):
            reject(self, ParamError(f"{type(self).__name__}: params must be {self.params_cls.__name__}, got "
                                     f"{type(params).__name__}"))
        super().__init__(params)

    def formats(self):
        p = self.params
        out = {"i0": (False, token_format(p.in0_tile, p.max_rank)), "o": (True, token_format(p.out_tile, p.max_rank))}
        if p.binary:
            out["i1"] = (False, token_format(p.in1_tile, p.max_rank))
        return out

    def registers(self):
        regs = [Reg("fn", max(1, (len(self.params.fns) - 1).bit_length()), 0, doc="selected function")]
        seen = {"fn"}
        for name in self.params.fns:
            for r in HW_FUNCTIONS[name].regs:
                if r.name not in seen:
                    seen.add(r.name)
                    regs.append(r)
        return regs

    def configure(self, op_params, in_types):
        return self.config_image(**self._config_values(op_params, in_types))

    def _config_values(self, op_params, in_types) -> dict:
        """The registers' values for a node with ``op_params`` (``fn``, ``n``) on inputs ``in_types``."""
        p, owner = self.params, type(self).__name__
        f = as_fn(owner, op_params.get("fn"))
        if f.name not in p.fns:
            raise ParamError(f"{owner}: function {f.name!r} is not built into this unit (it has {list(p.fns)})")
        hf = p.hw(f.name)
        n = op_params.get("n", 1)
        if n != hf.arity:
            raise ParamError(f"{owner}: function {f.name!r} takes {hf.arity} input(s), the node has n={n}")
        _check_input(owner, "in0", in_types, p.in0_tile, p.max_rank)
        if hf.arity == 2:
            _check_input(owner, "in1", in_types, p.in1_tile, p.max_rank)
        want = f.spec.out_type(f, p.in0_tile, *([p.in1_tile] if hf.arity == 2 else []))
        if want != p.out_tile:
            raise ParamError(f"{owner}: {f} produces {want}, but the output port carries {p.out_tile}")
        values = {"fn": p.fns.index(f.name)}
        values.update(hf.reg_values(f, p.in0_tile, p.in1_tile if hf.arity == 2 else None))
        return values

    def _folded_matmul(self, m, a, b, out_tile, regs, phase):
        """``matmul_rows`` output rows per cycle: row group ``phase`` of ``a`` times ``b``; the earlier
        groups are kept in ``partial`` and the last one is combinational when the result is registered."""
        p = self.params
        g_rows, passes = p.matmul_rows, p.matmul_passes
        n_cols = int(out_tile.cols)
        group = p.hw("matmul").build(m, a, b, out_tile, regs, row_group=(phase, g_rows))
        partial = Signal(self.o.payload.payload.shape(), name="matmul_partial")
        width = g_rows * n_cols
        with m.Switch(phase):
            for g in range(passes - 1):
                with m.Case(g):
                    m.d.sync += [tile_elems(partial)[g * width + j].eq(v) for j, v in enumerate(group)]
        return [tile_elems(partial)[j] for j in range((passes - 1) * width)] + group

    @property
    def latency(self) -> int:
        """Cycles from an operand pair taken to its result valid: the output register and the pipeline's
        stages (``params.stages``). A folded matmul's passes are not counted (its last pass's output
        register only, as the model has it)."""
        return 1 + self.params.stages

    @classmethod
    def latency_of(cls, node, pipeline: bool = False) -> int:
        """The latency of the unit built for the Map node ``node`` (a folded matmul's aside)."""
        return 1 + (HW_FUNCTIONS[node.p("fn").name].stages(node.t("in0").dtype) if pipeline else 0)

    def _result(self, m, pipe=NO_PIPE):
        """``(res, use1, phase)``: the selected function's result tile (with ``i0``'s valid rows), whether
        it takes ``i1``, and a folded matmul's pass counter (None when not folded). ``pipe``: the stages of
        ``params.stages``: the result is that of the operands ``pipe.depth`` advances ago."""
        p = self.params
        regs = dict(self.regs.signals)
        for name in p.fns:
            for key, (reg, fn, width, init) in p.hw(name).decoded(p.in0_tile, p.out_tile).items():
                regs[key] = self.regs.decoded(m, self.cfg, reg, fn, init, width)
        i0 = self.i0
        i1 = self.i1 if p.binary else None
        out_tile = p.out_tile
        a = TileVal.of(p.in0_tile, i0.payload.payload)
        b = TileVal.of(p.in1_tile, i1.payload.payload) if i1 is not None else None
        res = Signal(TileFormat(out_tile.dtype, int(out_tile.rows), int(out_tile.cols)).token_layout(),
                     name="result")
        use1 = Signal()
        passes = p.matmul_passes
        phase = Signal(range(passes), name="matmul_phase") if passes > 1 else None
        with m.Switch(regs["fn"]):
            for k, name in enumerate(p.fns):
                hf = p.hw(name)
                with m.Case(k):
                    if name == "matmul" and passes > 1:
                        elems = self._folded_matmul(m, a, b, out_tile, regs, phase)
                    else:
                        # a function that sums or compares down the rows of a packed tile sees its missing
                        # rows as the neutral value, not as whatever the buffer left there
                        down = name in ("col_sum", "col_max") or (name == "matmul" and p.matmul_transpose_a)
                        ma, mb = (_valid_rows(a, i0, name), _valid_rows(b, i1, name)) if down else (a, b)
                        fn_pipe = pipe.sub(f"{name}_")
                        kw = {"pipe": fn_pipe} if hf.stages(p.in0_tile) else {}
                        elems = fn_pipe.finish(hf.build(m, ma, mb if hf.arity == 2 else None, out_tile, regs,
                                                        **kw), f"{name}_pad")
                    m.d.comb += [tile_elems(res)[j].eq(v) for j, v in enumerate(elems)]
                    m.d.comb += use1.eq(hf.arity == 2)
        if has_short(res):
            # the result has i0's rows (a transpose_a matmul's rows are i0's columns: all valid)
            rows_of_i0 = ~regs["transpose_a"] if "transpose_a" in regs else Const(1)
            short, = pipe.delay([token_short(i0.payload.payload)], "short")
            m.d.comb += res.short.eq(Mux(rows_of_i0, short, 0))
        return res, use1, phase

    def elaborate(self, platform):
        if self.params.stages:
            return self._elaborate_pipelined(platform)
        m = Module()
        p = self.params
        self.regs.elaborate(m, self.cfg)
        regs = self.regs.signals
        i0, o = self.i0, self.o
        i1 = self.i1 if p.binary else None
        passes = p.matmul_passes
        res, use1, phase = self._result(m)

        out_free = ~o.valid | o.ready
        other = (i1.valid | ~use1) if i1 is not None else Const(1)
        is_data = ~i0.payload.done & (i0.payload.stop == 0)
        if phase is not None:
            # a folded matmul holds its operands for ``passes`` cycles; earlier passes fill ``partial``
            folding = (regs["fn"] == p.fns.index("matmul")) & is_data & (phase != passes - 1)
            with m.If(folding & i0.valid & other):
                m.d.sync += phase.eq(phase + 1)
            out_free = out_free & ~folding
        fire = out_free & i0.valid & other
        m.d.comb += i0.ready.eq(out_free & other)
        if i1 is not None:
            m.d.comb += i1.ready.eq(out_free & i0.valid & use1)
        if phase is not None:
            with m.If(fire):
                m.d.sync += phase.eq(0)
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)
        with m.If(fire):
            m.d.sync += [o.valid.eq(1), o.payload.stop.eq(i0.payload.stop), o.payload.done.eq(i0.payload.done),
                         o.payload.payload.eq(Mux(is_data, res.as_value(), 0))]
        return m

    def _front(self, m, advance, platform=None, before_last: bool = False):
        """The pipeline in front of the output register, moving when ``advance`` is high: ``(res, valid,
        stop, done, is_data)`` of the token in its last stage (``res`` its result tile). ``platform``: what
        the unit is elaborated for (its hard multipliers, :meth:`Pipe.products`). ``before_last``: and
        ``(valid, stop, done, is_data)`` of what the last stage loads when the pipeline advances."""
        p = self.params
        i0 = self.i0
        i1 = self.i1 if p.binary else None
        pipe = Pipe(m, advance, p.stages, platform=platform)
        res, use1, _ = self._result(m, pipe)
        other = (i1.valid | ~use1) if i1 is not None else Const(1)
        take = advance & i0.valid & other
        m.d.comb += i0.ready.eq(advance & other)
        if i1 is not None:
            m.d.comb += i1.ready.eq(advance & i0.valid & use1)
        is_data = ~i0.payload.done & (i0.payload.stop == 0)
        (valid, stop, done, data), before = pipe.delay([take, i0.payload.stop, i0.payload.done, is_data], "tok",
                                                       before_last=True)
        return (res, valid, stop, done, data) + ((tuple(before),) if before_last else ())

    def _elaborate_pipelined(self, platform=None):
        """``params.stages`` stages between the inputs and the output register, all moving together when
        the output register is free (II 1; ``i*.ready`` combinational in ``o.ready``, as unpipelined)."""
        m = Module()
        self.regs.elaborate(m, self.cfg)
        o = self.o
        advance = Signal(name="advance")
        m.d.comb += advance.eq(~o.valid | o.ready)
        res, valid, stop, done, is_data = self._front(m, advance, platform)
        with m.If(advance):
            m.d.sync += [o.valid.eq(valid), o.payload.stop.eq(stop), o.payload.done.eq(done),
                         o.payload.payload.eq(Mux(is_data, res.as_value(), 0))]
        return m


# =========================================================================== Accum / Scan

@dataclass(frozen=True)
class AccumParams(StreamParams):
    """Structural parameters of :class:`Accum` and :class:`Scan`.

    ``rows × cols`` of ``dtype`` is the input element tile; the state (and
    output) tile is ``state_rows × state_cols`` of ``state_dtype`` (defaults:
    the element's size; int32 for add/max, the element type for retile_row).
    ``updates`` lists the supported update functions: ``add``/``max`` (int32
    state, the element may broadcast a side of size 1) or ``retile_row``
    (state ``[R, C]`` of ``[r, C]`` rows, ``r`` divides ``R``; not both kinds).
    ``positions`` (Accum with add/max only) is the most kept positions the
    unit holds for ``keep > 0``: a memory of that many state tiles; 0 (the
    default) builds no keep hardware. ``pipeline`` (with ``positions``; a
    fabric with ``pipeline``): the keep hardware with a two-cycle update and
    registered control, the same cycles at a shorter clock period, for
    ``keep > 0`` only (the Accum docstring's *Pipelined*).
    """

    updates: tuple = ("add",)
    state_rows: int | None = None
    state_cols: int | None = None
    state_dtype: str | None = None
    positions: int = 0
    pipeline: bool = False

    def validate(self):
        super().validate()
        _unit_dtype(self.owner, "dtype", self.dtype)
        for k in ("state_rows", "state_cols"):
            v = getattr(self, k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ParamError(f"{self.owner}: {k} must be an integer >= 1, got {v!r}")
        if self.state_dtype is not None:
            _unit_dtype(self.owner, "state_dtype", self.state_dtype)
        if not isinstance(self.updates, tuple) or not self.updates:
            raise ParamError(f"{self.owner}: updates must be a non-empty tuple, got {self.updates!r}")
        for u in self.updates:
            if u not in UPDATES:
                raise ParamError(f"{self.owner}: unsupported update function {u!r}; supported: {list(UPDATES)}")
        if self.retile and len(self.updates) > 1:
            raise ParamError(f"{self.owner}: retile_row cannot share a unit with {list(self.updates)} "
                             f"(different state types)")
        if isinstance(self.positions, bool) or not isinstance(self.positions, int) or self.positions < 0:
            raise ParamError(f"{self.owner}: positions must be an integer >= 0, got {self.positions!r}")
        if self.positions and self.retile:
            raise ParamError(f"{self.owner}: positions (keep hardware) needs add/max updates, "
                             f"not retile_row")
        if not isinstance(self.pipeline, bool):
            raise ParamError(f"{self.owner}: pipeline must be true or false, got {self.pipeline!r}")
        if self.pipeline and not self.positions:
            raise ParamError(f"{self.owner}: pipeline changes only the keep hardware; it needs positions > 0")
        st, el = self.state_tile, self.elem_tile
        if self.retile:
            if st.dtype != el.dtype or self.state_cols not in (None, self.cols):
                raise ParamError(f"{self.owner}: retile_row packs [{self.rows}, {self.cols}] {self.dtype} rows "
                                 f"into a state of the same type and width, got {st}")
            if st.rows % self.rows:
                raise ParamError(f"{self.owner}: retile_row needs state_rows ({st.rows}) to be a multiple "
                                 f"of the element rows ({self.rows})")
        else:
            if not el.dtype.is_int and st.dtype.is_int:
                raise ParamError(f"{self.owner}: float elements {el} need a float state, got {st}")
            for u in self.updates:
                f = make_fn(u)
                try:
                    f.spec.accum_type(f, st, el, 1)
                except StepTypeError as exc:
                    raise ParamError(f"{self.owner}: update {u!r} cannot run on state {st} and element {el}: "
                                     f"{exc}") from None

    @property
    def retile(self) -> bool:
        return "retile_row" in self.updates

    @property
    def elem_tile(self) -> Tile:
        return Tile(self.dtype, self.rows, self.cols)

    @property
    def state_tile(self) -> Tile:
        dt = self.state_dtype or (self.dtype if self.retile or not make_dtype(self.dtype).is_int else "int32")
        return Tile(dt, self.state_rows or self.rows, self.state_cols or self.cols)


class _Reduce(StepUnit):
    """Shared configuration of Accum and Scan."""

    def __init__(self, params: AccumParams):
        if not isinstance(params, AccumParams):
            reject(self, ParamError(f"{type(self).__name__}: params must be AccumParams, "
                                     f"got {type(params).__name__}"))
        super().__init__(params)

    def formats(self):
        p = self.params
        return {"i": (False, token_format(p.elem_tile, p.max_rank)), "o": (True, token_format(p.state_tile, p.max_rank))}

    def registers(self):
        p = self.params
        bits = self.fmt("i").stop_bits
        regs = [Reg("rank", bits, 1, doc="rank b >= 1 of the reduced chunks"),
                Reg("update", max(1, (len(p.updates) - 1).bit_length()), 0, doc="selected update function"),
                Reg("lowest", 1, 0, doc="init: 0 zeros, 1 the state type's lowest value")]
        if p.positions:
            regs.append(Reg("keep", bits, 0, doc="keep q: the innermost q dimensions are kept positions"))
        return regs

    def configure(self, op_params, in_types):
        p, owner = self.params, type(self).__name__
        upd = as_fn(owner, op_params.get("update"))
        init = as_fn(owner, op_params.get("init"))
        b = op_params.get("rank", 1)
        keep = op_params.get("keep", 0)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ParamError(f"{owner}: keep must be an integer >= 0, got {keep!r}")
        if keep and isinstance(self, Scan):
            raise ParamError(f"{owner}: keep={keep} is not supported (only Accum keeps per-position state)")
        if keep and not p.positions:
            raise ParamError(f"{owner}: keep={keep} needs position memory, but this unit has none "
                             f"(built with positions=0)")
        if p.pipeline and not keep:
            raise ParamError(f"{owner}: a pipelined unit with positions runs keep > 0 only (a fabric builds "
                             f"positions for a node with keep), got keep=0")
        if upd.name not in p.updates:
            raise ParamError(f"{owner}: update {upd.name!r} is not built into this unit (it has {list(p.updates)})")
        if init.name not in ("zeros", "lowest"):
            raise ParamError(f"{owner}: init {init.name!r} is not supported (zeros, lowest)")
        st = _check_input(owner, "in", in_types, p.elem_tile, p.max_rank)
        if not isinstance(b, int) or not 1 <= b <= st.rank:
            raise ParamError(f"{owner}: rank must be in 1..{st.rank} (the input rank), got {b!r}")
        if keep:
            if b + keep > st.rank:
                raise ParamError(f"{owner}: rank + keep must be <= the input rank {st.rank}, "
                                 f"got rank={b}, keep={keep}")
            need = 1
            for d in st.shape[len(st.shape) - keep:]:
                need = need * as_dim(d)
            if as_dim(need).is_Integer and int(need) > p.positions:
                raise ParamError(f"{owner}: keep={keep} needs {int(need)} positions (the input's innermost "
                                 f"dimensions {list(st.shape[len(st.shape) - keep:])}), the unit is built "
                                 f"with positions={p.positions}")
        state = p.state_tile
        if make_dtype(init.param("dtype")) != state.dtype:
            raise ParamError(f"{owner}: init {init} has type {init.param('dtype')}, the state is {state}")
        rows, cols = init.param("rows"), init.param("cols")
        if p.retile:
            if dims_equal(rows, 0) is not True:
                raise ParamError(f"{owner}: retile_row needs an init with 0 rows, got {init}")
            count = 1
            for d in st.shape[-b:]:
                count = count * d
            if dims_equal(count * p.rows, state.rows) is False:
                raise ParamError(f"{owner}: retile_row of {count} x {p.rows} rows does not fill the "
                                 f"{state.rows}-row state tile")
        else:
            for d, want in ((rows, state.rows), (cols, state.cols)):
                if dims_equal(d, want) is False:
                    raise ParamError(f"{owner}: init {init} does not match the state tile {state}")
        values = dict(rank=b, update=p.updates.index(upd.name), lowest=int(init.name == "lowest"))
        if p.positions:
            values["keep"] = keep
        return self.config_image(**values)

    # ---- shared hardware
    def _state_logic(self, m, stored=None, fresh=None, elem=None):
        """(state, fresh, current, next_on_data, row counter or None, init tile).

        By default the state is a register (``state``) and ``fresh`` a new flag; with
        ``stored`` (a value, e.g. a memory's read data) and ``fresh`` given, the current
        state is ``init`` when ``fresh`` is set, else ``stored`` (``state`` is then ``stored``).
        ``elem``: the element tile the update takes (default: the input's payload).
        """
        p = self.params
        regs = self.regs.signals
        st_tile, el_tile = p.state_tile, p.elem_tile
        lay = self.o.payload.payload.shape()
        if stored is None:
            state = Signal(lay, name="state")
            fresh = Signal(init=1)  # the state holds nothing yet: its value is the init tile
        else:
            state = lay(stored)
        n_el = int(st_tile.rows) * int(st_tile.cols)
        # the lowest value: the type's minimum, or -Inf's bit pattern for a float state
        low = st_tile.dtype.min if st_tile.dtype.is_int else floats.fmt_of(st_tile.dtype).neg_inf
        init_tile = Signal(lay, name="init_tile")           # (a full tile: its short is 0)
        m.d.comb += [tile_elems(init_tile)[k].eq(Mux(regs["lowest"], low, 0)) for k in range(n_el)]
        cur = Signal(lay, name="current")
        m.d.comb += cur.eq(Mux(fresh, init_tile.as_value(), state.as_value()))
        nxt = Signal(lay, name="next_state")
        if elem is None:
            elem = self.i.payload.payload
        x = TileVal.of(el_tile, elem)
        cnt = None
        if p.retile:
            blocks = int(st_tile.rows) // p.rows
            cnt = Signal(range(blocks + 1), name="row_block")
            base = Signal(lay, name="base")
            m.d.comb += base.eq(Mux(fresh, 0, state.as_value()))
            m.d.comb += nxt.eq(base.as_value())
            width = p.rows * p.cols
            with m.Switch(cnt):
                for j in range(blocks):
                    with m.Case(j):
                        m.d.comb += [tile_elems(nxt)[j * width + k].eq(x.elems[k]) for k in range(width)]
                        if has_short(nxt):     # the rows below block j are missing until written
                            m.d.comb += nxt.short.eq(int(st_tile.rows) - (j + 1) * p.rows)
        else:
            s = TileVal.of(st_tile, cur)
            with m.Switch(regs["update"]):
                for k, u in enumerate(p.updates):
                    with m.Case(k):
                        m.d.comb += [tile_elems(nxt)[j].eq(v) for j, v in enumerate(update_elems(m, u, s, x))]
            if has_short(nxt):          # a chunk's elements share their valid rows; the state takes them
                m.d.comb += nxt.short.eq(token_short(elem))
        return state, fresh, cur, nxt, cnt, init_tile


class _KeepState:
    """The signals the pieces of a kept-position Accum share (:meth:`Accum._elaborate_keep`), and the
    output register's load (:meth:`put`); no other logic.

    Plain attributes, not a component: the pieces drive and read these in both directions (the input side
    and the emitter both drive the position counters' next values and the output register), so a component
    per piece would have most of them as ports, and a Verilog module each (also in every fabric).

    Parameters
    ----------
    unit : Accum
        The unit (built with ``positions > 0``), its registers already elaborated.

    Attributes
    ----------
    i, o, b, keep : Value
        The unit's ports and its ``rank`` and ``keep`` registers.
    pipeline : bool
        The unit's ``params.pipeline``.
    width, sb : int
        Bits of a state word and of a stop level.
    acc : Signal
        ``acc_bank``: the bank being accumulated; the other one is emitted.
    idx, idx_next, npos : Signal
        The accumulating side: its ``position``, its next value (the read address), and the positions of
        the block's first chunk (``positions_used``).
    first : Signal
        keep > 0: in the block's first chunk; keep = 0: no data yet.
    pend : Signal
        keep = 0: ``S_(k-b)`` after the state (``pending_stop``).
    emitting, eidx, eidx_next, enpos, after, fstop : Signal
        The emitter: busy, ``emit_index`` and its next value (the emitting bank's read address), its
        block's positions (``emit_positions``), emitting the stop recorded after ``eidx``
        (``emit_inner_stop``), and its block's closing stop, lowered by ``b`` (``block_stop``).
    enpos_new : Signal
        The count a hand-over gives the emitter (``emit_positions_new``).
    emit_inc, handoff : Signal
        This cycle the emitter moves to its next position (``emit_advance``); the input side hands its
        bank to the emitter (``emit_handoff``).
    stored, e_data, e_stop : Signal
        Read data: the accumulating bank's state, the emitting bank's state and inner stop.
    wen, wdata : Signal
        The accumulating side's state write: the update of the token taken, at its position.
    wstop, tw_en, tw_addr : Signal
        The inner-stop write (in the accumulating bank).
    k, done, is_data, room, out_free : Value
        The input token's stop and done, whether it is data, whether a position is left, and whether the
        output register takes a token this cycle.
    """

    def __init__(self, unit):
        p = unit.params
        n_pos = p.positions
        self.pipeline = p.pipeline
        self.b, self.keep = unit.regs["rank"], unit.regs["keep"]
        self.i, self.o = i, o = unit.i, unit.o
        self.sb = sb = unit.fmt("o").stop_bits
        self.width = width = len(o.payload.payload.as_value())
        self.acc = Signal(name="acc_bank")
        # accumulating side
        self.idx = Signal(range(n_pos + 1), name="position")
        self.idx_next = Signal.like(self.idx, name="position_next")
        self.npos = Signal(range(n_pos + 1), name="positions_used")
        self.first = Signal(init=1, name="first")
        self.pend = Signal(sb, name="pending_stop")
        # emitting side
        self.emitting = Signal(name="emitting")
        self.eidx = Signal(range(n_pos + 1), name="emit_index")
        self.eidx_next = Signal.like(self.eidx, name="emit_index_next")
        self.enpos = Signal.like(self.npos, name="emit_positions")
        self.after = Signal(name="emit_inner_stop")
        self.fstop = Signal(sb, name="block_stop")
        self.enpos_new = Signal.like(self.enpos, name="emit_positions_new")
        self.emit_inc, self.handoff = Signal(name="emit_advance"), Signal(name="emit_handoff")
        # the memories' data and write requests keep the names Amaranth gives a signal it cannot name (a
        # name of ours would rename their wires in the Verilog); the emitter's stop has its own
        self.e_data, self.e_stop = Signal(width, name="$signal"), Signal(sb, name="e_stop")
        self.stored, self.wdata, self.wstop = (Signal(width, name="$signal"), Signal(width, name="$signal"),
                                               Signal(sb, name="$signal"))
        self.wen, self.tw_en = Signal(name="$signal"), Signal(name="$signal")
        self.tw_addr = Signal.like(self.idx, name="$like")
        self.k, self.done = k, done = i.payload.stop, i.payload.done
        self.is_data = ~done & (k == 0)
        self.room = self.idx < n_pos
        self.out_free = ~o.valid | o.ready

    def put(self, m, payload, stop_level, is_done=0):
        """Load the output register with a token (the plain build's tile ``payload``; the pipelined build
        loads its tile whenever the register is free, :meth:`Accum._keep_output`). Latency 1."""
        o = self.o
        m.d.sync += [o.valid.eq(1), o.payload.stop.eq(stop_level), o.payload.done.eq(is_done)]
        if not self.pipeline:
            m.d.sync += o.payload.payload.eq(payload)


class _KeepBanks:
    """The two banks of a kept-position Accum: per bank a memory of ``P`` state words and one of ``P`` inner
    stop levels, each with one write port and a synchronous read port transparent for it
    (``amaranth.lib.memory``, so block or LUT RAM fits).

    Not a component: the memories are the unit's submodules ``states0``, ``inner_stops0``, ``states1``,
    ``inner_stops1`` as before, and both sides' addresses and data pass through; ports between a component
    and the unit would only rename them (and add a Verilog module).

    Parameters
    ----------
    m : Module
        The unit's module (the memories become its submodules).
    width, sb : int
        Bits of a state word and of a stop level.
    n_pos : int
        Words per memory (``params.positions``).

    Attributes
    ----------
    s_wr, s_rd, t_wr, t_rd : list of memory ports
        Per bank: the state memory's write and read port, the stop memory's write and read port.
    """

    def __init__(self, m, width: int, sb: int, n_pos: int):
        self.s_wr, self.s_rd, self.t_wr, self.t_rd = s_wr, s_rd, t_wr, t_rd = [], [], [], []
        for k in range(2):
            smem = memory.Memory(shape=unsigned(width), depth=n_pos, init=[])
            tmem = memory.Memory(shape=unsigned(sb), depth=n_pos, init=[])
            m.submodules[f"states{k}"], m.submodules[f"inner_stops{k}"] = smem, tmem
            s_wr.append(smem.write_port())
            s_rd.append(smem.read_port(transparent_for=(s_wr[k],)))
            t_wr.append(tmem.write_port())
            t_rd.append(tmem.read_port(transparent_for=(t_wr[k],)))

    def connect(self, m, s: _KeepState, acc_next):
        """Both banks' read addresses, write data and stop writes, and each side's read data.

        The bank ``acc_bank`` names is read at ``acc_next`` (the accumulating side's next position), the
        other at ``emit_index_next``, so a side's read data is the word at its index in the cycle the index
        gets there (latency 1: the read port's register is on the address). ``stored`` is the accumulating
        bank's state, ``e_data`` / ``e_stop`` the emitting bank's state and inner stop. The state writes'
        data and the stop writes go to the accumulating bank; the stop write's address defaults to
        ``position`` (the input side moves an inner stop's back by one). Combinational: the addresses from
        ``acc_bank`` and the sides' next positions, the read data from the ports.
        """
        s_wr, s_rd, t_wr, t_rd = self.s_wr, self.s_rd, self.t_wr, self.t_rd
        m.d.comb += s.tw_addr.eq(s.idx)
        for j in range(2):
            mine = s.acc == j
            m.d.comb += [s_rd[j].addr.eq(Mux(mine, acc_next, s.eidx_next)), s_wr[j].data.eq(s.wdata),
                         t_rd[j].addr.eq(Mux(mine, acc_next, s.eidx_next)),
                         t_wr[j].addr.eq(s.tw_addr), t_wr[j].data.eq(s.wstop), t_wr[j].en.eq(s.tw_en & mine)]
        m.d.comb += [s.stored.eq(Mux(s.acc, s_rd[1].data, s_rd[0].data)),
                     s.e_data.eq(Mux(s.acc, s_rd[0].data, s_rd[1].data)),
                     s.e_stop.eq(Mux(s.acc, t_rd[0].data, t_rd[1].data))]

    def write_states(self, m, addr, en, bank):
        """The state write: word ``addr`` of bank ``bank`` in a cycle with ``en`` (its data is ``wdata``,
        :meth:`connect`). Combinational."""
        for j in range(2):
            m.d.comb += [self.s_wr[j].addr.eq(addr), self.s_wr[j].en.eq(en & (bank == j))]


class Accum(_Reduce):
    """STeP Accum: reduce each rank-``b`` chunk of ``i`` to one state tile on ``o``.

    Updates (register ``update``): ``add``/``max`` in int32 (wrapping add), or
    ``retile_row``, which writes the ``[r, C]`` element at row ``r·count`` of a
    ``[R, C]`` state (rows never written stay zero; writes beyond ``R`` are
    dropped). Init (register ``lowest``): zeros or the lowest value (the lowest int32; -Inf for a float state).
    A data token updates the state; ``S_k`` with ``k < b`` is dropped; at
    ``S_k`` with ``k >= b`` the state is emitted, then ``S_(k-b)`` if ``k > b``
    (a data token or a dropped stop is taken while that second output leaves;
    a close or done waits for it); done passes.

    Latency 1 (registered output), II 1 (a stop ``S_k``, ``k > b``, followed at
    once by another close or done costs one cycle more).
    Combinational: ``i.ready`` from ``o.ready`` (and the input's stop level);
    data and valid are registered. One adder/comparator per state element.

    **Kept positions** (``params.positions = P > 0``, register ``keep = q``):
    the innermost ``q`` dimensions are positions, each with its own state in
    a memory of ``P`` state tiles (``amaranth.lib.memory``: one write port, one
    synchronous read port transparent to it, so block RAM fits; read address
    = the next position). There are two such banks: one accumulates a block
    while the other streams the previous block out. A position counter
    advances per data element and restarts at a stop ``S_k``, ``k >= q`` (a
    chunk end). In the first chunk of a reduced block each element's state is
    ``init ⊕ x`` (the memory is not read), in later chunks ``state[p] ⊕ x``;
    the first chunk also records the inner stop (``1 <= k < q``) that follows
    each position, in a memory of ``P`` stop levels per bank. At the block end
    (``S_k``, ``k >= q + b``) the bank goes to the emitter, which streams every
    position's state with its recorded inner stops, then ``S_(k-b)`` (the
    block's ``S_q`` merges into it), and the next block accumulates in the
    other bank; done passes once the emitter is idle. This is the
    interpreter's token sequence exactly when no element of a kept dimension
    is empty (always so for static kept dimensions): one inner stop is
    recorded per position, so a stop before the first position or a second
    stop in a row (an empty row of a ragged kept dimension) is lost. A chunk
    with more than ``P`` positions, or later chunks with a different count,
    are program errors that the hardware does not detect (:meth:`configure`
    rejects static counts above ``P``).
    With ``keep = 0`` such a unit is a plain Accum whose state is word 0 of
    the first bank.

    Keep mode: II 1 for every input token, block ends included (data and
    stops below the block end produce no output, so ``i.ready`` does not wait
    for ``o.ready``; an update reads the word its position's previous update
    wrote at least a chunk-end stop earlier; with ``keep = 0`` word 0 is
    updated on consecutive cycles and the read port's transparency forwards
    the write). A block's ``n`` states and ``s`` recorded inner stops and its
    closing stop (``n + s + 1`` tokens, one per cycle with ``o.ready`` high)
    leave while the next block comes in; the next block end waits only if
    that emission is not over by its cycle, and done waits for it. Latency 2:
    the block's first state is on ``o`` two cycles after its block end is
    taken (``keep = 0``: latency 1).
    Combinational: ``i.ready`` from ``o.ready`` (for a block end while the
    emitter sends its last token, and for done) and the emission state; the
    memories' read addresses from ``i.valid``, ``i``'s stop/done and
    ``o.ready``; the update from the memory's read data; data and valid on
    ``o`` are registered.
    Resources: two banks of ``P`` state words (state tile width) and ``P`` stop
    levels of memory, one adder/comparator per state element (shared by all
    positions).

    **Pipelined** (``params.pipeline``, a fabric with ``pipeline``; keep > 0
    only, :meth:`configure` rejects keep = 0): the same tokens in the same
    cycles, with shorter paths. An update takes two cycles: the cycle a data
    token is taken registers its position's state word and the token, the next
    adds them and writes the sum back (a position's next update comes a chunk
    end later, when the read port, transparent for the write of the cycle
    before, has it). The emitter's end flag is a register beside a count of
    the positions left, its inner-stop flags are flip-flops (copied at the
    hand-over, shifted as it moves on), ``keep + rank`` is a register decoded
    from the writes of either, the accumulating side's read address is formed
    without ``i.ready`` (a token not taken, a block end or done, uses no word),
    and the output tile is chosen by registers and loaded whenever the output
    register is free. (In both builds a data token's and an inner stop's writes
    follow ``i.valid``: such a token is always taken.) Combinational:
    ``i.ready`` from ``o.ready`` (for a block end while the emitter sends its
    last token, and for done); the emitter's read address from ``o.ready``. Resources: the state and element tiles'
    registers (two tiles of flip-flops) and ``P`` flags twice more.
    """

    kind = "Accum"
    latency = 1

    def elaborate(self, platform):
        if self.params.positions:
            return self._elaborate_keep()
        m = Module()
        self.regs.elaborate(m, self.cfg)
        b = self.regs["rank"]
        i, o = self.i, self.o
        state, fresh, cur, nxt, cnt, _ = self._state_logic(m)
        k = i.payload.stop
        is_data = ~i.payload.done & (k == 0)
        drop = ~i.payload.done & (k != 0) & (k < b)
        close = ~i.payload.done & (k != 0) & (k >= b)
        pend = Signal(len(k), name="pending_stop")
        out_free = ~o.valid | o.ready

        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)
        # data and dropped stops produce no output: taken every cycle, also while a stop is pending
        with m.If(i.valid & is_data):
            m.d.sync += [state.eq(nxt), fresh.eq(0)]
            if cnt is not None:
                blocks = int(self.params.state_tile.rows) // self.params.rows
                with m.If(cnt < blocks):
                    m.d.sync += cnt.eq(cnt + 1)
        with m.If(pend != 0):
            m.d.comb += i.ready.eq(is_data | drop)
            with m.If(out_free):
                m.d.sync += [o.valid.eq(1), o.payload.payload.eq(0), o.payload.stop.eq(pend),
                             o.payload.done.eq(0), pend.eq(0)]
        with m.Else():
            m.d.comb += i.ready.eq(is_data | drop | out_free)
            with m.If(i.valid & out_free & (close | i.payload.done)):
                m.d.sync += [o.valid.eq(1), o.payload.done.eq(i.payload.done), o.payload.stop.eq(0),
                             o.payload.payload.eq(Mux(i.payload.done, 0, cur.as_value())), fresh.eq(1)]
                if cnt is not None:
                    m.d.sync += cnt.eq(0)
                with m.If(close & (k > b)):
                    m.d.sync += pend.eq(k - b)
        return m

    def _elaborate_keep(self):
        """The unit with position memory (``params.positions > 0``), for any ``keep``.

        Two banks of state (and recorded inner stop) memory: one accumulates a block while the other
        streams the previous block's states out, so a block end costs one input cycle, not the emission.
        The pieces, in the order they add their logic (the class docstring's *Kept positions* and
        *Pipelined* describe the whole): the shared signals (:class:`_KeepState`), the two banks
        (:class:`_KeepBanks`), the sides' position counters, the emitter's end flag, the banks' addresses,
        the emitter's inner-stop flag, the accumulating side's update, the output register, the emitter and
        the input side. Each piece (a method ``_keep_*``) takes the module ``m`` and the shared signals
        ``s``; what one piece makes for another is returned and passed on here. (Helpers, not components:
        see :class:`_KeepState`.)
        """
        m = Module()
        self.regs.elaborate(m, self.cfg)
        s = _KeepState(self)
        banks = _KeepBanks(m, s.width, s.sb, self.params.positions)
        self._keep_counters(m, s)
        at_end = self._keep_end_flag(m, s)
        # for tests: while emitting, ``at_end`` equals the comparison in every cycle
        self.at_end_check = (at_end & s.emitting, (s.eidx >= s.enpos) & s.emitting)
        banks.connect(m, s, self._keep_read_address(s))
        e_inner = self._keep_inner_flag(m, s)
        cur = self._keep_update(m, s, banks)
        keep_b = self._keep_output(m, s, at_end)
        last = self._keep_emitter(m, s, at_end, e_inner)
        self._keep_input(m, s, keep_b, last, cur)
        return m

    def _keep_counters(self, m, s):
        """Both sides' position counters: each index holds unless a piece drives its next value.

        ``position_next`` / ``emit_index_next`` default to the index (the input side and the emitter drive
        them otherwise) and the index takes its next value at the clock edge; each bank's read port is
        addressed with the next value, so its data is the state at ``position`` / ``emit_index`` in the
        cycle the index gets there. Also ``emit_positions_new``, the count a hand-over gives the emitter:
        the position counter itself when the block had one chunk, else the first chunk's count.

        Latency: the indices 1 cycle after their next values. Combinational: the next values' defaults,
        ``emit_positions_new`` from registers.
        """
        m.d.comb += [s.idx_next.eq(s.idx), s.eidx_next.eq(s.eidx)]
        m.d.sync += [s.idx.eq(s.idx_next), s.eidx.eq(s.eidx_next)]
        m.d.comb += s.enpos_new.eq(Mux(s.first, s.idx, s.npos))

    def _keep_end_flag(self, m, s):
        """Whether the emitter is past its block's last position (it sends the closing stop next).

        Plain build: the comparison ``emit_index >= emit_positions``. With ``pipeline``: a register
        (``emit_at_end``) with the positions left to emit (``emit_remaining``, ``emit_positions -
        emit_index`` while emitting) counted down beside it, so that its next value is chosen among flags
        of registers (no comparison after the emitter's read).

        Returns
        -------
        Value
            The flag. Latency 0 (plain: combinational from the two registers) or a register loaded at the
            hand-over and at each ``emit_advance``.
        """
        if not self.params.pipeline:
            return s.eidx >= s.enpos
        at_end = Signal(init=1, name="emit_at_end")
        rem = Signal.like(s.enpos, name="emit_remaining")
        with m.If(s.handoff):
            m.d.sync += [rem.eq(s.enpos_new), at_end.eq(s.enpos_new == 0)]
        with m.Elif(s.emit_inc):
            m.d.sync += [rem.eq(rem - 1), at_end.eq(rem == 1)]
        return at_end

    def _keep_read_address(self, s):
        """The accumulating side's read address: the position of the next token.

        Plain build: ``position_next``, which the input side forms from the handshake. With ``pipeline``:
        the position the next token has if the one at the input is taken (every token but a block end or
        done is), so the read's address does not wait for ``i.ready``, which depends on the output and the
        emitter; a token not taken is a block end or done, which does not use the word it reads.

        Returns
        -------
        Value
            Combinational (pipelined: from ``i.valid``, the input's stop and done, ``position`` and the
            ``keep`` register).
        """
        if not self.params.pipeline:
            return s.idx_next
        return Mux(s.i.valid & s.is_data & s.room, s.idx + 1,
                   Mux(s.i.valid & (s.done | ((s.k != 0) & (s.k >= s.keep))), 0, s.idx))

    def _keep_inner_flag(self, m, s):
        """Whether a recorded inner stop follows the emitter's position.

        Plain build: the emitting bank's stop memory read (non-zero). With ``pipeline``: also kept in
        flip-flops, written as the stop memory is (``inner_stop_flags``), copied for the emitter at the
        hand-over and shifted as it moves on (``emit_inner_flags``), so that the emitter's next index
        depends on a flip-flop, not on a read.

        Returns
        -------
        Value
            Plain: combinational from the stop memory's read data (its address is registered in the read
            port). Pipelined: a flip-flop, ``P`` flags twice.
        """
        if not self.params.pipeline:
            return s.e_stop != 0
        n_pos = self.params.positions
        aflags = Signal(n_pos, name="inner_stop_flags")
        eflags = Signal(n_pos, name="emit_inner_flags")
        with m.If(s.tw_en):
            m.d.sync += aflags.bit_select(s.tw_addr, 1).eq(s.wstop != 0)
        with m.If(s.handoff):
            m.d.sync += eflags.eq(aflags)
        with m.Elif(s.emit_inc):
            m.d.sync += eflags.eq(eflags >> 1)
        return eflags[0]

    def _keep_update(self, m, s, banks):
        """The accumulating side's update: the next state of the position written back to its bank.

        Plain build: the update of the read port's data (``init`` in the block's first chunk, and with
        ``keep = 0`` until the first data token) is written at ``position`` in the cycle the token is
        taken (``wen``). With ``pipeline``, in two cycles: the cycle a data token is taken registers the
        read port's data at its position (``update_state``; init in a block's first chunk) and the token;
        the next cycle adds them and writes the sum back (``update_*``). The next update of a position
        comes a chunk end after it at the earliest, when the read port, transparent for the write of the
        cycle before, sees the sum: the same tokens in the same cycles. (The read port's own register is on
        its address in a LUT RAM: the memory's read starts the update's path, so the data is registered
        again.)

        Parameters
        ----------
        banks : _KeepBanks
            Where the state is written (:meth:`_KeepBanks.write_states`).

        Returns
        -------
        Value or None
            Plain build: the current state (init or the read data), which the ``keep = 0`` path emits;
            pipelined: None (keep > 0 only). Combinational: plain, the update from the read data; pipelined,
            from the ``update_*`` registers.
        """
        if not self.params.pipeline:
            banks.write_states(m, s.idx, s.wen, s.acc)
            _, _, cur, nxt, _, _ = self._state_logic(m, stored=s.stored, fresh=s.first)
            m.d.comb += s.wdata.eq(nxt.as_value())
            return cur
        upd, upd_bank = Signal(name="update_valid"), Signal(name="update_bank")
        upd_addr = Signal.like(s.idx, name="update_position")
        x_r = Signal.like(s.i.payload.payload, name="update_elem")
        upd_state = Signal(s.width, name="update_state")
        _, _, _, nxt, _, init = self._state_logic(m, stored=upd_state, fresh=Const(0), elem=x_r)
        m.d.sync += [upd.eq(s.wen), upd_bank.eq(s.acc), upd_addr.eq(s.idx), x_r.eq(s.i.payload.payload),
                     upd_state.eq(Mux(s.first, init.as_value(), s.stored))]
        banks.write_states(m, upd_addr, upd, upd_bank)
        m.d.comb += s.wdata.eq(nxt.as_value())
        return None

    def _keep_output(self, m, s, at_end):
        """The output register's shared logic, and the level of a block end.

        ``o.valid`` drops when ``o`` takes a token (a put of the emitter or the input side sets it again).
        With ``pipeline`` the output tile is the emitter's state or 0 (every stop and done), chosen by
        registers and loaded whenever the output register is free (its tile only matters once a put makes
        it valid), instead of the puts' chain of assignments enabled by their whole condition; and ``keep +
        rank``, the lowest stop that ends a block, is a register decoded from the writes of either (not an
        adder in ``i.ready``).

        Parameters
        ----------
        at_end : Value
            The emitter's end flag (:meth:`_keep_end_flag`).

        Returns
        -------
        Value
            ``keep + rank``: plain build, an adder of the two registers; pipelined, a register
            (``cfg_keep_rank_add``).
        """
        if not self.params.pipeline:
            keep_b = s.keep + s.b
        else:
            with m.If(s.out_free):
                m.d.sync += s.o.payload.payload.eq(Mux(s.emitting & ~at_end & ~s.after, s.e_data, 0))
            reset = sum(r.init for r in self.regs.regs if r.name in ("keep", "rank"))
            keep_b = self.regs.decoded(m, self.cfg, ("keep", "rank"), operator.add, reset, len(s.keep) + 1)
        with m.If(s.o.ready):
            m.d.sync += s.o.valid.eq(0)
        return keep_b

    def _keep_emitter(self, m, s, at_end, e_inner):
        """The emitter: one output token per free output cycle, from the bank not being accumulated.

        Per position its state, then the inner stop recorded after it (if any), then after the last
        position the block's closing stop ``S_(k-b)``; then it is idle (``emitting`` low) until the next
        hand-over. Each move to the next position drives ``emit_index_next`` (the emitting bank's read
        address, so the next state is on the read port in the next cycle) and ``emit_advance``.

        Parameters
        ----------
        at_end, e_inner : Value
            The end flag (:meth:`_keep_end_flag`) and the inner-stop flag (:meth:`_keep_inner_flag`).

        Returns
        -------
        Signal
            ``emit_last``: the emitter sends its block's closing stop this cycle (the input side may hand
            over the next bank in the same cycle). Latency: a token 1 cycle after its read address (the read
            port's register), into the output register. Combinational: ``emit_last`` and the next index from
            ``o.ready`` and the emitter's registers (plain build: also the stop memory's read data).
        """
        last = Signal(name="emit_last")
        m.d.comb += last.eq(s.emitting & s.out_free & at_end)
        with m.If(s.emitting & s.out_free):
            with m.If(at_end):
                s.put(m, 0, s.fstop)
                m.d.sync += s.emitting.eq(0)
                m.d.comb += s.eidx_next.eq(0)
            with m.Elif(s.after):
                s.put(m, 0, s.e_stop)
                m.d.sync += s.after.eq(0)
                m.d.comb += [s.eidx_next.eq(s.eidx + 1), s.emit_inc.eq(1)]
            with m.Else():
                s.put(m, s.e_data, 0)
                with m.If(e_inner):
                    m.d.sync += s.after.eq(1)
                with m.Else():
                    m.d.comb += [s.eidx_next.eq(s.eidx + 1), s.emit_inc.eq(1)]
        return last

    def _keep_input(self, m, s, keep_b, last, cur):
        """The input side: with ``keep > 0`` :meth:`_keep_kept_input`; with ``keep = 0`` (plain build only)
        :meth:`_keep_plain_input` once the stop ``S_(k-b)`` pending after an emitted state has left (no
        input token is taken while it is pending).

        A pipelined unit runs ``keep > 0`` only (:meth:`configure` rejects ``keep = 0``: a fabric builds
        positions for a node with keep), so its input side is the kept one without a choice.

        Parameters
        ----------
        keep_b, last : Value
            ``keep + rank`` (:meth:`_keep_output`) and ``emit_last`` (:meth:`_keep_emitter`).
        cur : Value or None
            The plain build's current state (:meth:`_keep_update`).
        """
        if self.params.pipeline:
            self._keep_kept_input(m, s, keep_b, last)
            return
        with m.If(s.pend != 0):                   # keep = 0 only: the stop after an emitted state
            with m.If(s.out_free):
                s.put(m, 0, s.pend)
                m.d.sync += s.pend.eq(0)
        with m.Elif(s.keep != 0):
            self._keep_kept_input(m, s, keep_b, last)
        with m.Else():
            self._keep_plain_input(m, s, cur)

    def _keep_kept_input(self, m, s, keep_b, last):
        """The input handshake and the accumulating side's control for ``keep > 0``.

        A data token writes its position's update (``wen``, while a position is left) and moves the
        position on; in the block's first chunk its inner-stop word is cleared, and an inner stop (``S_k``,
        ``1 <= k < keep``) is recorded after the last position written. A chunk end (``S_k``, ``k >= keep``)
        restarts the position (the first chunk's count is kept); a block end (``k >= keep + b``) also hands
        the bank to the emitter (its index is back at 0) and accumulating goes on in the other bank. Done
        is output once the emitter is idle.

        A data token or an inner stop is taken whenever it is there (``i.ready`` is 1 for it): its writes
        follow ``i.valid`` and the token, not the handshake, which depends on the output and the emitter.
        Combinational: ``i.ready`` from ``o.ready`` (done; a block end while the emitter sends its last
        token) and the emitter's registers; the writes from ``i.valid`` and the token. Latency 0 (the
        writes); a block end's first state is on ``o`` 2 cycles after it is taken.

        Parameters
        ----------
        keep_b, last : Value
            ``keep + rank`` and ``emit_last``, as for :meth:`_keep_input`.
        """
        i, k, done = s.i, s.k, s.done
        block_end = ~done & (k != 0) & (k >= keep_b)
        # done needs the output; a block end needs the other bank free (its emission over by this cycle)
        m.d.comb += i.ready.eq(Mux(done, ~s.emitting & s.out_free, ~block_end | ~s.emitting | last))
        with m.If(i.valid & done):
            with m.If(i.ready):
                s.put(m, 0, 0, 1)
                m.d.sync += s.first.eq(1)
                m.d.comb += s.idx_next.eq(0)
        with m.Elif(i.valid & s.is_data):
            m.d.comb += [s.wen.eq(s.room), s.wstop.eq(0), s.tw_en.eq(s.room & s.first)]
            with m.If(s.room):
                m.d.comb += s.idx_next.eq(s.idx + 1)
        with m.Elif(i.valid & (k < s.keep)):      # an inner stop: recorded after the last position
            with m.If(s.first & (s.idx != 0)):
                m.d.comb += [s.tw_addr.eq(s.idx - 1), s.wstop.eq(k), s.tw_en.eq(1)]
        with m.Elif(i.valid & i.ready):           # a chunk end
            m.d.sync += s.first.eq(0)
            m.d.comb += s.idx_next.eq(0)
            with m.If(s.first):
                m.d.sync += s.npos.eq(s.idx)
            with m.If(block_end):             # hand the bank to the emitter (its index is back at 0)
                m.d.sync += [s.emitting.eq(1), s.enpos.eq(s.enpos_new), s.fstop.eq(k - s.b), s.after.eq(0),
                             s.acc.eq(~s.acc), s.first.eq(1)]
                m.d.comb += s.handoff.eq(1)

    def _keep_plain_input(self, m, s, cur):
        """``keep = 0`` (plain build): a plain Accum (:meth:`elaborate` without positions) with its state in
        word 0 of the first bank.

        Data and dropped stops (``S_k``, ``k < b``) are taken every cycle (a data token writes word 0); a
        close (``k >= b``) or done waits for the output register and emits the state (0 for done), then
        ``S_(k-b)`` if ``k > b`` (``pending_stop``). Latency 1; combinational: ``i.ready`` from ``o.ready``
        and the input's stop level.

        Parameters
        ----------
        cur : Value
            The current state (:meth:`_keep_update`).
        """
        i, k, done, b = s.i, s.k, s.done, s.b
        drop = ~done & (k != 0) & (k < b)
        close = ~done & (k != 0) & (k >= b)
        m.d.comb += [i.ready.eq(s.is_data | drop | s.out_free), s.idx_next.eq(0)]
        with m.If(i.valid & s.is_data):
            m.d.comb += s.wen.eq(1)
            m.d.sync += s.first.eq(0)
        with m.If(i.valid & s.out_free & (close | done)):
            s.put(m, Mux(done, 0, cur.as_value()), 0, done)
            m.d.sync += s.first.eq(1)
            with m.If(close & (k > b)):
                m.d.sync += s.pend.eq(k - b)


class Scan(_Reduce):
    """STeP Scan: emit the running state after every element of ``i``; stops pass through.

    Updates ``add``/``max`` (int32; ``retile_row`` is not supported: its state
    grows). The state restarts from init (zeros or lowest) after a stop
    ``S_k`` with ``k >= b`` (register ``rank``).

    Latency 1 (registered output), II 1. Combinational: ``i.ready`` from
    ``o.ready``; data and valid are registered. One adder/comparator per
    state element.
    """

    kind = "Scan"
    latency = 1

    def __init__(self, params: AccumParams):
        if isinstance(params, AccumParams) and params.retile:
            reject(self, ParamError("Scan: retile_row is not supported (the state tile grows per element)"))
        if isinstance(params, AccumParams) and params.positions:
            reject(self, ParamError(f"Scan: positions={params.positions} is not supported "
                                     f"(only Accum keeps per-position state)"))
        super().__init__(params)

    def elaborate(self, platform):
        m = Module()
        self.regs.elaborate(m, self.cfg)
        b = self.regs["rank"]
        i, o = self.i, self.o
        state, fresh, cur, nxt, _, _ = self._state_logic(m)
        k = i.payload.stop
        is_data = ~i.payload.done & (k == 0)
        out_free = ~o.valid | o.ready
        m.d.comb += i.ready.eq(out_free)
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)
        with m.If(i.valid & out_free):
            m.d.sync += [o.valid.eq(1), o.payload.stop.eq(k), o.payload.done.eq(i.payload.done),
                         o.payload.payload.eq(Mux(is_data, nxt.as_value(), 0))]
            with m.If(is_data):
                m.d.sync += [state.eq(nxt), fresh.eq(0)]
            with m.Elif(i.payload.done | (k >= b)):
                m.d.sync += fresh.eq(1)
        return m


# =========================================================================== FlatMap

FLATMAP_FNS = ("retile_streamify", "range")


@dataclass(frozen=True)
class FlatMapParams(StreamParams):
    """Structural parameters of :class:`FlatMap`: the input tile and the function.

    ``retile_streamify``: ``[R, C]`` tiles of any integer type -> ``[1, C]`` rows.
    ``range``: int32 ``[1, 2]`` (start, count) tiles, or ``[1, 1]`` starts with a
    static count (register) -> ``[1, 1]`` int32 indices. ``max_rank`` bounds
    the output stops (input rank + 1).
    """

    fn: str = "retile_streamify"

    def validate(self):
        super().validate()
        _unit_dtype(self.owner, "dtype", self.dtype)
        if self.fn not in FLATMAP_FNS:
            raise ParamError(f"{self.owner}: unsupported function {self.fn!r}; supported: {list(FLATMAP_FNS)}")
        if self.max_rank < 1:
            raise ParamError(f"{self.owner}: max_rank must be >= 1 (FlatMap adds a dimension)")
        if self.fn == "range" and (self.rows != 1 or self.cols not in (1, 2)):
            raise ParamError(f"{self.owner}: range takes [1, 2] (start, count) or [1, 1] start tiles, "
                             f"got [{self.rows}, {self.cols}]")

    @property
    def in_tile(self) -> Tile:
        return Tile(self.dtype, self.rows, self.cols)

    @property
    def out_tile(self) -> Tile:
        if self.fn == "range":
            return Tile("int32", 1, 1)
        return Tile(self.dtype, 1, self.cols)


class FlatMap(StepUnit):
    """STeP FlatMap with ``retile_streamify`` or ``range`` (one block level, q = 1).

    Each data token expands into its sub-stream (rows of the tile; or indices
    ``start + step·j``, ``j < count``, a count ``<= 0`` gives an empty block)
    closed by a block end ``S_1``; an input stop ``S_k`` becomes ``S_(k+1)``.
    Block ends go through a :class:`StopMerger` (eager when the input has rank
    0, register ``eager``), so ``S_1`` merges with a following outer stop.

    Registers: ``eager``; for range ``step`` (int32) and, with ``[1, 1]``
    starts, ``count``.

    Latency 0 (the merger's output is combinational from the input); II: one
    cycle per output row/index plus one for the block end (``R + 1`` cycles per
    tile for retile_streamify, ``count + 1`` for range). Combinational: data and
    valid from the input (through the merger), ready from ``o.ready``;
    ``o.valid`` never depends on ``o.ready``.
    """

    kind = "FlatMap"

    def __init__(self, params: FlatMapParams):
        if not isinstance(params, FlatMapParams):
            reject(self, ParamError(f"FlatMap: params must be FlatMapParams, got {type(params).__name__}"))
        super().__init__(params)

    def formats(self):
        p = self.params
        return {"i": (False, token_format(p.in_tile, p.max_rank)), "o": (True, token_format(p.out_tile, p.max_rank))}

    def registers(self):
        regs = [Reg("eager", 1, 0, doc="the input has rank 0: send block ends at once")]
        if self.params.fn == "range":
            regs.append(Reg("step", 32, 1, signed=True, doc="range: index step"))
            if self.params.cols == 1:
                regs.append(Reg("count", 32, 0, doc="range: static count"))
        return regs

    def configure(self, op_params, in_types):
        p, owner = self.params, "FlatMap"
        f = as_fn(owner, op_params.get("fn"))
        if f.name != p.fn:
            raise ParamError(f"{owner}: this unit is built for {p.fn!r}, the node uses {f.name!r}")
        st = _check_input(owner, "in", in_types, p.in_tile, p.max_rank - 1)
        values = {"eager": int(st.rank == 0)}
        if p.fn == "range":
            step = int(f.param("step"))
            values["step"] = step
            count = f.param("count")
            if (count is None) != (p.cols == 2):
                raise ParamError(f"{owner}: range with count={count!r} does not fit [1, {p.cols}] input tiles")
            if count is not None:
                values["count"] = int(count)
        return self.config_image(**values)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        self.regs.elaborate(m, self.cfg)
        fmt_o = self.fmt("o")
        m.submodules.merger = mg = StopMerger(fmt_o)
        ev = mg.i.payload
        i = self.i
        m.d.comb += [self.o.payload.eq(mg.o.payload), self.o.valid.eq(mg.o.valid), mg.o.ready.eq(self.o.ready)]

        k = i.payload.stop
        is_data = ~i.payload.done & (k == 0)
        elems = [tile_elems(i.payload.payload)[j] for j in range(p.rows * p.cols)]
        if p.fn == "retile_streamify":
            idx = Signal(range(p.rows + 1), name="row")
            more = idx < p.rows - token_short(i.payload.payload)       # the tile's valid rows only
            rows = Array([Cat(*elems[r * p.cols:(r + 1) * p.cols]) for r in range(p.rows)])
            value = rows[idx[:max(1, (p.rows - 1).bit_length())] if p.rows > 1 else 0]
        else:
            idx = Signal(32, name="index")
            start = elems[0].as_signed()
            count = elems[1].as_signed() if p.cols == 2 else self.regs["count"]
            if p.cols == 2:
                more = (count > 0) & (idx < count.as_unsigned())
            else:
                more = idx < count
            acc = Signal(32, name="offset")
            value = (start + acc)[:32]

        m.d.comb += [mg.i.valid.eq(i.valid), ev.eager.eq(self.regs["eager"])]
        with m.If(is_data):
            with m.If(more):
                m.d.comb += [ev.payload.eq(value), ev.stop.eq(0), ev.done.eq(0), ev.end.eq(0)]
                with m.If(i.valid & mg.i.ready):
                    m.d.sync += idx.eq(idx + 1)
                    if p.fn == "range":
                        m.d.sync += acc.eq(acc + self.regs["step"])
            with m.Else():
                m.d.comb += [ev.payload.eq(0), ev.stop.eq(1), ev.done.eq(0), ev.end.eq(1),
                             i.ready.eq(mg.i.ready)]
                with m.If(i.valid & mg.i.ready):
                    m.d.sync += idx.eq(0)
                    if p.fn == "range":
                        m.d.sync += acc.eq(0)
        with m.Else():
            m.d.comb += [ev.payload.eq(0), ev.stop.eq(Mux(i.payload.done, 0, k + 1)), ev.done.eq(i.payload.done),
                         ev.end.eq(0), i.ready.eq(mg.i.ready)]
        return m
