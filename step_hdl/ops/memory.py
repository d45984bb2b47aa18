"""Memory operators: off-chip loads and stores (linear and random), Bufferize and Streamify."""

from __future__ import annotations

import sympy

from ..process import Emitter, emit_block
from ..token import DONE, data, stop
from ..types import BufferRef, Index, StreamType, Tile, dim_str, dims_equal, is_static, sum_over
from .base import Buffer, Op, register


class _OffChip(Op):
    def tensor(self):
        name = self.p("tensor")
        try:
            return self.graph.tensors[name]
        except KeyError:
            raise self.type_error(f"unknown off-chip tensor {name!r}; declared: "
                                  f"{sorted(self.graph.tensors) or 'none'}") from None

    def tile_type(self) -> Tile:
        if len(self.p("tile")) != 2:
            raise self.type_error(f"tile must be [rows, cols], got {list(self.p('tile'))}")
        tr, tc = self.p("tile")
        spec = self.tensor()
        for what, t, full in (("rows", tr, spec.rows), ("cols", tc, spec.cols)):
            if is_static(t) and int(t) < 1:
                raise self.shape_error(f"tile {what} must be >= 1, got {t}")
            if is_static(t) and is_static(full) and int(full) % int(t):
                raise self.shape_error(f"tile {what} {t} does not divide tensor '{spec.name}' {what} {full}")
        return Tile(spec.dtype, tr, tc)

    def grid(self, io):
        arr = io.ctx.memory.array(self.p("tensor"))
        tr, tc = (int(d.subs(io.ctx.bindings)) for d in self.p("tile"))
        return arr, tr, tc

    def tiles_moved(self):
        return self.out_types["out"].elements

    def offchip_bytes(self):
        return sum_over(self.tiles_moved(), self.tile_type().nbytes)

    def onchip_bytes(self):
        return 2 * self.tile_type().nbytes  # double-buffered tile


@register
class LinearOffChipLoad(_OffChip):
    """Read a tiled view of an off-chip tensor with an affine tile pattern.

    For every element of ``ref`` (or once, without ``ref``) emit the tiles at
    tile indices ``base + Σ index_d · stride_d`` over the output dimensions
    (ref dims first, then ``out_shape``), where a tile index is the row-major
    position in the tensor's grid of ``tile``-sized tiles. Stride 0 re-reads.
    """

    kind = "LinearOffChipLoad"
    memory = "load"
    unit = "load"
    inputs_spec = ("ref",)
    optional_inputs = ("ref",)
    params_spec = {"tensor": ("str",), "tile": ("dims",), "out_shape": ("dims",), "stride": ("ints",),
                   "base": ("int", 0)}

    def infer(self):
        tile = self.tile_type()
        ref = self.inputs.get("ref")
        lead = ref.type.shape if ref is not None else ()
        shape = tuple(lead) + tuple(self.p("out_shape"))
        if not self.p("out_shape") and ref is None:
            raise self.shape_error("out_shape needs at least one dimension when there is no ref stream")
        if len(self.p("stride")) != len(shape):
            raise self.shape_error(f"stride has {len(self.p('stride'))} entries but the output has "
                                   f"{len(shape)} dimensions {['ref'] * len(lead) + ['out'] * len(self.p('out_shape'))}")
        return {"out": StreamType(tile, shape)}

    def block_indices(self, bindings, lead_idx=()) -> tuple[list, list]:
        """``(out_shape, tile indices)`` of the block read for the ref element at ``lead_idx`` (``()``
        without ref): the indices in the order the tiles are read, row-major over ``out_shape``."""
        out_shape = [int(d.subs(bindings)) for d in self.p("out_shape")]
        strides = self.p("stride")
        indices = [self.p("base") + sum(i * s for i, s in zip(lead_idx, strides))]
        for size, stride in zip(out_shape, strides[len(lead_idx):]):
            indices = [k + j * stride for k in indices for j in range(size)]
        return out_shape, indices

    def _block(self, io, lead_idx):
        arr, tr, tc = self.grid(io)
        out_shape, indices = self.block_indices(io.ctx.bindings, lead_idx)
        tiles = iter([io.ctx.memory.read_tile(self, arr, k, tr, tc) for k in indices])

        def build(level):
            if level == len(out_shape):
                return next(tiles)
            return [build(level + 1) for _ in range(out_shape[level])]

        return build(0)

    def run(self, io):
        q = len(self.p("out_shape")) - 1
        if self.inputs.get("ref") is None:
            em = Emitter(io, "out")
            yield from _emit_whole(em, self._block(io, ()), q)
            yield from em.done()
            return
        em = Emitter(io, "out", "ref")
        idx = [0] * len(self.t("ref").shape)
        while True:
            t = yield from io.get("ref")
            if t.done:
                yield from em.done()
                return
            if t.stop:
                yield from em.stop(t.stop + q + 1)
                _advance(idx, t.stop)
                continue
            yield from emit_block(em, self._block(io, idx), q + 1)
            yield from em.element_done()
            idx[-1] += 1


