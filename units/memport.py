"""The memory port: how off-chip units talk to memory, a simulation-only test memory,
and the off-chip tensor layout.

Memory port
===========

A unit that touches off-chip memory has one port ``mem = Out(MemPortSignature(shape))``
made of two Amaranth streams (the usual transfer rules: a transfer happens on an
edge where ``valid`` and ``ready`` are both high; ``valid`` never waits for
``ready``; payload and ``valid`` hold until the transfer):

``mem.req`` (unit -> memory)
    ========  ===================  ============================================
    field     width                meaning
    ========  ===================  ============================================
    addr      ``addr_bits``        byte address of the first byte
    bytes     ``bytes_bits``       bytes of one item, ``1 .. data_bits / 8``
                                   (the units here always move whole tiles)
    words     ``words_bits``       a burst: the items of the request (below)
    write     1                    1 = write ``wdata``, 0 = read
    wdata     ``data_bits``        one physical tile (``TileFormat`` packing)
    tag       ``tag_bits``         chosen by the unit, returned unchanged
    ========  ===================  ============================================

``mem.resp`` (memory -> unit)
    ``rdata`` (``data_bits``, one physical tile; zero for a write) and ``tag``.

**Bursts.** A request moves ``words`` items of ``bytes`` bytes at ``addr``,
``addr + bytes``, ... (at most ``MemPortShape.burst_words``). A read is one
request beat with ``words = n >= 1`` (0 counts as 1). A write of ``n`` items
is ``n`` beats, one item's ``wdata`` each: the first with ``words = n``, the
others with ``words = 0`` (their other fields are the first's, ``addr`` the
item's own), back to back: no other request of the port comes between them.
Every *item* gets one response, so a unit's credits and order count items.
The off-chip units keep a burst within one aligned block of ``burst_bytes``
(the DRAM's request size), so a memory serves it with one access per block.

Rules:

* every item gets exactly one response, **in request order** (a write's
  response says the write is done: later reads see it);
* a unit limits its own requests in flight (its structural ``max_inflight``)
  and reserves room for their responses before it issues them, so it can keep
  ``resp.ready`` high; a memory must still honour ``resp.ready``;
* the units here put a running sequence number (mod ``2**tag_bits``) in
  ``tag``; ``2**tag_bits >= max_inflight`` so the tag names a request in flight.
  A memory that reorders internally (several channels) must restore request
  order, which the tag makes easy.

The DRAM model (:mod:`step_hdl.sim.dram`) serves the same port with channels, latency and
bandwidth; :class:`SimMemory` is the simple, simulation-only version.

Off-chip layout
===============

A 2-D tensor ``[R, C]`` cut into tiles ``[tr, tc]`` is stored **tile by tile**:
tile index ``t = (r // tr) * (C // tc) + (c // tc)`` (the row-major position in
the grid of tiles, as in the interpreter's ``Memory``) lives at byte address
``tensor_addr + t * tile_bytes``, where ``tile_bytes = tr * tc * element bytes``
(bf16: 2). Inside a tile, element ``(r, c)`` is element ``r * tc + c``, packed
little-endian exactly as :class:`~step_hdl.units.layout.TileFormat` packs a
physical tile (element 0 at the lowest address / least significant bits), so a
tile is one memory word of ``data_bits = tile bits``. :func:`pack_tensor` and
:func:`unpack_tensor` convert between numpy arrays and these words;
:func:`memory_image` places several tensors into one word list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .layout import TileFormat
from .params import ParamError, Params, positive
from .base import not_elaborated


# ----------------------------------------------------------------------------- the interface

@dataclass(frozen=True)
class MemPortShape(Params):
    """Widths of a memory port (structural)."""

    data_bits: int = 64
    addr_bits: int = 32
    tag_bits: int = 4
    burst_words: int = 1

    def validate(self):
        positive(self.owner, "data_bits", self.data_bits, minimum=8)
        if self.data_bits % 8:
            raise ParamError(f"{self.owner}: data_bits must be a multiple of 8, got {self.data_bits}")
        positive(self.owner, "addr_bits", self.addr_bits)
        if self.addr_bits > 64:
            raise ParamError(f"{self.owner}: addr_bits {self.addr_bits} > 64 is not supported")
        positive(self.owner, "tag_bits", self.tag_bits)
        positive(self.owner, "burst_words", self.burst_words)

    @property
    def words_bits(self) -> int:
        return self.burst_words.bit_length()

    @property
    def word_bytes(self) -> int:
        return self.data_bits // 8

    @property
    def bytes_bits(self) -> int:
        return self.word_bytes.bit_length()


def request_layout(s: MemPortShape) -> data.StructLayout:
    return data.StructLayout({"addr": unsigned(s.addr_bits), "bytes": unsigned(s.bytes_bits),
                              "words": unsigned(s.words_bits), "write": unsigned(1), "wdata": unsigned(s.data_bits),
                              "tag": unsigned(s.tag_bits)})


def item_layout(s: MemPortShape) -> data.StructLayout:
    """One item of a request, as a memory serves it (:class:`BurstSplitter`): ``cont`` marks an item after
    the first of its burst."""
    return data.StructLayout({"addr": unsigned(s.addr_bits), "bytes": unsigned(s.bytes_bits),
                              "write": unsigned(1), "wdata": unsigned(s.data_bits), "tag": unsigned(s.tag_bits),
                              "cont": unsigned(1)})


def response_layout(s: MemPortShape) -> data.StructLayout:
    return data.StructLayout({"rdata": unsigned(s.data_bits), "tag": unsigned(s.tag_bits)})


def MemPortSignature(s: MemPortShape) -> wiring.Signature:
    """The port as seen by the unit (requester): ``req`` out, ``resp`` in. A memory uses ``In(...)``."""
    return wiring.Signature({"req": Out(stream.Signature(request_layout(s))),
                             "resp": In(stream.Signature(response_layout(s)))})


class BurstSplitter(wiring.Component):
    """The memory side of a port: its requests (``i``) as items (``o``, :func:`item_layout`), one per cycle.

    A read of ``words = n`` gives ``n`` items at ``addr``, ``addr + bytes``, ...: the first in the cycle the
    request is offered (combinational), the others in the cycles after it, while ``i`` is held not ready;
    the request beat is taken with the first item. A write beat is one item (``cont`` = its ``words`` is 0:
    a later beat of a write burst). Latency 0, one item per cycle. Combinational: ``o`` from ``i`` when
    idle, ``i.ready`` from ``o.ready``.
    """

    def __init__(self, shape: MemPortShape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(request_layout(shape))),
                          "o": Out(stream.Signature(item_layout(shape)))})

    def elaborate(self, platform):
        m = Module()
        s = self.shape
        i, o = self.i, self.o
        left = Signal(s.words_bits, name="left")        # items of the read being split still to send
        addr, nbytes, tag = Signal(s.addr_bits), Signal(s.bytes_bits), Signal(s.tag_bits)
        req = i.payload
        with m.If(left != 0):
            m.d.comb += [o.valid.eq(1), o.payload.addr.eq(addr), o.payload.bytes.eq(nbytes),
                         o.payload.tag.eq(tag), o.payload.cont.eq(1)]
            with m.If(o.ready):
                m.d.sync += [addr.eq(addr + nbytes), left.eq(left - 1)]
        with m.Else():
            m.d.comb += [o.valid.eq(i.valid), i.ready.eq(o.ready),
                         o.payload.addr.eq(req.addr), o.payload.bytes.eq(req.bytes), o.payload.write.eq(req.write),
                         o.payload.wdata.eq(req.wdata), o.payload.tag.eq(req.tag),
                         o.payload.cont.eq(req.write & (req.words == 0))]
            with m.If(i.valid & o.ready & ~req.write & (req.words > 1)):
                m.d.sync += [addr.eq(req.addr + req.bytes), nbytes.eq(req.bytes), tag.eq(req.tag),
                             left.eq(req.words - 1)]
        return m


# ----------------------------------------------------------------------------- off-chip layout helpers

def tile_bytes(fmt: TileFormat) -> int:
    return fmt.width // 8


def pack_tensor(arr, fmt: TileFormat) -> list[int]:
    """Words (one per tile, grid row-major) of a 2-D tensor cut into ``fmt``-sized tiles."""
    arr = np.asarray(arr)
    if arr.ndim != 2 or arr.shape[0] % fmt.rows or arr.shape[1] % fmt.cols:
        raise ValueError(f"tensor of shape {arr.shape} is not a grid of [{fmt.rows}, {fmt.cols}] tiles")
    gr, gc = arr.shape[0] // fmt.rows, arr.shape[1] // fmt.cols
    return [fmt.pack(arr[r * fmt.rows:(r + 1) * fmt.rows, c * fmt.cols:(c + 1) * fmt.cols])
            for r in range(gr) for c in range(gc)]


def unpack_tensor(words, rows: int, cols: int, fmt: TileFormat) -> np.ndarray:
    """Inverse of :func:`pack_tensor`: the ``[rows, cols]`` tensor held in ``words``."""
    gr, gc = rows // fmt.rows, cols // fmt.cols
    if len(words) < gr * gc:
        raise ValueError(f"{len(words)} words hold fewer than the {gr * gc} tiles of a [{rows}, {cols}] tensor")
    out = np.zeros((rows, cols), dtype=fmt.dtype.numpy)
    for t in range(gr * gc):
        r, c = divmod(t, gc)
        out[r * fmt.rows:(r + 1) * fmt.rows, c * fmt.cols:(c + 1) * fmt.cols] = fmt.unpack(int(words[t]))
    return out


def memory_image(tensors: dict, fmt: TileFormat, words: int | None = None) -> tuple[list[int], dict]:
    """Place tensors one after the other from address 0.

    ``tensors`` maps names to 2-D arrays. Returns ``(word list, {name: byte address})``;
    ``words`` pads the image to that many words.
    """
    image, where = [], {}
    for name, arr in tensors.items():
        where[name] = len(image) * tile_bytes(fmt)
        image += pack_tensor(arr, fmt)
    if words is not None:
        if words < len(image):
            raise ValueError(f"{len(image)} words do not fit a memory of {words}")
        image += [0] * (words - len(image))
    return image, where


def read_tensor(image, addr: int, rows: int, cols: int, fmt: TileFormat) -> np.ndarray:
    """The ``[rows, cols]`` tensor stored at byte address ``addr`` of a word image."""
    first = addr // tile_bytes(fmt)
    return unpack_tensor(image[first:], rows, cols, fmt)


# ----------------------------------------------------------------------------- simulation-only memory

class SimMemory(wiring.Component):
    """A simulation-only memory serving one memory port (not for synthesis).

    One word of ``data_bits`` per address ``word_bytes`` apart, starting at
    byte address 0; contents from ``init`` (a backdoor: the list of words, e.g.
    from :func:`memory_image`). A request is accepted when fewer than
    ``max_inflight`` responses are waiting; it reads or writes the array at once
    and its response becomes valid ``latency`` (>= 1) cycles later, in request
    order. With ``jitter`` = j (0..15) the head response is additionally held
    back in a cycle with probability j/16 (a 16-bit LFSR seeded with ``seed``),
    which gives random latencies that replay exactly on every back-end.
    ``req.addr`` must be word aligned; ``bytes`` is ignored (whole words).
    A burst is served item by item (:class:`BurstSplitter`), one per cycle.

    ``peek_addr``/``peek_data``: a combinational backdoor read of word
    ``peek_addr`` (testbenches dump the memory through it). ``ctl_en`` with
    ``ctl_latency``/``ctl_jitter``/``ctl_seed`` changes latency, jitter and the
    LFSR state at run time (so one Verilator build serves several stall
    patterns); :class:`MemoryHarness` drives them from configuration address
    :data:`SIM_CTL_ADDR`.
    """

    def __init__(self, shape: MemPortShape, depth: int, init=(), latency: int = 1, max_inflight: int = 4,
                 jitter: int = 0, seed: int = 0):
        try:
            positive("SimMemory", "depth", depth)
            positive("SimMemory", "latency", latency)
            positive("SimMemory", "max_inflight", max_inflight)
            if latency > 255:
                raise ParamError(f"SimMemory: latency must be <= 255, got {latency}")
            if isinstance(jitter, bool) or not isinstance(jitter, int) or not 0 <= jitter <= 15:
                raise ParamError(f"SimMemory: jitter must be 0..15 (sixteenths), got {jitter!r}")
            if len(init) > depth:
                raise ParamError(f"SimMemory: {len(init)} initial words exceed depth {depth}")
        except ParamError:
            not_elaborated(self)  # no 'created but never used' warning for a rejected component
            raise
        self.shape, self.depth, self.init = shape, depth, list(init)
        self.latency, self.max_inflight, self.jitter, self.seed = latency, max_inflight, jitter, seed
        super().__init__({"mem": In(MemPortSignature(shape)),
                          "peek_addr": In(range(depth)), "peek_data": Out(shape.data_bits),
                          "ctl_en": In(1), "ctl_latency": In(8), "ctl_jitter": In(4), "ctl_seed": In(16)})

    def elaborate(self, platform):
        m = Module()
        s = self.shape
        m.submodules.array = arr = memory.Memory(shape=unsigned(s.data_bits), depth=self.depth,
                                                 init=self.init + [0] * (self.depth - len(self.init)))
        rd = arr.read_port(domain="comb")
        peek = arr.read_port(domain="comb")
        wr = arr.write_port()
        m.submodules.split = split = BurstSplitter(s)
        m.d.comb += [split.i.valid.eq(self.mem.req.valid), split.i.payload.eq(self.mem.req.payload),
                     self.mem.req.ready.eq(split.i.ready)]
        req, resp = split.o, self.mem.resp

        now = Signal(32)
        m.d.sync += now.eq(now + 1)
        latency = Signal(8, init=self.latency)
        jitter = Signal(4, init=self.jitter)
        entry = data.StructLayout({"rdata": unsigned(s.data_bits), "tag": unsigned(s.tag_bits), "due": unsigned(32)})
        m.submodules.q = q = fifo.SyncFIFO(width=entry.size, depth=self.max_inflight)
        word = Signal(range(self.depth))
        m.d.comb += word.eq(req.payload.addr // s.word_bytes)
        accept = req.valid & req.ready
        w_entry = Signal(entry)
        m.d.comb += [
            req.ready.eq(q.w_rdy),
            rd.addr.eq(word),
            wr.addr.eq(word), wr.data.eq(req.payload.wdata), wr.en.eq(accept & req.payload.write),
            w_entry.rdata.eq(Mux(req.payload.write, 0, rd.data)), w_entry.tag.eq(req.payload.tag),
            w_entry.due.eq(now + latency),
            q.w_data.eq(w_entry), q.w_en.eq(accept),
            peek.addr.eq(self.peek_addr), self.peek_data.eq(peek.data),
        ]
        head = Signal(entry)
        m.d.comb += head.eq(q.r_data)
        ripe = ~(now - head.due)[31]            # now >= due (modulo 2**32)
        lfsr = Signal(16, init=(self.seed * 40503 + 1) & 0xFFFF or 1)
        m.d.sync += lfsr.eq(Mux(lfsr[0], (lfsr >> 1) ^ 0xB400, lfsr >> 1))
        with m.If(self.ctl_en):
            m.d.sync += [latency.eq(Mux(self.ctl_latency == 0, 1, self.ctl_latency)), jitter.eq(self.ctl_jitter),
                         lfsr.eq(self.ctl_seed | 1)]
        hold = Signal()
        shown = Signal()
        m.d.comb += hold.eq(lfsr[4:8] < jitter)
        m.d.comb += [
            resp.valid.eq(q.r_rdy & (shown | (ripe & ~hold))),
            resp.payload.rdata.eq(head.rdata), resp.payload.tag.eq(head.tag),
            q.r_en.eq(resp.valid & resp.ready),
        ]
        with m.If(resp.valid & ~resp.ready):
            m.d.sync += shown.eq(1)
        with m.Elif(resp.valid & resp.ready):
            m.d.sync += shown.eq(0)
        return m


#: configuration address that :class:`MemoryHarness` takes for the test memory's run-time control:
#: data bits 0-7 latency (0 means 1), 8-11 jitter (sixteenths), 16-31 LFSR seed
SIM_CTL_ADDR = 0xFF


def sim_ctl_word(latency: int = 1, jitter: int = 0, seed: int = 0) -> int:
    """Packed configuration write that sets the test memory's latency, jitter and LFSR seed."""
    if not 1 <= latency <= 255 or not 0 <= jitter <= 15:
        raise ParamError(f"sim_ctl_word: latency 1..255 and jitter 0..15, got {latency}, {jitter}")
    value = latency | (jitter << 8) | ((seed * 40503 + 1) & 0xFFFF) << 16
    return SIM_CTL_ADDR | (value << 8)


