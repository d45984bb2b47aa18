"""PooledBuffers: ``clients`` on-chip buffers that share one :class:`~step_hdl.units.pool.TilePool`.

What the top level builds for a pool (:class:`~step_hdl.mapper.top.FabricTop`
connects each pooled :class:`~step_hdl.units.onchip.OnChipBuffer`'s ``pool``
port to the pool), as one component with buffer ``k``'s ports renamed ``i{k}``,
``o{k}`` and ``i{k}_ref``: the unit tests and the unit catalog run it. Every
buffer gets the same configuration writes (``cfg``); status: the pool's
``peak``, ``lost`` and ``starved``.
"""

from __future__ import annotations

import dataclasses

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .config import config_signature
from .onchip import OnChipBuffer, OnChipBufferParams
from .pool import TilePool, TilePoolParams

__all__ = ["PooledBuffers"]


class PooledBuffers(wiring.Component):
    """``clients`` copies of a pooled buffer ``params`` (``pool_pages``, ``page_entries`` set) and their pool."""

    def __init__(self, params: OnChipBufferParams, clients: int):
        if not params.pooled:
            params = dataclasses.replace(params, pool_pages=4, page_entries=2)
        self.params = params
        self.buffers = [OnChipBuffer(params) for _ in range(clients)]
        f = self.buffers[0].fmt("i")
        self.pool_params = TilePoolParams(width=f.payload_width + f.stop_bits, pages=params.pool_pages,
                                          page_entries=params.page_entries, clients=clients)
        members = {"cfg": In(config_signature())}
        for k, buf in enumerate(self.buffers):
            for port, (is_out, fmt) in buf.fmts.items():
                members[self.port(port, k)] = (Out if is_out else In)(stream.Signature(fmt.layout))
        members.update({"peak": Out(range(params.pool_pages + 1)), "lost": Out(1), "starved": Out(1)})
        super().__init__(members)

    @staticmethod
    def port(port: str, k: int) -> str:
        """Buffer ``k``'s port ``port`` on the group (``i`` -> ``i0``, ``i_ref`` -> ``i0_ref``)."""
        return port[0] + str(k) + port[1:]

    def configure(self, op_params, in_types, bindings=None) -> list[int]:
        return self.buffers[0].configure(op_params, in_types, bindings)

    def elaborate(self, platform):
        m = Module()
        m.submodules.pool = pool = TilePool(self.pool_params)
        m.d.comb += self.cfg.ready.eq(1)
        for k, buf in enumerate(self.buffers):
            m.submodules[f"buf{k}"] = buf
            m.d.comb += [buf.cfg.valid.eq(self.cfg.valid), buf.cfg.payload.eq(self.cfg.payload)]
            wiring.connect(m, buf.pool, getattr(pool, f"c{k}"))
            for port, (is_out, _) in buf.fmts.items():
                mine = getattr(self, self.port(port, k))
                if is_out:
                    wiring.connect(m, getattr(buf, port), wiring.flipped(mine))
                else:
                    wiring.connect(m, wiring.flipped(mine), getattr(buf, port))
        m.d.comb += [self.peak.eq(pool.peak), self.lost.eq(pool.lost), self.starved.eq(pool.starved)]
        return m
