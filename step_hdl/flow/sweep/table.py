"""A sweep's rows as files (CSV, JSON) and its Pareto front as a figure."""

from __future__ import annotations

import csv
import json

from step_hdl.flow.sweep.spec import SweepError


def columns(rows: list) -> list:
    """Every field of any row, in first-seen order."""
    out: dict = {}
    for r in rows:
        out.update(dict.fromkeys(r))
    return list(out)


def write_csv(rows: list, path) -> None:
    """One line per row; a field a row lacks is empty (``traceback`` is left to the JSON)."""
    cols = [c for c in columns(rows) if c != "traceback"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def write_table(result, path) -> None:
    """``path`` ending in ``.csv``: :func:`write_csv`; ``.json``: the sweep's JSON."""
    text = str(path)
    if text.endswith(".csv"):
        write_csv(result.rows, path)
    elif text.endswith(".json"):
        with open(path, "w") as f:
            json.dump(result.to_json(), f, indent=1)
    else:
        raise SweepError(f"--out {path}: expected a file name ending in .csv or .json")


def _number(row: dict, name: str):
    v = row.get(name)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def pareto(rows: list, x: str, y: str) -> list:
    """Indices of the rows on the Pareto front of ``x`` and ``y`` (both smaller is better): no other row
    is at least as good in both and better in one. Rows without both numbers are left out."""
    have = [(i, _number(r, x), _number(r, y)) for i, r in enumerate(rows)]
    have = [(i, a, b) for i, a, b in have if a is not None and b is not None]
    if not have:
        raise SweepError(f"--pareto {x},{y}: no row has numbers in both (fields: {', '.join(columns(rows))})")
    have.sort(key=lambda t: (t[1], t[2]))
    front, best = [], float("inf")
    for i, a, b in have:
        if b < best:
            front.append(i)
            best = b
    return front


def plot_pareto(rows: list, x: str, y: str, path, title: str = "") -> list:
    """Draw every row (``x`` against ``y``) and the Pareto front; returns the front's indices."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    front = pareto(rows, x, y)
    xs = [_number(r, x) for r in rows]
    ys = [_number(r, y) for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter([a for a, b in zip(xs, ys) if a is not None and b is not None],
               [b for a, b in zip(xs, ys) if a is not None and b is not None], s=12, color="0.65",
               label="points")
    fx, fy = [xs[i] for i in front], [ys[i] for i in front]
    ax.step(fx, fy, where="post", color="C3", lw=1)
    ax.scatter(fx, fy, s=30, color="C3", zorder=3, label=f"Pareto front ({len(front)})")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{len(rows)} points")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return front
