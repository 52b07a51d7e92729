"""PNG figures for the documentation, drawn from what the benchmark scripts recorded.

matplotlib is imported lazily (it is in the ``bench`` extra, not a runtime dependency)
and always with the non-interactive Agg backend: the scripts run on machines without a
screen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REASON_COLOURS = {
    "allowed": "#2e7d32",
    "rate_limited": "#f9a825",
    "emergency_local_limit": "#ef6c00",
    "fail_closed": "#c62828",
    "circuit_open": "#6a1b9a",
    "redis_timeout": "#1565c0",
    "redis_connection_error": "#00838f",
    "redis_noscript_retry": "#4e342e",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timeline_png(
    path: Path,
    decisions: Mapping[str, Iterable[tuple[float, str]]],
    markers: Sequence[tuple[float, str]],
    *,
    bin_seconds: float = 0.25,
    title: str,
) -> None:
    """Decisions per second by reason over time, one panel per endpoint.

    ``decisions`` maps an endpoint to (seconds since T+0, reason) pairs; ``markers``
    are vertical lines (seconds, label) such as "Redis down".
    """
    plt = _pyplot()
    figure, axes = plt.subplots(len(decisions), 1, figsize=(10, 3 * len(decisions)), sharex=True)
    axes = axes if len(decisions) > 1 else [axes]
    for axis, (endpoint, seen) in zip(axes, decisions.items(), strict=True):
        bins: dict[str, Counter[int]] = {}
        for at, reason in seen:
            bins.setdefault(reason, Counter())[int(at // bin_seconds)] += 1
        last = max((max(counter) for counter in bins.values()), default=0)
        xs = [index * bin_seconds for index in range(last + 1)]
        bottom = [0.0] * len(xs)
        for reason, colour in REASON_COLOURS.items():
            if reason not in bins:
                continue
            heights = [bins[reason][index] / bin_seconds for index in range(last + 1)]
            axis.bar(
                xs,
                heights,
                width=bin_seconds,
                bottom=bottom,
                color=colour,
                label=reason,
                align="edge",
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        top = axis.get_ylim()[1] * 1.25
        axis.set_ylim(0, top)
        for index, (at, label) in enumerate(sorted(markers)):
            axis.axvline(at, color="black", linestyle="--", linewidth=0.8)
            height = top * (0.97 if index % 2 == 0 else 0.87)  # alternate: no overlaps
            axis.text(at, height, f" {label}", fontsize=8, va="top")
        axis.set_title(endpoint, fontsize=10)
        axis.set_ylabel("decisions/s")
        axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axes[-1].set_xlabel("seconds since the load started")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def latency_bars_png(path: Path, rows: Sequence[tuple[str, float, float]], *, title: str) -> None:
    """Side-by-side p50 and p99 bars (µs) for each named contender."""
    plt = _pyplot()
    names = [name for name, _, _ in rows]
    positions = range(len(rows))
    figure, axis = plt.subplots(figsize=(9, 3.6))
    axis.bar([p - 0.2 for p in positions], [p50 for _, p50, _ in rows], width=0.4, label="p50")
    axis.bar([p + 0.2 for p in positions], [p99 for _, _, p99 in rows], width=0.4, label="p99")
    axis.set_xticks(list(positions), names, fontsize=8)
    axis.set_yscale("log")  # p99s on a busy machine dwarf the medians
    axis.set_ylabel("µs per decision (log scale)")
    axis.set_title(title, fontsize=11)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def bars_png(
    path: Path,
    names: Sequence[str],
    panels: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
) -> None:
    """One horizontal bar panel per measure (log scale), the same contenders in each,
    stacked so that the figure reads at a documentation page's width: 800 pixels wide,
    shown at its own size, names and values in 11-point type."""
    plt = _pyplot()
    rows = len(names)
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(8, 0.9 + len(panels) * (0.75 + 0.36 * rows)), squeeze=False
    )
    for axis, (label, values) in zip(axes[:, 0], panels, strict=True):
        # a log scale has no zero: draw zeros as a sliver below the smallest value
        floor = min((v for v in values if v > 0), default=1.0) / 3
        positions = list(range(rows))
        axis.barh(positions, [max(v, floor) for v in values], color="#1565c0")
        axis.set_xscale("log")
        axis.set_xlim(floor / 1.5, max(values) * 12)  # room for the value labels
        axis.set_yticks(positions, names, fontsize=11)
        axis.invert_yaxis()  # the first contender on top, as in the tables
        axis.tick_params(axis="x", labelsize=10)
        for position, value in zip(positions, values, strict=True):
            shown = f"{value:,.0f}" if value >= 100 else f"{value:.2g}"
            axis.text(max(value, floor) * 1.15, position, shown, va="center", fontsize=10)
        axis.set_title(label, fontsize=12, loc="left")
    figure.suptitle(title, fontsize=13)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
