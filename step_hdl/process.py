"""Process-side helpers shared by every operator's token-level behaviour.

Operators run as Python generators (one process per node) connected by
channels. A process yields ``None`` to let others run (after every token it
writes, so that producers interleave like concurrent hardware) or a tuple of
channels it is blocked on. :class:`Ports` wraps a node's channels with the
blocking reads the operators need; :class:`Emitter` writes an output stream and
applies the spec's rule that where several dimensions end at once only the
highest stop is sent.
"""

from __future__ import annotations

from collections import deque

from .errors import StepRuntimeError, where
from .token import DONE, Token, data, stop


class Channel:
    """An unbounded FIFO between one producer port and one consumer port."""

    __slots__ = ("name", "queue", "log", "record")

    def __init__(self, name: str, record: bool = True):
        self.name = name
        self.queue: deque[Token] = deque()
        self.log: list[Token] = []
        self.record = record

    def push(self, tok: Token) -> None:
        self.queue.append(tok)
        if self.record:
            self.log.append(tok)


class Ports:
    """A node's input and output channels, with blocking reads for generators."""

    def __init__(self, node, ins: dict[str, Channel], outs: dict[str, Channel], ctx):
        self.node = node
        self.ins = ins
        self.outs = outs
        self.ctx = ctx

    def fail(self, message: str, port: str | None = None) -> StepRuntimeError:
        return StepRuntimeError(f"{where(self.node.kind, self.node.name, port)}: {message}")

    def get(self, port: str):
        ch = self.ins[port]
        while not ch.queue:
            yield (ch,)
        return ch.queue.popleft()

    def peek(self, port: str):
        ch = self.ins[port]
        while not ch.queue:
            yield (ch,)
        return ch.queue[0]

    def get_data(self, port: str):
        """Next data or done token, skipping stop tokens (selector and address streams)."""
        while True:
            tok = yield from self.get(port)
            if tok.stop == 0:
                return tok

    def put(self, port: str, tok: Token):
        self.outs[port].push(tok)
        yield None

    def put_all(self, ports: list[str], tok: Token):
        """The same token to several outputs at once (a broadcast or multi-hot copy)."""
        for port in ports:
            self.outs[port].push(tok)
        yield None

    def wait_any(self, ports: list[str]):
        """Block until one of ``ports`` holds a token; return one (lowest index, or random if seeded)."""
        chans = [self.ins[p] for p in ports]
        while True:
            ready = [p for p, ch in zip(ports, chans) if ch.queue]
            if ready:
                return ready[0] if self.ctx.rng is None else self.ctx.rng.choice(ready)
            yield tuple(chans)

    def read_chunk(self, port: str, p: int):
        """Read one rank-``p`` chunk: its tokens, the closing stop (level >= p) last.

        For ``p == 0`` a chunk is one data token; stop tokens before it are
        skipped. Returns ``None`` when the stream's done token comes first (the
        done token is consumed).
        """
        while True:
            tok = yield from self.peek(port)
            if tok.done:
                yield from self.get(port)
                return None
            if p == 0 and tok.stop:
                yield from self.get(port)
                continue
            break
        if p == 0:
            return [(yield from self.get(port))]
        chunk = []
        while True:
            tok = yield from self.get(port)
            if tok.done:
                raise self.fail(f"stream ended inside a rank-{p} chunk (no closing stop S{p})", port)
            chunk.append(tok)
            if tok.stop >= p:
                return chunk

    def expect_done(self, port: str):
        tok = yield from self.get(port)
        if not tok.done:
            raise self.fail(f"expected the end of the stream, got {tok!r}", port)


class Emitter:
    """Writes one output stream, merging a block's closing stop with an outer stop.

    ``end_block(q)`` marks the end of a sub-stream with ``S_q``; if the very
    next event is the end of an enclosing level (an outer stop or block end
    ``S_k`` with ``k > q``), only ``S_k`` is sent. A second end at the same or a
    lower level is a new, empty element and is sent separately.
    """

    def __init__(self, ports: Ports, port: str, driver: str | None = None):
        self.ports = ports
        self.port = port
        self.pending = 0
        # With a rank-0 driving input no outer stop can follow an element, so a
        # block end is sent at once instead of waiting for the next input token
        # (waiting would deadlock a feedback loop that needs this token first).
        self.eager = driver is not None and ports.node.inputs[driver].type.rank == 0

    def _flush(self):
        if self.pending:
            k, self.pending = self.pending, 0
            yield from self.ports.put(self.port, stop(k))

    def element_done(self):
        """The driving input's element is fully expanded."""
        if self.eager:
            yield from self._flush()

    def data(self, payload):
        yield from self._flush()
        yield from self.ports.put(self.port, data(payload))

    def token(self, tok: Token):
        if tok.done:
            yield from self.done()
        elif tok.stop:
            yield from self.stop(tok.stop)
        else:
            yield from self.data(tok.payload)

    def end_block(self, q: int):
        """A sub-stream ended; its closing ``S_q`` may merge with an outer stop."""
        if q:
            if self.pending >= q:  # the previous block ended already: this one is empty
                yield from self._flush()
            self.pending = q

    def stop(self, k: int):
        if self.pending and self.pending < k:
            self.pending = k
        else:
            yield from self._flush()
            self.pending = k
        yield from self._flush()

    def done(self):
        yield from self._flush()
        yield from self.ports.put(self.port, DONE)


def emit_block(em: Emitter, nested, q: int):
    """Emit a rank-(q-1) block (``q`` nested levels, or one payload if ``q == 0``) ending in ``S_q``."""
    if q == 0:
        yield from em.data(nested)
        return
    yield from _emit_level(em, nested, q)


def _emit_level(em: Emitter, items, k: int):
    # the block ends with S_k; each inner item ends with S_(k-1), merged by end_block.
    if k == 1:
        for x in items:
            yield from em.data(x)
        yield from em.end_block(1)
        return
    for item in items:
        yield from _emit_level(em, item, k - 1)   # each item ends with S_(k-1) ...
    yield from em.end_block(k)                    # ... the last one merges into S_k
