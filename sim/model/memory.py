"""The approximate model's off-chip memory: reads and writes timed by the DRAM model
(:class:`~step_hdl.sim.model.dram.Dram`), as each load's and store's RTL unit issues them.

:class:`TimedMemory` is the interpreter's :class:`~step_hdl.interp.Memory` with
timing: a load's requests go out within its ``mem_inflight`` physical-tile
credits, a random load issues the requests of the addresses already waiting at
its input (:meth:`TimedMemory.prefetcher`), and in timing-only runs tiles carry
shapes, not values (:class:`~step_hdl.functions.ShapeOnly`).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque

import numpy as np

from step_hdl.functions import ShapeOnly
from step_hdl.interp import Memory
from step_hdl.mapper.tiling import physical_shape, physical_tiles

from step_hdl.sim.model.dram import PIPELINE, Dram


class _Shape:
    """Stands in for a tensor in timing-only runs: just its shape."""

    def __init__(self, shape):
        self.shape = shape


_new_shape_only = object.__new__


class _LoadState:
    """One load's DRAM requests: completion times of the tiles issued (``ready``), their physical tiles
    not yet sent (``held``, summed in ``held_sum``), reads not yet issued (``pending``) and requests issued
    ahead, for the addresses waiting at a random load's input or the ref elements waiting at a linear
    load's (``early``: (completion, pieces))."""

    __slots__ = ("ready", "held", "held_sum", "pending", "early", "cursor", "prev", "count", "leaving", "timer",
                 "whole_at", "prefetch_at", "part", "rate", "sched", "part_left")

    def __init__(self, ready: deque):
        self.ready = ready
        self.held: deque = deque()
        self.held_sum = 0
        self.pending: deque = deque()
        self.early: deque = deque()
        self.cursor = 0         # push count of the first input token the prefetch has not looked at
        self.prev = None        # the tile index read last (a burst goes on at the next one)
        self.count = 0          # tiles read so far (a burst does not go on into the next ref element's block)
        self.leaving = (0, 0)   # the tile being sent: (physical tiles, when its last one leaves)
        self.rate = 1.0         # cycles per physical tile on the unit's output (its stops between them included)
        self.sched = None       # when each piece of the tile being sent leaves, where its credits paced it
        self.part_left = None   # TimedMemory._left's running sums over the part list (part[2]), kept as it grows
        self.timer = None       # when a credit-paced issue of the pending tiles is scheduled
        self.whole_at = 0       # when the input token the prefetch stopped at is whole (_waiting)
        self.prefetch_at = 0    # when a prefetch waiting for that token is scheduled
        # the first pending read issued in part: its pieces issued so far, their completion, and per issue
        # (pieces, completion)
        self.part = [0, 0, []]


def _still(n: int, end: int, now: int, rate: float) -> int:
    """Pieces of a tile of ``n`` leaving the unit one every ``rate`` cycles, the last at ``end``, not left
    by ``now``."""
    return max(0, min(n, math.ceil((end - now) / rate)))


def _dyadic(r: float) -> bool:
    """Whether a token rate is a multiple of 2**-20, so that the times :func:`_pace_rest` forms from it
    in other orders than the piece-by-piece loop are exactly the loop's (no float rounding)."""
    return (r * 1048576.0).is_integer()


