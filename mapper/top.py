"""Top-level generation: one Amaranth component that runs a mapped program.

:class:`FabricTop` builds a :class:`~step_hdl.mapper.design.Design` (what
:func:`~step_hdl.mapper.plan.plan` made of a lowered graph: one unit per node,
one FIFO per edge) as one synthesizable component.

Interface of :class:`FabricTop` (``docs/architecture.md`` has the table):

``cfg`` (in stream, always ready)
    ``addr`` = unit index << 8 | register, ``data`` 32 bits: the configuration
    image, written before ``start``.
``start`` (in, pulse)
    starts every ``LinearOffChipLoad`` (writes their ``start`` register) and the
    cycle counter.
``done`` (out)
    every store unit has written its last tile (latched until reset).
``hung`` (out)
    no token or memory transfer anywhere for ``watchdog`` cycles while running (activity is seen three
    cycles late: every handshake registered, then a registered OR tree over them).
``mem0 .. mem{n-1}``
    one memory port per off-chip unit (request/response streams of
    :mod:`step_hdl.units.memport`), in :attr:`Design.mem_units` order.
``ctr_addr`` / ``ctr_data`` (counter read-back, combinational; only with ``counters=True``, the default)
    testbench instrumentation, left out for synthesis (``FabricTop(design, counters=False)``
    builds no counter registers and has no ``ctr_*`` ports): counter ``k`` of :meth:`Design.counter_names`: ``cycles`` (start to done),
    ``bytes_read``, ``bytes_written``, ``idle``, per unit ``<unit>.active``
    (cycles with a transfer on any of its ports), ``<unit>.stalled`` (no
    transfer, an output blocked by a full FIFO) and ``<unit>.finish`` (the
    cycle count just after its last transfer), per edge ``<edge>.produced``
    and ``<edge>.consumed`` (tokens into and out of its FIFO; a difference is a
    token still held, which is how a deadlock report names stuck channels),
    the units' status flags (``<buffer>.overflow``: a private on-chip buffer
    dropped entries) and per tile pool ``<pool>.peak`` (the most pages in use
    at once), ``<pool>.starved`` (a request found no free page) and
    ``<pool>.waits`` (cycles a request waited for its grant).

``smp_every``, ``smp_addr`` / ``smp_data``, ``smp_count`` (only with ``samples=N``, ``N > 0``; simulation only)
    a timeline without Python per cycle: while running, whenever the ``cycles`` counter reaches the next
    multiple of ``smp_every`` (set before ``start``; 0 samples nothing), the counters of
    :meth:`Design.sample_names` are written at once, as one row, into a memory of ``N`` rows (``smp_count``
    rows written; the rest of the run goes unsampled once it is full). ``smp_data`` is row ``smp_addr``
    (combinational), counter ``k`` of the names in bits ``k * COUNTER_BITS`` up; each row holds its own
    ``cycles``, so its counters are one instant's.

Tile pools (``Design.pools``): one :class:`~step_hdl.units.pool.TilePool` each,
client ``k``'s ``pool`` port connected to the pool's ``c{k}``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.units.memport import MemPortSignature
from step_hdl.units.pool import TilePool
from step_hdl.units.stream import Queue

from .adapters import unit_class
from .design import COUNTER_BITS, STATUS, TOP_CFG_LAYOUT, Design, built_units
from .instruments import Instruments
from .shared import SharedUnit
from step_hdl.units.base import not_elaborated


#: handshakes OR-ed into one registered activity flag (the watchdog's first stage)
ACTIVITY_GROUP = 16


class FabricTop(wiring.Component):
    """The mapped program's hardware (synthesizable); see the module docstring for the interface."""

    def __init__(self, design: Design, counters: bool = True, samples: int = 0, shared: dict | None = None):
        self.design = design
        # for Verilog, instances of modules converted apart (mapper.shared): {"units": {unit name: (module,
        # ports)}, "queues": {edge label: (module, ports)}, "instruments": (module, ports)}
        self.shared = shared or {}
        self.counters = counters     # testbench instrumentation; False for synthesis (no ctr_* ports)
        if samples and not counters:
            raise ValueError("FabricTop: samples need the counters (counters=True)")
        self.samples = samples       # rows of the counter sampler (0: none)
        self.unit_objs = built_units(design)
        self.counter_names = design.counter_names() if counters else []
        self.sample_names = design.sample_names() if samples else []
        self._instruments = None
        members = {"cfg": In(stream.Signature(TOP_CFG_LAYOUT)), "start": In(1), "done": Out(1), "hung": Out(1)}
        if counters:
            members.update({"ctr_addr": In(16), "ctr_data": Out(COUNTER_BITS)})
        if samples:
            members.update({"smp_every": In(COUNTER_BITS), "smp_addr": In(range(samples)),
                            "smp_data": Out(COUNTER_BITS * len(self.sample_names)),
                            "smp_count": Out(range(samples + 1))})
        for k, name in enumerate(design.mem_units):
            members[f"mem{k}"] = Out(MemPortSignature(self.unit_objs[name].params.port))
        super().__init__(members)

    @property
    def instruments(self) -> Instruments | None:
        """The counters, their read-back and the sampler (None without counters): made when first asked for,
        so a top level that is never elaborated leaves no unused component behind."""
        if self._instruments is None and self.counters:
            self._instruments = Instruments(self.counter_names, instrument_sources(self.design), self.sample_names,
                                            self.samples)
        return self._instruments

    def elaborate(self, platform):
        m = Module()
        d = self.design
        units = dict(self.unit_objs)
        for name, module in self.shared.get("units", {}).items():
            units[name] = SharedUnit(units[name], *module)
        for name, u in units.items():
            m.submodules[f"u_{name}"] = u
        pools = {}
        for spec in d.pools:
            m.submodules[f"p_{spec.name}"] = pool = pools[spec.name] = TilePool(spec.params)
            for k, client in enumerate(spec.clients):
                wiring.connect(m, units[client].pool, getattr(pool, f"c{k}"))

        running, done = Signal(), Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)
        m.d.comb += self.done.eq(done)
        self._configuration(m, units)
        ports_of: dict[str, list] = {s.name: [] for s in d.units}    # (stream, is_output) per unit
        transfers, counters = self._edges(m, units, ports_of)
        rd_bytes, wr_bytes = self._memory_ports(m, units, ports_of, transfers)
        finished = self._sinks(m, units, transfers)
        stores = [units[s.name].finished for s in d.units if unit_class(s.cls).finishes] + finished
        with m.If(running & Cat(*stores).all() if stores else Const(0)):
            m.d.sync += done.eq(1)
        live = running & ~done
        idle = self._watchdog(m, transfers, live)
        if self.counters:
            self._counters(m, units, pools, ports_of, counters, rd_bytes, wr_bytes, idle, live)
        return m

    def _configuration(self, m, units):
        """The configuration port: the unit index decoded from the address; the start pulse writes the loads'
        ``start`` register."""
        cfg = self.cfg
        m.d.comb += cfg.ready.eq(1)
        for k, spec in enumerate(self.design.units):
            u = units[spec.name]
            if not u.regs.regs:
                continue        # no registers: its cfg port stays idle
            sel = cfg.valid & (cfg.payload.addr[8:] == k)
            m.d.comb += [u.cfg.payload.addr.eq(cfg.payload.addr[:8]), u.cfg.payload.data.eq(cfg.payload.data),
                         u.cfg.valid.eq(sel)]
            if "start" in u.regs.index:
                with m.If(self.start):
                    m.d.comb += [u.cfg.valid.eq(1), u.cfg.payload.addr.eq(u.regs.index["start"]),
                                 u.cfg.payload.data.eq(1)]

    def _edges(self, m, units, ports_of) -> tuple[list, dict]:
        """One FIFO per edge (one Verilog module per width and depth when shared); returns the handshakes that
        move a token and the counters of each edge's tokens produced and consumed."""
        shared_queues = self.shared.get("queues", {})
        transfers, counters = [], {}
        for e in self.design.edges:
            q = Queue(getattr(units[e.src], e.src_port).payload.shape(), e.depth)
            if e.label in shared_queues:
                not_elaborated(q)  # its module is converted once per width and depth
                q = SharedUnit(q, *shared_queues[e.label])
            m.submodules[f"q_{e.label.replace('.', '__')}"] = q
            src, dst = getattr(units[e.src], e.src_port), getattr(units[e.dst], e.dst_port)
            if isinstance(q, SharedUnit) and isinstance(units[e.src], SharedUnit):
                q.adopt("i", src)       # instance to instance: one set of signals, no assignments
            else:
                wiring.connect(m, src, q.i)
            if isinstance(q, SharedUnit) and isinstance(units[e.dst], SharedUnit):
                q.adopt("o", dst)
            else:
                wiring.connect(m, q.o, dst)
            ports_of[e.src].append((q.i, True))
            ports_of[e.dst].append((q.o, False))
            fire_in, fire_out = q.i.valid & q.i.ready, q.o.valid & q.o.ready
            transfers += [fire_in, fire_out]
            counters[f"{e.label}.produced"] = fire_in
            counters[f"{e.label}.consumed"] = fire_out
        return transfers, counters

    def _memory_ports(self, m, units, ports_of, transfers) -> tuple[list, list]:
        """Each off-chip unit's memory port out to the top's ``mem<k>``; returns the bytes each read and write
        request moves, with their handshakes (the traffic counters)."""
        rd_bytes, wr_bytes = [], []
        for k, name in enumerate(self.design.mem_units):
            u, port = units[name], getattr(self, f"mem{k}")
            wiring.connect(m, u.mem, wiring.flipped(port))
            req, resp = port.req, port.resp
            fire = req.valid & req.ready
            transfers += [fire, resp.valid & resp.ready]
            ports_of[name] += [(req, True), (resp, False)]
            # a read request moves `words` tiles (a burst), a write beat one
            rd_bytes.append((fire & ~req.payload.write, req.payload.bytes * req.payload.words))
            wr_bytes.append((fire & req.payload.write, req.payload.bytes))
        return rd_bytes, wr_bytes

    def _sinks(self, m, units, transfers) -> list:
        """The Output nodes: always ready; each one's done token is a finish condition like a store's (the
        flags returned)."""
        finished = []
        for sk in self.design.sinks:
            port = getattr(units[sk.src], sk.src_port)
            fin = Signal(name=f"sink_{sk.name}_finished")
            m.d.comb += port.ready.eq(1)
            with m.If(port.valid & port.payload.done):
                m.d.sync += fin.eq(1)
            transfers.append(port.valid)
            finished.append(fin)
        return finished

    def _watchdog(self, m, transfers, live):
        """``hung`` after ``watchdog`` cycles with no transfer anywhere while running; returns the idle count.

        Whether anything moved is known three cycles late: the handshakes of every unit, gathered across the
        whole chip, are each registered, OR-ed in registered groups and the groups' flags OR-ed into one
        register, so the watchdog is no long path (it was the SwiGLU fabric's critical path, 20.5 ns, 85 %
        routing, with the groups OR-ing the handshakes themselves; then, pipelined, 17.5 ns from a load's
        handshake logic across the chip to its group's flag)."""
        fired = Signal(max(1, len(transfers)), name="transfers")
        m.d.sync += fired.eq(Cat(*transfers) if transfers else 0)
        groups = [fired[k:k + ACTIVITY_GROUP].any() for k in range(0, len(transfers), ACTIVITY_GROUP)]
        seen = Signal(max(1, len(groups)), name="activity")
        any_transfer = Signal(name="any_activity")
        m.d.sync += [seen.eq(Cat(*groups) if groups else 0), any_transfer.eq(seen.any())]
        idle = Signal(COUNTER_BITS, name="idle")
        with m.If(live):
            m.d.sync += idle.eq(idle + 1)
        with m.If(any_transfer | ~live):
            m.d.sync += idle.eq(0)
        m.d.comb += self.hung.eq(idle >= self.design.watchdog)
        return idle

    def _counters(self, m, units, pools, ports_of, counters, rd_bytes, wr_bytes, idle, live):
        """What the testbench counters count, add and show (:class:`Instruments`: the registers, the read-back,
        the sampler): per unit its active and stalled cycles and status flags, per edge its tokens, per tile
        pool its peak, starvation and waits, the traffic and the idle count."""
        events = {"cycles": Const(1)}
        adds = {"bytes_read": _sum_bytes(rd_bytes), "bytes_written": _sum_bytes(wr_bytes)}
        values = {"idle": idle}
        for spec in self.design.units:
            ps = ports_of[spec.name]
            active = Cat(*[s.valid & s.ready for s, _ in ps]).any() if ps else Const(0)
            blocked = Cat(*[s.valid & ~s.ready for s, out in ps if out])
            events[f"{spec.name}.active"] = active
            events[f"{spec.name}.stalled"] = ~active & (blocked.any() if len(blocked) else Const(0))
            for status in STATUS.get(spec.cls, ()):
                values[f"{spec.name}.{status}"] = getattr(units[spec.name], status)
        events.update(counters)
        for name, pool in pools.items():
            values[f"{name}.peak"], values[f"{name}.starved"] = pool.peak, pool.starved
            events[f"{name}.waits"] = pool.lost
        bank = self.instruments
        if "instruments" in self.shared:
            bank = SharedUnit(bank, *self.shared["instruments"])
        m.submodules.instruments = bank
        src = bank.sources

        def packed(table, kinds, width):
            order = sorted((src[n][1], n) for n in src if src[n][0] in kinds)
            return Cat(*(_widen(table[n], width) for _, n in order))
        m.d.comb += [bank.live.eq(live), bank.events.eq(packed(events, ("count",), 1)),
                     bank.adds.eq(packed(adds, ("add",), COUNTER_BITS)),
                     bank.values.eq(packed(values, ("value",), COUNTER_BITS)),
                     bank.ctr_addr.eq(self.ctr_addr), self.ctr_data.eq(bank.ctr_data)]
        if self.samples:
            m.d.comb += [bank.smp_every.eq(self.smp_every), bank.smp_addr.eq(self.smp_addr),
                         self.smp_data.eq(bank.smp_data), self.smp_count.eq(bank.smp_count)]


def instrument_sources(design: Design) -> dict:
    """What each counter of :meth:`Design.counters` is, as :class:`Instruments` takes it: ``(kind, index)``,
    the indices counting each kind in name order; a unit's ``finish`` is stamped by its ``active`` bit."""
    index, sources = {"count": 0, "add": 0, "value": 0}, {}
    for name, kind in design.counters():
        if kind != "stamp":
            sources[name] = (kind, index[kind])
            index[kind] += 1
    for u in design.units:
        sources[f"{u.name}.finish"] = ("stamp", sources[f"{u.name}.active"][1])
    return sources


def _widen(value, width: int):
    """``value`` zero-extended (or cut) to ``width`` bits."""
    v = Value.cast(value).as_unsigned()
    return v[:width] if len(v) >= width else Cat(v, Const(0, width - len(v)))


def _sum_bytes(terms):
    total = Const(0, COUNTER_BITS)
    for fire, nbytes in terms:
        total = total + (nbytes & fire.replicate(len(nbytes)))
    return total