class MemoryHarness(wiring.Component):
    """Simulation-only wrapper: a unit with a memory port plus a :class:`SimMemory`.

    Exposes every port of the unit except ``mem`` under the same name (so the
    stream drivers and the cocotb runner see ``cfg``, ``i``, ``o``...). A
    configuration write to :data:`SIM_CTL_ADDR` goes to the memory's control
    (units have fewer registers, so they ignore it).

    With ``dump_words > 0`` it adds ``o_mem``: once the unit has finished (its
    ``finished`` output is high, or every output stream has carried its done
    token), the first ``dump_words`` memory words as data tokens of
    ``dump_format`` followed by a done token, so stores can be checked on any
    back-end with the generic scenario runner.
    """

    def __init__(self, unit, mem: SimMemory, dump_words: int = 0, dump_format=None):
        self.unit, self.memory, self.dump_words = unit, mem, dump_words
        members = {name: member for name, member in unit.signature.members.items() if name != "mem"}
        if dump_words:
            from .layout import TokenFormat
            self.dump_format = TokenFormat(dump_format, 1)
            members["o_mem"] = Out(stream.Signature(self.dump_format.layout))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        m.submodules.memory = mem = self.memory
        wiring.connect(m, unit.mem, mem.mem)
        streams_out = []
        for name, member in unit.signature.members.items():
            if name == "mem":
                continue
            outer, inner = getattr(self, name), getattr(unit, name)
            if member.is_port:
                if member.flow == Out:
                    m.d.comb += outer.eq(inner)
                else:
                    m.d.comb += inner.eq(outer)
            elif member.flow == Out:
                wiring.connect(m, inner, wiring.flipped(outer))
                streams_out.append(outer)
            else:
                wiring.connect(m, wiring.flipped(outer), inner)
        cfg = self.cfg
        m.d.comb += [mem.ctl_en.eq(cfg.valid & (cfg.payload.addr == SIM_CTL_ADDR)),
                     mem.ctl_latency.eq(cfg.payload.data[0:8]), mem.ctl_jitter.eq(cfg.payload.data[8:12]),
                     mem.ctl_seed.eq(cfg.payload.data[16:32])]
        if self.dump_words:
            seen = []
            for o in streams_out:
                s = Signal()
                with m.If(o.valid & o.ready & o.payload.done):
                    m.d.sync += s.eq(1)
                seen.append(s)
            finished = Signal()
            if "finished" in unit.signature.members:
                m.d.comb += finished.eq(unit.finished)
            else:
                m.d.comb += finished.eq(Cat(*seen).all() if seen else 1)
            o = self.o_mem
            idx = Signal(range(self.dump_words + 1))
            over = Signal()
            m.d.comb += [mem.peek_addr.eq(idx), o.valid.eq(finished & ~over)]
            with m.If(idx < self.dump_words):
                m.d.comb += o.payload.payload.eq(mem.peek_data)
            with m.Else():
                m.d.comb += o.payload.done.eq(1)
            with m.If(o.valid & o.ready):
                m.d.sync += idx.eq(idx + 1)
                with m.If(idx == self.dump_words):
                    m.d.sync += over.eq(1)
        return m
