"""The tile pool: on-chip memory that the buffers of dynamically sized tiles share, page by page.

A buffer of a dynamically sized tile (an MoE expert's ``[N_e, H]`` token
tile) cannot know its size until the tile's close arrives; sized on its own
it must hold the largest tile it could ever get. The buffers of one routing
decision are bounded together (:mod:`step_hdl.counts`: an MoE's experts get
``B · top-k`` rows between them), so they take their storage from one
:class:`TilePool` instead, a page at a time, as rows arrive.

Organisation. The pool has ``pages`` pages of ``page_entries`` entries, each
page its **own** SRAM with one write and one read port, a free bit, an owner
(client and bank) and a link to the next page of its owner's chain. A page
belongs to one client buffer from its allocation to its release, and only its
owner reads or writes it, so clients never wait for each other's accesses:
every client writes and reads one entry per cycle, as a private SRAM would.
The price is a crossbar: each page's write port takes its owner's write
(a ``clients``-way multiplexer of ``width`` bits per page) and each client's
read data comes from the page it last read (a ``pages``-way multiplexer per
client). Few large pages make a cheaper crossbar; small pages waste less of
the pool on partly filled pages.

Allocation. A client asks for a page when it writes the first entry of one
(``alloc``, for bank ``alloc_bank``; ``alloc_link``: the page continues the
chain the client is writing). The pool grants the lowest free page in the
same cycle (``grant``, ``page``); one grant a cycle, to the requesting client
of the lowest index; a client that is not granted holds its entry and asks
again (its input stalls), and ``lost`` says so for the cycle. A request that
finds no free page sets ``starved`` (sticky): the pool is smaller than what
the program needs, and the client waits for a release that may never come.
Release: ``free`` with ``free_bank`` returns every page of that client's bank
in one cycle. A page freed in cycle ``t`` can be granted from ``t + 1``.

Read. ``ren`` with ``rpage``/``roff`` reads the entry; its data is on
``rdata`` the next cycle and holds until the client's next read (each page's
read port holds its output; only its owner enables it). ``next`` is
``rpage``'s link (combinational): a linear reader follows its chain with it.

Status: ``peak`` (the most pages in use in any cycle so far), ``lost`` (this
cycle a request was not granted), ``starved``.

Latency: grants combinational in the requests (a fixed-priority arbiter over
the clients' ``alloc``); read data one cycle after ``ren``. Combinational
paths: ``alloc`` -> ``grant``/``page`` (and so a client's input ready, which
depends on its grant); ``rpage`` -> ``next``.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .params import ParamError, Params, positive

__all__ = ["TilePoolParams", "TilePool", "pool_signature"]


@dataclass(frozen=True)
class TilePoolParams(Params):
    """TilePool: ``pages`` pages of ``page_entries`` entries of ``width`` bits, shared by ``clients`` buffers."""

    width: int = 64
    pages: int = 4
    page_entries: int = 4
    clients: int = 2

    def validate(self):
        positive(self.owner, "width", self.width)
        positive(self.owner, "pages", self.pages)
        positive(self.owner, "page_entries", self.page_entries)
        positive(self.owner, "clients", self.clients)
        if self.pages > 1 << 16:
            raise ParamError(f"{self.owner}: pages {self.pages} > 65536 is not supported")

    @property
    def page_bits(self) -> int:
        return max(1, (self.pages - 1).bit_length())

    @property
    def offset_bits(self) -> int:
        return max(1, (self.page_entries - 1).bit_length())

    @property
    def sram_bits(self) -> int:
        """Bits of storage: every page's entries."""
        return self.pages * self.page_entries * self.width


def pool_signature(width: int, pages: int, page_entries: int) -> wiring.Signature:
    """A client's port onto a pool (the client's side: ``Out`` members are driven by the client)."""
    pb = max(1, (pages - 1).bit_length())
    ob = max(1, (page_entries - 1).bit_length())
    return wiring.Signature({
        "alloc": Out(1), "alloc_bank": Out(1), "alloc_link": Out(1), "grant": In(1), "page": In(pb),
        "wen": Out(1), "wpage": Out(pb), "woff": Out(ob), "wdata": Out(width),
        "ren": Out(1), "rpage": Out(pb), "roff": Out(ob), "rdata": In(width), "next": In(pb),
        "free": Out(1), "free_bank": Out(1),
    })


