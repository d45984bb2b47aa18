"""Off-chip memory timing, shared by the RTL DRAM model and the approximate model.

:class:`DramParams` and :data:`DRAM_PRESETS` are the parameters both sides
time the DRAM with: :class:`step_hdl.sim.dram.DramModel` (the simulation-only
RTL model that serves a fabric's memory ports) takes them as its timing, and
:class:`Dram` is the approximate model's channel-occupancy timing of the same
parameters (``sim.model``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from step_hdl.errors import StepError


class DramError(StepError):
    """DRAM timing that does not exist (an unknown preset)."""


@dataclass(frozen=True)
class DramParams:
    """Off-chip memory timing, shared with the RTL DRAM model.

    ``channels`` independent channels; a request moves ``request_bytes``; each
    channel issues a new request every ``interval`` cycles from a queue of up
    to ``queue`` requests; a request completes ``latency`` cycles after it is
    issued; at most ``inflight`` requests are outstanding, ``inflight //
    channels`` per channel. Consecutive ``request_bytes`` blocks of the address
    space interleave over the channels.
    """

    channels: int = 8
    request_bytes: int = 64
    latency: int = 64
    interval: int = 2
    inflight: int = 512
    queue: int = 64

    @property
    def channel_inflight(self) -> int:
        """Requests one channel may have outstanding."""
        return max(1, self.inflight // self.channels)

    @property
    def peak_bytes_per_cycle(self) -> float:
        return self.channels * self.request_bytes / self.interval


#: ``paper``: the STeP paper's HDL validation setup (its SwiGLU sweep against Ramulator2 HBM2): 8 channels,
#: 64-byte requests, one request per channel every 2 cycles = 256 B/cycle, latency 64. ``paper-studies``:
#: the memory of the paper's three dynamic studies, 32 channels of 64 B every 2 cycles = 1,024 B/cycle.
#: ``paper-interval1``: ``paper`` with a request per channel every cycle (512 B/cycle), a comparison point
#: for how much a workload waits on channel bandwidth. Every channel queues 64 requests (the paper's
#: Ramulator2 queue of 512 over 8 channels) and has ``inflight // channels`` of them outstanding at most.
DRAM_PRESETS = {"paper": DramParams(8, 64, 64, 2, 512), "paper-studies": DramParams(32, 64, 64, 2, 2048),
                "paper-interval1": DramParams(8, 64, 64, 1, 512)}


def dram_params(dram: "DramParams | str") -> DramParams:
    """``dram`` as timing parameters: a :class:`DramParams` as it is, or the name of a preset of
    :data:`DRAM_PRESETS`; the flow resolves a preset here once, and everything below it takes the parameters."""
    if isinstance(dram, DramParams):
        return dram
    if dram not in DRAM_PRESETS:
        raise DramError(f"unknown DRAM preset {dram!r}; presets: {', '.join(DRAM_PRESETS)}")
    return DRAM_PRESETS[dram]


def preset_name(dram: DramParams) -> str:
    """The name of the preset ``dram`` is (``custom`` for parameters of no preset)."""
    return next((name for name, p in DRAM_PRESETS.items() if p == dram), "custom")


#: cycles from a request's acceptance to its blocks' earliest issue (into the channel queue, then out)
PIPELINE = 2


class Dram:
    """Channel occupancy per transfer in O(channels), not per request (a logical tile may be megabytes), and
    in O(1) for a transfer that gives every channel the same share (a row of ``channels`` requests).

    A transfer of ``n`` requests starting at channel ``c0`` gives each channel
    its share; a channel issues one request per ``interval`` cycles from when it
    is free; a request completes ``latency`` cycles after issue. The in-flight
    limit caps the rate at ``inflight / latency`` requests per cycle.
    """

    def __init__(self, p: DramParams):
        if p.interval < 0:
            raise ValueError(f"DRAM interval must be >= 0 cycles, got {p.interval}")
        self.p = p
        self.window_free = 0.0
        self.accept_free: dict = {}    # per memory port: when it can have its next request accepted
        self.requests: dict = {}       # per memory port: requests issued (physical tiles)
        self.bytes = 0
        self.last = 0
        self._plans: dict = {}     # (bytes, first channel) -> _plan()
        # channel free times, kept as max(floor, own[ch] + shift): a transfer over every channel with the
        # same share moves all of them alike (floor and shift), in O(1)
        self._floor = 0
        self._shift = 0
        self._own = [0] * p.channels
        self._own_max = 0
        self._request_bytes, self._channels, self._latency = p.request_bytes, p.channels, p.latency
        self._last_block: dict = {}    # per memory port: the last block of its last access, and its completion

    @property
    def free(self) -> list:
        """When each channel can take its next request."""
        return [max(self._floor, o + self._shift) for o in self._own]

    def _plan(self, nbytes: int, c0: int) -> tuple:
        """``(n, window, ((channel, occupancy, completion offset), ...), uniform)`` of a transfer: its
        requests, the in-flight window it takes, and per channel with requests the cycles it keeps the
        channel and when its last request completes, relative to the channel's start; ``uniform``:
        ``(occupancy, completion offset)`` when every channel takes the same share."""
        p = self.p
        n = max(1, math.ceil(nbytes / p.request_bytes))
        base, extra = divmod(n, p.channels)
        plan = []
        for ch in range(p.channels):
            count = base + (1 if (ch - c0) % p.channels < extra else 0)
            if count:
                plan.append((ch, count * p.interval, (count - 1) * p.interval + p.latency))
        uniform = (plan[0][1:] if len(plan) == p.channels and len({c[1] for c in plan}) == 1
                   and plan[0][1] >= 0 else None)
        out = self._plans[(nbytes, c0)] = (n, n * p.latency / p.inflight, tuple(plan), uniform)
        return out

    def access(self, now: int, addr: int, nbytes: int, port_requests: int = 1, port=None,
               cont: bool = False, stride: int = 0, runs: int = 1) -> int:
        """Issue the requests of one transfer at ``now``; return the cycle the last one completes.

        ``runs``, ``stride``: the transfer's bytes are ``runs`` equal runs of consecutive bytes, ``stride``
        bytes apart (a logical tile narrower than its tensor: each row of its physical tiles is a run in the
        RTL's layout, one tile row of the tensor after the other), each with its share of the requests.

        ``port_requests``: memory-port requests the transfer takes (one per physical tile), on memory port
        ``port`` (any hashable: the unit's name). As in the RTL DRAM model (``sim.dram``), each port has
        one tile accepted per cycle, all ports at once; a block reaches its channel's queue the cycle
        after its request is accepted and issues the cycle after that at the earliest, so a lone request
        completes ``latency + 2`` cycles after it is accepted. ``cont``: the transfer goes on the port's
        burst (its bytes follow the previous transfer's in one walk of a linear load): a first block that
        is the previous transfer's last is that block, not another (it completes with it).
        """
        rb = self._request_bytes
        if runs > 1 and (stride % rb or (nbytes // runs) % (rb * self._channels)):
            return self._access_runs(now, addr, nbytes, port_requests, port, cont, stride, runs)
        # (runs of whole rows of blocks over every channel take the channels as one run does)
        accepted = self.accept_free.get(port, 0)
        if now > accepted:
            accepted = now
        self.accept_free[port] = accepted + port_requests
        self.requests[port] = self.requests.get(port, 0) + port_requests
        first, last = addr // rb, (addr + max(nbytes, 1) - 1) // rb
        self.bytes += nbytes
        shared = self._last_block.get(port) if cont else None
        if shared is not None and shared[0] == first:
            # the responses come in order, each one cycle after the one before it at the earliest
            done = max(shared[1], accepted + port_requests - 1)
            if last != first:
                done = max(done, self._blocks(now, accepted, (first + 1) * rb, (last - first) * rb, port_requests))
        else:
            done = self._blocks(now, accepted, addr, nbytes, port_requests)
        self._last_block[port] = (last, done)
        if done > self.last:
            self.last = done
        return done

    def _access_runs(self, now, addr, nbytes, port_requests, port, cont, stride, runs) -> int:
        """:meth:`access` of a transfer in ``runs`` runs whose channels differ from one run's: each run in
        turn, its requests accepted after the run before it; the completion of the last."""
        size, share = nbytes // runs, max(1, port_requests // runs)
        done = 0
        for k in range(runs):
            d = self.access(now, addr + k * stride, size, share, port, cont and k == 0)
            if d > done:
                done = d
        return done

    def _blocks(self, now: int, accepted: int, addr: int, nbytes: int, port_requests: int) -> int:
        """The channels' and the in-flight window's timing of a transfer's own blocks; the completion."""
        plan = self._plans.get((nbytes, (addr // self._request_bytes) % self._channels))
        if plan is None:
            plan = self._plan(nbytes, (addr // self._request_bytes) % self._channels)
        n, window, chans, uniform = plan
        floor, shift = self._floor, self._shift
        if uniform is not None:
            occupancy, finish = uniform
            start = self._own_max + shift
            if floor > start:
                start = floor
            if now > start:
                start = now
            done = start + finish + PIPELINE                    # the channel free last finishes last
            self._floor = (floor if floor > now else now) + occupancy
            self._shift = shift + occupancy
        else:
            own = self._own
            done = now
            for ch, occupancy, finish in chans:
                start = own[ch] + shift
                if floor > start:
                    start = floor
                if now > start:
                    start = now
                own[ch] = o = start + occupancy - shift
                if o > self._own_max:
                    self._own_max = o
                if start + finish + PIPELINE > done:
                    done = start + finish + PIPELINE
        # in-flight limit: at most `inflight` requests per `latency` cycles
        start = self.window_free
        if not start > now:
            start = float(now)
        self.window_free = start = start + window
        latency = self._latency
        t = math.ceil(start) + latency - 1 + PIPELINE
        if t > done:
            done = t
        t = accepted + port_requests - 1 + latency + PIPELINE
        if t > done:
            done = t
        return done