def _emit_whole(em, nested, q):
    """Emit a whole rank-q stream body (no block end beyond its own S_q closes)."""
    if q == 0:
        for x in nested:
            yield from em.data(x)
        return
    for item in nested:
        yield from emit_block(em, item, q)


def _advance(idx, k):
    """Advance a multi-index (outermost first) past stop ``S_k``."""
    idx[-1 - k] += 1
    for j in range(k):
        idx[-1 - j] = 0


@register
class LinearOffChipStore(_OffChip):
    """Write the tiles of ``in`` to consecutive tile slots (row-major grid order) from ``base``."""

    kind = "LinearOffChipStore"
    memory = "store"
    unit = "offchip"
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        tile = self.tile_type()
        got = self.need_tile("in")
        if got.dtype != tile.dtype:
            raise self.type_error(f"stores {got.dtype} tiles into {tile.dtype} tensor '{self.p('tensor')}'", "in")
        for a, b, what in ((got.rows, tile.rows, "rows"), (got.cols, tile.cols, "cols")):
            if dims_equal(a, b) is False:
                raise self.shape_error(f"input tiles have {what} {dim_str(a)}, the store's tile has {dim_str(b)}", "in")
        return {}

    def tiles_moved(self):
        return self.t("in").elements

    def run(self, io):
        arr, tr, tc = self.grid(io)
        slot = self.p("base")
        while True:
            t = yield from io.get("in")
            if t.done:
                return
            if t.stop == 0:
                io.ctx.memory.write_tile(self, arr, slot, tr, tc, t.payload)
                slot += 1


@register
class RandomOffChipLoad(_OffChip):
    """One tile read per address token (tile index ``base + addr``); shape of ``addr``."""

    kind = "RandomOffChipLoad"
    memory = "load"
    addressed = True
    unit = "offchip"
    inputs_spec = ("addr",)
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        self.need_index("addr")
        return {"out": StreamType(self.tile_type(), self.t("addr").shape)}

    def run(self, io):
        arr, tr, tc = self.grid(io)
        while True:
            t = yield from io.get("addr")
            if t.stop == 0 and not t.done:
                t = data(io.ctx.memory.read_tile(self, arr, self.p("base") + int(t.payload.reshape(-1)[0]), tr, tc))
            yield from io.put("out", t)
            if t.done:
                return


@register
class RandomOffChipStore(_OffChip):
    """One tile write per (address, data) pair; emits the written address as acknowledgement."""

    kind = "RandomOffChipStore"
    memory = "store"
    addressed = True
    unit = "offchip"
    inputs_spec = ("addr", "data")
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        self.need_index("addr")
        tile = self.tile_type()
        got = self.need_tile("data")
        if got.dtype != tile.dtype:
            raise self.type_error(f"stores {got.dtype} tiles into {tile.dtype} tensor '{self.p('tensor')}'", "data")
        self.same_shape("addr", "data")
        return {"out": StreamType(Index(), self.t("addr").shape)}

    def tiles_moved(self):
        return self.t("data").elements

    def run(self, io):
        arr, tr, tc = self.grid(io)
        while True:
            a = yield from io.get("addr")
            d = yield from io.get("data")
            if a.stop != d.stop or a.done != d.done:
                raise io.fail(f"address token {a!r} does not line up with data token {d!r}")
            if a.is_data:
                io.ctx.memory.write_tile(self, arr, self.p("base") + int(a.payload.reshape(-1)[0]), tr, tc, d.payload)
            yield from io.put("out", a)
            if a.done:
                return


# --------------------------------------------------------------------------- on-chip memory

@register
class Bufferize(Op):
    """Gather each rank-``rank`` chunk into an on-chip buffer; emit one reference per chunk."""

    kind = "Bufferize"
    buffers = True
    breaks_cycles = True
    takes_chunks = True
    unit = "buffer"
    params_spec = {"rank": ("int",)}

    def infer(self):
        b = self.p("rank")
        if b < 1:
            raise self.shape_error(f"rank must be >= 1, got {b}")
        self.need_rank("in", b, "rank")
        st = self.t("in")
        return {"out": StreamType(BufferRef(st.dtype, st.shape[-b:]), st.shape[:-b])}

    def onchip_bytes(self):
        return self.t("in").dtype.nbytes + 2 * self.out_types["out"].dtype.nbytes

    def run(self, io):
        from ..token import decode
        b = self.p("rank")
        while True:
            chunk = yield from io.read_chunk("in", b)
            if chunk is None:
                yield from io.put("out", DONE)
                return
            close = chunk[-1].stop
            body = chunk[:-1] + [stop(b - 1)] if b > 1 else chunk[:-1]
            nested = decode(body + [DONE], b - 1)
            io.ctx.buffers += 1
            yield from io.put("out", data(Buffer(io.ctx.buffers, nested, b - 1)))
            if close > b:
                yield from io.put("out", stop(close - b))


