"""Error types of the STeP language.

Every error a user can cause names the operator kind, the node and, where it
applies, the port, so that a message reads like
``StepShapeError: Accum 'down_proj': rank 2 > input rank 1 (input 'in' has shape [B, 16])``.
All of them derive from :class:`StepError` (itself a ``ValueError``), so a
caller can catch one type.
"""

from __future__ import annotations


class StepError(ValueError):
    """Base class of all errors raised for a malformed STeP program."""


class StepShapeError(StepError):
    """A stream's rank or shape does not fit what an operator needs."""


class StepTypeError(StepError):
    """A stream's element type does not fit what an operator or function needs."""


class StepGraphError(StepError):
    """The graph's structure is wrong: dangling input, double consumption, bad cycle."""


class StepRuntimeError(StepError):
    """The interpreter found tokens that contradict the declared program."""


class StepDeadlockError(StepRuntimeError):
    """No process can make progress but the program has not finished.

    Attributes
    ----------
    blocked : list of str
        One entry per stuck process: ``"Kind 'node' waits on producer.port, ..."``.
    pending : dict of str to int
        Channels that still hold undelivered tokens, with their counts.
    """

    def __init__(self, message: str, blocked: list[str], pending: dict[str, int]):
        super().__init__(message)
        self.blocked = blocked
        self.pending = pending


class InputError(StepError):
    """A program's inputs are missing or do not fit it: a tensor, a source's stream data or a binding; a graph
    file or its inputs that cannot be read."""


class OutputError(StepError):
    """An output path that cannot be written, or whose writing would overwrite files the user made."""


def read_text(path, what: str, error=None) -> str:
    """The text of file ``path``, or ``error`` (a :class:`StepError` class; default :class:`StepError`)
    saying ``cannot read <what> '<path>': <reason>`` (missing, a folder, not text)."""
    from pathlib import Path
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise (error or StepError)(f"cannot read {what} {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") \
            from None


def check_writable(path, option: str) -> None:
    """An :class:`OutputError` for an output file that cannot be written (a folder, a missing or read-only
    folder), raised before any work; ``-`` (stdout) and None pass. ``option`` names the argument."""
    import os
    from pathlib import Path
    if path is None or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{option} {path}: is a folder; expected a file name")
    parent = p.parent
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{option} {path}: the folder {parent} is not writable")


def where(kind: str, name: str, port: str | None = None) -> str:
    """The ``Kind 'name'`` (or ``Kind 'name' port 'p'``) prefix of an error message."""
    return f"{kind} '{name}'" + (f" port '{port}'" if port else "")