def _pace_rest(d, leave: list, parts: list, credits: int, lone: int, r: float, done: int) -> tuple:
    """The piece-by-piece pacing of :meth:`TimedMemory._issue_rest` after its first ``credits`` pieces,
    in blocks of ``credits`` (numpy): a piece waits for its response ``d[p]`` and for the piece
    ``credits`` before it to have left (``+ lone``), and leaves ``r`` after the piece before it.
    ``leave`` holds the first ``credits`` pieces' times. Exactly the loop's times for a dyadic ``r``
    (:func:`_dyadic`).

    Within one read part the responses come one a cycle and the pieces leave at least ``r >= 1`` apart,
    so a response that stopped binding never binds again there, and the rest of the part repeats a
    whole block once either (a) the block's pieces leave ``r`` apart and ``credits · r`` covers a lone
    request's latency (the credits never bind again: the rest leave ``r`` apart), or (b) the block is
    the one before it shifted by a whole number of cycles (the credits pace it: the rest is that block
    repeated)."""
    n, c = len(d), credits
    dv = np.asarray(d, dtype=np.float64)
    lv = np.empty(n)
    lv[:c] = leave
    jr = np.arange(n) * r
    ends = np.cumsum([k for k, _ in parts])       # where each read part's pieces end
    free = lone + 1 <= c * r                      # a credit is back before the piece it lets out is due
    p = c
    while p < n:
        q = min(p + c, n)
        cr = np.ceil(lv[p - c:q - c]) + lone
        b = np.maximum.accumulate(np.maximum(dv[p:q], cr) - jr[p:q])
        lv[p:q] = np.maximum(b, lv[p - 1] - jr[p - 1]) + jr[p:q]
        p = q
        end = int(ends[np.searchsorted(ends, p - 1, side="right")]) if p < n else n
        if end - p <= c or int(ends[np.searchsorted(ends, p - c, side="right")]) != end:
            continue
        blk = lv[p - c:p]
        if dv[p - 1] > blk[-1]:
            continue
        if free and np.all(np.diff(lv[p - c - 1:p]) == r):                                      # (a)
            lv[p:end] = blk[-1] + np.arange(1, end - p + 1) * r
            p = end
            continue
        if p < 2 * c:
            continue
        t = blk[0] - lv[p - 2 * c]
        if t.is_integer() and np.array_equal(blk - lv[p - 2 * c:p - c], np.full(c, t)) and \
                np.all(dv[p - c:p] <= np.maximum(cr, lv[p - c - 1:p - 1] + r)):                 # (b)
            i = np.arange(p, end)
            lv[p:end] = lv[p - c + (i - p) % c] + ((i - p) // c + 1) * t
            p = end
    cmax = np.maximum(dv[c:], np.ceil(lv[:n - c]) + lone).max()
    return max(done, int(cmax)), np.ceil(lv).astype(np.int64).tolist()


def _waiting(st: _LoadState, channel, now: int):
    """The data tokens waiting at a load's input ``channel`` (a :class:`TimedChannel`, which counts its
    pushes) that its prefetch has not looked at yet, oldest first; ``st.cursor`` moves past each one as it
    is given (and past the stops before it), so a scan stopped after a token resumes at the next. The scan
    ends at a token that is not whole at ``now`` (its last piece, passed on as it was made, is still on its
    way): ``st.whole_at`` says when it is."""
    queue, ends = channel.queue, channel.ends
    n = len(queue)
    front = channel.pushed - n      # push count of the token at the head of the queue
    i = max(st.cursor - front, 0)
    st.whole_at = 0
    while i < n:
        tok = queue[i]
        data = not tok.stop and not tok.done
        if data and ends[i][1] > now:
            st.whole_at = ends[i][1]
            return
        i += 1
        st.cursor = front + i
        if data:
            yield tok


class TimedMemory(Memory):
    """Off-chip memory whose reads and writes go through the DRAM timing model.

    In timing-only runs tiles carry no values, except tensors of int32 given
    as input: those hold control data (index tables such as KV offsets and
    lengths) that decide addresses and sizes, so they are read for real.
    """

    #: the physical tile side (the model sets it); 0 makes every transfer one port request
    tile = 0
    #: ``schedule(t, fn)``: call ``fn()`` at cycle ``t`` (the model sets it): a load's requests that wait for
    #: credits go out when the pieces before them have left the unit
    schedule = None

    def pieces(self, tr: int, tc: int) -> int:
        """Port requests (physical tiles) of a ``[tr, tc]`` transfer."""
        return physical_tiles(tr, tc, self.tile) if self.tile else 1

    def where(self, name: str, index: int, tr: int, tc: int) -> tuple:
        """``(address, stride, runs)`` of logical tile ``index`` (row-major) of ``[tr, tc]`` in tensor
        ``name``, as the RTL lays tensors out (``mapper.plan.configure``): physical tiles (``P x P``, or
        ``[1, P]`` rows for a row count that is not a multiple of ``P``) one after the other, row by row of
        the whole tensor. A logical tile narrower than its tensor and more than one physical tile high is
        therefore ``runs`` runs of consecutive bytes, ``stride`` apart (its physical rows); otherwise one."""
        key = (name, tr, tc)
        g = self._geo.get(key)
        if g is None:
            cols = self.arrays[name].shape[1]
            nbytes = tr * tc * self.graph.tensors[name].dtype.bytes
            # without physical tiles (tile 0) a logical tile is one piece: consecutive
            _, pc, nr, nc = physical_shape(tr, tc, self.tile) if self.tile else (tr, tc, 1, 1)
            tpr = cols // pc            # physical tiles per tile row of the tensor
            tb = nbytes // (nr * nc)
            runs = 1 if nr == 1 or nc == tpr else nr
            g = self._geo[key] = (cols // tc, nr * tpr * tb, nc * tb, tpr * tb if runs > 1 else 0, runs)
        gc, row_bytes, tile_bytes, stride, runs = g
        r, c = divmod(index, gc)
        return self.base[name] + r * row_bytes + c * tile_bytes, stride, runs

    def __init__(self, graph, tensors, dram: Dram, bind, timing_only: bool, layout: dict | None = None):
        control = {k: v for k, v in tensors.items() if graph.tensors[k].dtype.name == "int32"}
        super().__init__(graph, control if timing_only else tensors)
        self.real = set(self.arrays) if timing_only else set(graph.tensors)
        self.dram, self.timing_only, self.now, self.bind = dram, timing_only, 0, bind
        self.ready: dict[str, deque] = {}
        self._loads: dict[str, _LoadState] = {}   # per load: its requests issued, held, pending
        self._reads: dict[str, tuple] = {}         # per load: tensor and tile facts (read_info)
        self._geo: dict = {}                        # (tensor, tile rows, tile cols) -> placement (where)
        self.base: dict[str, int] = {}
        addr = 0
        for name, spec in graph.tensors.items():
            rows, cols = (int(d.subs(bind)) for d in (spec.rows, spec.cols))
            # the RTL's layout where the model has it, else each tensor on a 4 KB boundary
            self.base[name] = layout[name] if layout is not None else addr
            addr += -(-rows * cols * spec.dtype.bytes // 4096) * 4096
            if timing_only and name not in self.real:
                self.arrays[name] = _Shape((rows, cols))
        if not timing_only:
            self.allocate(bind)

    def _timed(self, node, index, tr, tc):
        spec = node.graph.tensors[node.p("tensor")]
        nbytes = tr * tc * spec.dtype.bytes
        addr, stride, runs = self.where(spec.name, index, tr, tc)
        done = self.dram.access(self.now, addr, nbytes, self.pieces(tr, tc), node.name, stride=stride, runs=runs)
        self.ready.setdefault(node.name, deque()).append(done)
        return nbytes

    def _load(self, name: str) -> "_LoadState":
        st = self._loads.get(name)
        if st is None:
            st = self._loads[name] = _LoadState(self.ready.setdefault(name, deque()))
        return st

    def _read_info(self, node, arr, tr, tc) -> tuple:
        """Per load, computed once: what :meth:`read_tile` needs of its tensor and tile, and for a linear load
        whether a tile's physical tiles are one run of consecutive bytes (:meth:`where`: then the next tile
        index starts where it ends, and the unit's burst goes on) and the tiles of one ref element's block (a burst never goes on into the next block)."""
        spec = node.graph.tensors[node.p("tensor")]
        gr, gc = arr.shape[0] // tr, arr.shape[1] // tc
        burst = bool(self.tile) and not node.addressed and self.where(spec.name, 0, tr, tc)[2] == 1
        ref = node.inputs.get("ref")
        block = len(node.block_indices(self.bind, (0,) * len(node.t("ref").shape))[1]) if ref is not None else 0
        info = (arr, tr, tc, gr * gc, spec.name, tr * tc * spec.dtype.bytes, self.pieces(tr, tc),
                self._load(node.name), spec.name in self.real, (int(tr), int(tc)), spec.dtype, burst, block)
        self._reads[node.name] = info
        return info

    def prefetcher(self, node, channel, credits: int):
        """For random load ``node`` with input ``channel`` (a :class:`TimedChannel`, which counts its
        pushes): a function that issues the reads of addresses already waiting at the unit's input, at
        :attr:`now`.

        The RTL :class:`~step_hdl.units.offchip.RandomOffChipLoad` turns each
        address into a request as it arrives, while it has a credit, whatever
        its output is doing; the interpreter's load reads one address per tile
        sent. The first of the waiting addresses may have been issued already.
        Only the addresses that fit in the free credits are looked at, and the
        scan resumes where the last one stopped (the tokens before are stops
        and addresses already issued, which the load takes first), so a long
        queue costs nothing.
        """
        st = self._load(node.name)
        early, access, name = st.early, self.dram.access, node.name
        tensor = tr = tc = nbytes = pieces = base = None    # a tile's facts: at first use
        where = self.where

        def prefetch() -> None:
            nonlocal tensor, tr, tc, nbytes, pieces, base
            if pieces is None:
                spec = node.graph.tensors[node.p("tensor")]
                tile = node.tile_type()
                tr, tc = int(tile.rows), int(tile.cols)
                tensor, nbytes, pieces, base = (spec.name, tr * tc * spec.dtype.bytes, self.pieces(tr, tc),
                                                node.p("base"))
            k = len(early)
            if pieces * (k + 1) > credits:
                return                  # the requests already issued ahead hold the credits (the usual case)
            free = credits - st.held_sum - pieces * k
            if free < pieces:
                return
            now = self.now
            for tok in _waiting(st, channel, now):
                addr, stride, runs = where(tensor, base + int(tok.payload.item(0)), tr, tc)
                early.append((access(now, addr, nbytes, pieces, name, False, stride, runs), pieces))
                free -= pieces
                if free < pieces:
                    break
            self._again(st, now, prefetch)

        return prefetch

    def ref_prefetcher(self, node, channel, credits: int):
        """For linear load ``node`` whose ``ref`` elements each re-read one block (stride 0 over the ref
        dimensions), with ref input ``channel``: a function that issues, at :attr:`now`, the reads of the
        blocks of ref elements already waiting, once the current block's reads are all issued and while a
        whole block fits in the free credits; ``None`` for any other load.

        The RTL :class:`~step_hdl.units.offchip.LinearOffChipLoad` walks on into the next ref element's
        addresses as soon as it has issued the current one's, while it has credits, whatever its output is
        doing; the interpreter's load reads a block only when it takes the ref element."""
        if node.kind != "LinearOffChipLoad" or node.inputs.get("ref") is None:
            return None
        lead = len(node.t("ref").shape)
        if any(node.p("stride")[:lead]):
            return None
        st = self._load(node.name)
        early, access, name = st.early, self.dram.access, node.name
        offsets = None      # the block's tile indices (every ref element's: stride 0), at first use

        def prefetch() -> None:
            nonlocal offsets
            info = self._reads.get(name)
            if info is None or st.pending:
                return              # no block read yet (tile facts unknown), or the current one not all issued
            tensor, nbytes, pieces, (tr, tc) = info[4], info[5], info[6], info[9]
            if offsets is None:
                offsets = node.block_indices(self.bind, (0,) * lead)[1]
            need = pieces * len(offsets)
            free = credits - st.held_sum - sum(got for _, got in early)
            if free < need:
                return
            now = self.now
            burst = info[11]
            for _ in _waiting(st, channel, now):
                for k, index in enumerate(offsets):
                    cont = burst and k > 0 and index == offsets[k - 1] + 1
                    addr, stride, runs = self.where(tensor, index, tr, tc)
                    early.append((access(now, addr, nbytes, pieces, name, cont, stride, runs), pieces))
                free -= need
                if free < need:
                    break
            self._again(st, now, prefetch)

        return prefetch

    def _again(self, st: _LoadState, now: int, prefetch) -> None:
        """Run ``prefetch`` again when the input token its scan stopped at is whole (its request cannot go
        out before its address is there)."""
        t = st.whole_at
        if t > now and self.schedule is not None and st.prefetch_at != t:
            st.prefetch_at = t
            self.schedule(t, prefetch)

    def issue(self, name: str, now: int, credits: int, tokens: int = 0) -> int:
        """The DRAM completion time of load ``name``'s next tile; issue it at ``now`` if not yet issued.

        The interpreter's load code reads a whole block of tiles before it sends
        the first, but the RTL load (``units.offchip``, :class:`_Tracker`) issues a
        request only while it has a credit (``max_inflight`` requests whose
        responses have not left the unit): requests go out as the unit's tiles
        leave, so the loads of a fabric share the DRAM tile by tile instead of one
        load's whole stream being served before the next's. As the tile starts to
        leave, the pieces of the following tiles are issued too while ``credits``
        are free (and later, as the pieces before them leave).

        ``tokens``: the tile's tokens on the unit's output, its physical tiles and the stops among them (a
        physical row's end in a tile more than one row high). A piece leaves a token time after the one
        before it, and the tracker's order queue (``credits + 2`` entries) holds the stops with the pieces
        until they leave, so of a tile with a stop after every piece only ``(credits + 2) / 2`` pieces are in
        flight at once.
        """
        st = self._load(name)
        ready, held, pend = st.ready, st.held, st.pending   # held: physical tiles of each issued tile not yet sent
        pieces = held[0] if held else pend[0][2]
        st.rate = r = max(1.0, tokens / pieces)
        credits = min(credits, int((credits + 2) / r))
        paced = None
        if pend and not ready:
            entry = pend.popleft()
            done, paced = self._issue_rest(st, name, now, credits, entry)
            ready.append(done)
            held.append(entry[2])
            st.held_sum += entry[2]
        n = held.popleft()
        st.held_sum -= n
        done = ready.popleft()
        # its pieces leave as their responses come in (the unit streams them), the last one at ``done`` at the
        # earliest: each returns its credit as it leaves
        st.leaving = (n, max(now + math.ceil(n * r), done))
        st.sched = paced
        if pend:
            self._issue_ahead(st, name, now, credits)
        return done

    def _chunk(self, entry) -> int:
        """Pieces of a read the RTL load issues together: a burst's tiles within one block (a burst takes
        their credits at once); a piece alone where each is its own block."""
        _, nbytes, pieces, _, _, runs = entry
        pb = nbytes // pieces
        if runs != 1 or not pb:
            return 1
        return max(1, min(pieces, self.dram.p.request_bytes // pb))

    def _access_part(self, name: str, now: int, entry, a: int, b: int) -> int:
        """Issue pieces ``a`` .. ``b - 1`` of read ``entry`` at ``now``; their completion. A piece is a
        physical tile: the read's runs one after the other, each its pieces in address order."""
        addr, nbytes, pieces, cont, stride, runs = entry
        if a == 0 and b == pieces:
            return self.dram.access(now, addr, nbytes, pieces, name, cont, stride, runs)
        pb, per = nbytes // pieces, pieces // runs
        done, p = 0, a
        while p < b:
            r, off = divmod(p, per)
            hi = min(b, (r + 1) * per)
            d = self.dram.access(now, addr + r * stride + off * pb, (hi - p) * pb, hi - p, name,
                                 cont if p == 0 else off > 0)
            if d > done:
                done = d
            p = hi
        return done

    def _issue_rest(self, st: _LoadState, name: str, now: int, credits: int, entry) -> tuple:
        """Issue the pieces of read ``entry`` not issued yet, now that the unit is sending its tile; its
        completion, and when each of its pieces leaves where credits paced them (else ``None``). The RTL
        tracker issues a piece only while it has a credit, so in a read of more pieces than credits a piece
        waits for an earlier one to leave (the tile's own first pieces, a token time apart and not before
        their responses): the rest are issued to the channels now, and each completes a lone request's
        latency after the piece whose credit it takes has left, at the earliest."""
        a, done, parts = st.part
        st.part = [0, 0, []]
        pieces = entry[2]
        n0, e0 = st.leaving
        r = st.rate
        prior = self._still(st, now)                # the tile before it, still leaving
        if a < pieces:
            d = self._access_part(name, now, entry, a, pieces)
            parts = parts + [(pieces - a, d)]
            if d > done:
                done = d
        if prior + pieces <= credits:
            return done, None
        lone = self.dram.p.latency + PIPELINE + 1
        last = e0 if e0 > now else now
        # each piece's response, in order: a part's come one a cycle, the last at its completion
        dv = np.concatenate([np.arange(t - k + 1, t + 1, dtype=np.int64) for k, t in parts])
        head = min(credits, len(dv))
        leave = []
        for p, c in enumerate(dv[:head].tolist()):  # the pieces whose credits the tile before frees
            need = prior + p + 1 - credits          # outstanding pieces that must leave before it goes out
            if need > 0:
                c = max(c, self._left(st, now, need) + lone)
            if c > done:
                done = c
            last = max(c, last + r)
            leave.append(last)
        if head < len(dv):
            if _dyadic(r):
                return _pace_rest(dv, leave, parts, credits, lone, r, done)
            d = dv.tolist()
            for p in range(head, len(d)):           # each takes the credit of the piece ``credits`` before it
                c = max(d[p], math.ceil(leave[p - credits]) + lone)
                if c > done:
                    done = c
                last = max(c, last + r)
                leave.append(last)
        return done, [math.ceil(t) for t in leave]

    @staticmethod
    def _still(st: _LoadState, now: int) -> int:
        """Pieces of the tile being sent not left by ``now``."""
        if st.sched is not None:
            return len(st.sched) - bisect_right(st.sched, now)
        n0, e0 = st.leaving
        return _still(n0, e0, now, st.rate)

    def _left(self, st: _LoadState, now: int, k: int) -> int:
        """When the ``k``-th (from 1) of a load's outstanding pieces leaves the unit (so its credit is free
        again), estimated: the tile being sent, then the tiles issued after it and the pieces of the read
        issued in part, each piece a token time (:attr:`_LoadState.rate`) after the one before it and not
        before its response (a tile's responses come one a cycle, the last at its completion)."""
        n0, e0 = st.leaving
        r = st.rate
        left = n0 - self._still(st, now)            # pieces of the tile being sent that have left
        if k <= n0 - left:
            if st.sched is not None:
                return st.sched[left + k - 1]
            return math.ceil(e0 - (n0 - left - k) * r)
        k -= n0 - left
        last = e0
        for n, done in zip(st.held, st.ready):
            first = max(last + r, done - n + 1)
            if k <= n:
                return math.ceil(first + (k - 1) * r)
            k -= n
            last = first + (n - 1) * r
        # then the read issued in part: one entry per issue, so thousands for a large tile issued a credit
        # at a time; the running sums over its entries are kept while they hold (same list, start, rate)
        parts = st.part[2]
        if not parts:
            return math.ceil(last)
        pl = st.part_left
        if pl is None or pl[0] is not parts or pl[1] != last or pl[2] != r:
            pl = st.part_left = [parts, last, r, [], [], last]     # ..., piece counts to each end, firsts, last
        ends, firsts, last = pl[3], pl[4], pl[5]
        total = ends[-1] if ends else 0
        for n, done in parts[len(ends):]:
            first = max(last + r, done - n + 1)
            firsts.append(first)
            total += n
            ends.append(total)
            last = first + (n - 1) * r
        pl[5] = last
        if k > total:
            return math.ceil(last)
        i = bisect_left(ends, k)
        return math.ceil(firsts[i] + (k - (ends[i - 1] if i else 0) - 1) * r)

    def _issue_ahead(self, st: _LoadState, name: str, now: int, credits: int) -> None:
        """Issue the load's pending reads while their pieces have free credits at ``now`` (``units.offchip``
        ``_Tracker``: a request while fewer than ``credits`` of its physical tiles are outstanding, and the
        walk goes on into the next tile as soon as it may; a read of more pieces than are free goes out in
        part); for the next piece, schedule this again for when the pieces before it will have left."""
        n0, e0 = st.leaving
        pend = st.pending
        while pend:
            entry, part = pend[0], st.part
            pieces = entry[2]
            take = min(self._chunk(entry), pieces - part[0])
            outstanding = self._still(st, now) + st.held_sum + part[0]
            wait = outstanding + take - credits              # pieces that must leave before the next go out
            if wait > 0:
                t = self._left(st, now, wait)
                if t > now:
                    if self.schedule is not None and (st.timer is None or st.timer <= now or t < st.timer):
                        st.timer = t
                        self.schedule(t, lambda: self._issue_ahead(st, name, t, credits))
                    return
                k = take
            else:
                k = pieces - part[0]
                free = credits - outstanding
                if k > free:
                    k = free - free % take                    # whole bursts (wait <= 0: free >= take)
            d = self._access_part(name, now, entry, part[0], part[0] + k)
            part[0] += k
            part[2].append((k, d))
            if d > part[1]:
                part[1] = d
            if part[0] == pieces:
                pend.popleft()
                st.ready.append(part[1])
                st.held.append(pieces)
                st.held_sum += pieces
                st.part = [0, 0, []]

    def read_tile(self, node, arr, index, tr, tc):
        """A load's read, issued to DRAM later, when the load unit gets to it (:meth:`issue`), unless the
        load's prefetch (:meth:`prefetcher`) already issued it."""
        info = self._reads.get(node.name)
        if info is None or info[0] is not arr or info[1] != tr or info[2] != tc:
            info = self._read_info(node, arr, tr, tc)
        limit, tensor, nbytes, pieces, st = info[3:8]
        if not 0 <= index < limit:
            self._slot(node, arr, index, tr, tc)        # raises: the index is outside the tensor
        cont = info[11] and index == st.prev and (not info[12] or st.count % info[12])
        st.prev, st.count = index + 1, st.count + 1
        if st.early:
            done, got = st.early.popleft()
            st.ready.append(done)
            st.held.append(got)
            st.held_sum += got
        else:
            addr, stride, runs = self.where(tensor, index, tr, tc)
            st.pending.append((addr, nbytes, pieces, cont, stride, runs))
        name = node.name
        self.bytes_read[name] = self.bytes_read.get(name, 0) + nbytes
        if not info[8]:
            tile = _new_shape_only(ShapeOnly)
            tile.shape, tile.dtype = info[9], info[10]
            return tile
        rs, cs = self._slot(node, arr, index, tr, tc)
        return arr[rs, cs].copy()

    def write_tile(self, node, arr, index, tr, tc, tile):
        self._slot(node, arr, index, tr, tc)
        nbytes = self._timed(node, index, tr, tc)
        if node.kind != "RandomOffChipStore":
            self.ready[node.name].pop()   # a write does not hold a linear store up (posted)
        # a random store acknowledges each write when the memory has done it (``ready``, see acked())
        self.bytes_written[node.name] = self.bytes_written.get(node.name, 0) + nbytes
        if node.p("tensor") in self.real and not isinstance(tile, ShapeOnly):
            rs, cs = self._slot(node, arr, index, tr, tc)
            arr[rs, cs] = tile