@register
class Streamify(Op):
    """Emit each buffer's contents, once or repeatedly.

    ``repeat`` (static count) adds one dimension of that size; a ``ref`` stream
    whose shape is the buffer stream's shape plus ``c`` inner dimensions repeats
    each buffer once per element of those ``c`` dimensions. Optional
    ``read_shape`` + ``read_stride`` read the buffer's flattened elements with an
    affine pattern instead of linearly; ``transpose`` reads a rank-2 buffer
    ``[r, c]`` column by column, ``[c, r]``, whatever its sizes (each buffer's
    own: how the lowering packs and unpacks a block of rows).
    """

    kind = "Streamify"
    buffers = True          # (in the unit of the Bufferize it reads: no unit of its own)
    inputs_spec = ("in", "ref")
    optional_inputs = ("ref",)
    params_spec = {"repeat": ("int", None), "read_shape": ("dims", None), "read_stride": ("ints", None),
                   "transpose": ("bool", False)}

    def infer(self):
        bt = self.t("in").dtype
        if not isinstance(bt, BufferRef):
            raise self.type_error(f"expected a stream of buffer references, got {bt}", "in")
        outer = self.t("in").shape
        if self.inputs.get("ref") is not None and self.p("repeat") is not None:
            raise self.shape_error("give either a ref stream or a static repeat count, not both")
        if self.inputs.get("ref") is not None:
            ref = self.t("ref").shape
            if len(ref) < len(outer) or any(dims_equal(a, b) is False for a, b in zip(ref, outer)):
                raise self.shape_error(f"ref shape {self.t('ref').shape_str()} must start with the buffer "
                                       f"stream's shape {self.t('in').shape_str()}", "ref")
            mid = tuple(ref[len(outer):])
        elif self.p("repeat") is not None:
            if self.p("repeat") < 1:
                raise self.shape_error(f"repeat must be >= 1, got {self.p('repeat')}")
            mid = (sympy.Integer(self.p("repeat")),)
        else:
            mid = ()
        inner = bt.shape
        if self.p("transpose"):
            if self.p("read_shape") is not None:
                raise self.shape_error("give either read_shape or transpose, not both")
            if len(bt.shape) != 2:
                raise self.type_error(f"transpose reads rank-2 buffers, got buffers of shape "
                                      f"[{', '.join(map(str, bt.shape))}]", "in")
            inner = (bt.shape[1], bt.shape[0])
        if self.p("read_shape") is not None:
            if self.p("read_stride") is None or len(self.p("read_stride")) != len(self.p("read_shape")):
                raise self.shape_error("read_stride needs one entry per read_shape dimension")
            inner = self.p("read_shape")
        self._mid = len(mid)
        return {"out": StreamType(bt.dtype, tuple(outer) + mid + tuple(inner))}

    def _view(self, buf: Buffer, io):
        if self.p("transpose"):
            rows = buf.contents
            if len({len(r) for r in rows}) > 1:
                raise io.fail(f"transpose of a buffer whose rows differ in length ({[len(r) for r in rows]})")
            return [list(col) for col in zip(*rows)]
        if self.p("read_shape") is None:
            return buf.contents
        from ..token import leaves
        flat = leaves(buf.contents, buf.rank)
        shape = [int(d.subs(io.ctx.bindings)) for d in self.p("read_shape")]
        strides = self.p("read_stride")

        def build(level, off):
            if level == len(shape):
                if off >= len(flat):
                    raise io.fail(f"read pattern reaches element {off} of a {len(flat)}-element buffer")
                return flat[off]
            return [build(level + 1, off + j * strides[level]) for j in range(shape[level])]
        return build(0, 0)

    def run(self, io):
        em = Emitter(io, "out", "in")
        q = len(self.out_types["out"].shape) - len(self.t("in").shape)  # dims added per buffer
        inner_rank = q - self._mid
        has_ref = self.inputs.get("ref") is not None
        while True:
            t = yield from io.get("in")
            if t.done:
                if has_ref:
                    yield from io.expect_done("ref")
                yield from em.done()
                return
            if t.stop:
                if has_ref and self._mid == 0:
                    # the ref has the buffer stream's shape: its stop here lines up with this one
                    r = yield from io.peek("ref")
                    if r.stop:
                        yield from io.get("ref")
                yield from em.stop(t.stop + q)
                continue
            view = self._view(t.payload, io)
            if has_ref:
                # one rank-c chunk of the ref: the view once per data element; a
                # closing stop above c lines up with the buffer stream's next stop.
                chunk = yield from io.read_chunk("ref", self._mid)
                if chunk is None:
                    raise io.fail("ref stream ended before the buffer stream", "ref")
                for r in chunk:
                    if r.is_data:
                        yield from emit_block(em, view, inner_rank)
                    elif r.stop < self._mid:
                        yield from em.stop(r.stop + inner_rank)
                if self._mid:
                    yield from em.end_block(q)
            elif self._mid:
                for _ in range(self.p("repeat")):
                    yield from emit_block(em, view, inner_rank)
                yield from em.end_block(q)
            else:
                yield from emit_block(em, view, inner_rank)
            yield from em.element_done()