class TilePool(wiring.Component):
    """Pages of on-chip memory shared by ``clients`` buffers; the module docstring has the rules.

    Ports: ``c0 .. c{clients-1}`` (:func:`pool_signature`, flipped), status ``peak``, ``lost``, ``starved``.
    """

    def __init__(self, params: TilePoolParams):
        self.params = params
        p = params
        members = {f"c{k}": In(pool_signature(p.width, p.pages, p.page_entries)) for k in range(p.clients)}
        members.update({"peak": Out(range(p.pages + 1)), "lost": Out(1), "starved": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        NP, K = p.pages, p.clients
        cl = [getattr(self, f"c{k}") for k in range(K)]
        busy = Signal(NP)
        owner = [Signal(range(K), name=f"owner{q}") for q in range(NP)]
        obank = [Signal(name=f"obank{q}") for q in range(NP)]
        link = [Signal(p.page_bits, name=f"link{q}") for q in range(NP)]
        tail = [Signal(p.page_bits, name=f"tail{c}") for c in range(K)]

        # the lowest free page, and the lowest requesting client
        fresh, any_free = Signal(p.page_bits), Signal()
        for q in reversed(range(NP)):
            with m.If(~busy[q]):
                m.d.comb += [fresh.eq(q), any_free.eq(1)]
        granted, asked = Signal(range(K)), Signal()
        for c in reversed(range(K)):
            with m.If(cl[c].alloc):
                m.d.comb += [granted.eq(c), asked.eq(1)]
        give = Signal()
        m.d.comb += give.eq(asked & any_free)
        for c in range(K):
            m.d.comb += [cl[c].grant.eq(give & (granted == c)), cl[c].page.eq(fresh)]
            with m.If(cl[c].grant):
                m.d.sync += tail[c].eq(fresh)
        lost = [cl[c].alloc & ~cl[c].grant for c in range(K)]
        m.d.comb += self.lost.eq(Cat(*lost).any())
        with m.If(asked & ~any_free):
            m.d.sync += self.starved.eq(1)

        abank = Array([c.alloc_bank for c in cl])[granted]
        alink = Array([c.alloc_link for c in cl])[granted]
        prev = Array(tail)[granted]
        freeing = Array([c.free for c in cl])
        free_bank = Array([c.free_bank for c in cl])
        wen, wpage = Array([c.wen for c in cl]), Array([c.wpage for c in cl])
        woff, wdata = Array([c.woff for c in cl]), Array([c.wdata for c in cl])
        ren, rpage, roff = Array([c.ren for c in cl]), Array([c.rpage for c in cl]), Array([c.roff for c in cl])
        rdata = []
        for q in range(NP):
            o = owner[q]
            new = give & (fresh == q)
            with m.If(new):
                m.d.sync += [busy[q].eq(1), owner[q].eq(granted), obank[q].eq(abank)]
            with m.Elif(busy[q] & freeing[o] & (free_bank[o] == obank[q])):
                m.d.sync += busy[q].eq(0)
            with m.If(give & alink & (prev == q)):
                m.d.sync += link[q].eq(fresh)
            m.submodules[f"page{q}"] = mem = memory.Memory(shape=unsigned(p.width), depth=p.page_entries, init=[])
            wr, rd = mem.write_port(), mem.read_port()
            # the page's writer: the client granted it this cycle (its first entry), else its owner
            src = Mux(new, granted, o)
            m.d.comb += [wr.en.eq(wen[src] & (wpage[src] == q)), wr.addr.eq(woff[src]), wr.data.eq(wdata[src]),
                         rd.en.eq(busy[q] & ren[o] & (rpage[o] == q)), rd.addr.eq(roff[o])]
            rdata.append(rd.data)
        rdata = Array(rdata)
        links = Array(link)
        for c in range(K):
            last = Signal(p.page_bits, name=f"rsel{c}")     # the page this client read last
            with m.If(cl[c].ren):
                m.d.sync += last.eq(cl[c].rpage)
            m.d.comb += [cl[c].rdata.eq(rdata[last]), cl[c].next.eq(links[cl[c].rpage])]

        in_use = Signal(range(NP + 1))
        m.d.comb += in_use.eq(sum((busy[q] for q in range(1, NP)), busy[0]) if NP > 1 else busy[0])
        with m.If(in_use > self.peak):
            m.d.sync += self.peak.eq(in_use)
        return m
