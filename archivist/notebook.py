"""Helpers for the notebooks: readable tables, a progress bar that updates in place, and
the agent's graph drawn without a web service."""

import time
from collections import deque
from html import escape
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from archivist.tools.progress import CaseRan, Event

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler


def table(frame: "pd.DataFrame", decimals: int = 2, wide: int = 48) -> "Styler":
    """Style a table for reading: text left-aligned and whole (wrapped at `wide` characters),
    numbers to `decimals` places, integers as integers, and `–` where a value is missing."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    text = [c for c in frame.columns if not (is_numeric_dtype(frame[c]) or is_bool_dtype(frame[c]))]
    return (
        frame.style.format(precision=decimals, na_rep="–", thousands=",")
        .set_properties(
            subset=text,
            **{"text-align": "left", "white-space": "pre-wrap", "max-width": f"{wide}ch"},
        )
        .set_table_styles([{"selector": "th", "props": "text-align: left"}])
    )


class NotebookProgress:
    """A progress bar in a notebook's output, updated in place, with the time left.

    Give it as `on_progress` to `evaluate`: each `CaseRan` event advances it. It needs no
    widget library: the output is HTML replaced through IPython's display handle, so an
    exported notebook keeps its final state.
    """

    def __init__(self, total: int, what: str = "runs") -> None:
        from IPython.display import HTML, display

        self.total, self.what, self.done = total, what, 0
        self.started = time.monotonic()
        self._html = HTML
        self.handle = display(HTML(self._render("starting…")), display_id=True)

    def __call__(self, event: Event) -> None:
        if isinstance(event, CaseRan):
            self.done += 1
            self.handle.update(self._html(self._render(f"{event.label} · {event.case}")))

    def _render(self, last: str) -> str:
        elapsed = time.monotonic() - self.started
        timing = f"{duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            timing += f", about {duration(elapsed / self.done * (self.total - self.done))} left"
        return (
            f'<progress value="{self.done}" max="{self.total}" style="width: 24em"></progress> '
            f"<code>{self.done}/{self.total} {self.what}</code> · {escape(last)} · {timing}"
        )


def duration(seconds: float) -> str:
    """Say a duration the way a person would: `40 s`, `3 min 20 s`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def draw_graph(graph: Any, title: str = "") -> Figure:
    """Draw a compiled LangGraph graph as a static figure, without any web service.

    Nodes go in rows by their distance from the start, the end in a row of its own; dashed
    arrows are conditional edges, and an arrow back up (the agent's loop) runs beside the one
    down.
    """
    drawable = graph.get_graph()
    names = list(drawable.nodes)
    following: dict[str, list[str]] = {name: [] for name in names}
    for edge in drawable.edges:
        following[edge.source].append(edge.target)
    start = next((name for name in names if name == "__start__"), names[0])
    depth = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in following[node]:
            if target not in depth:
                depth[target] = depth[node] + 1
                queue.append(target)
    last = max((d for name, d in depth.items() if name != "__end__"), default=0) + 1
    for name in names:
        if name == "__end__" or name not in depth:
            depth[name] = last
    rows: dict[int, list[str]] = {}
    for name in names:
        rows.setdefault(depth[name], []).append(name)
    place = {
        name: (column - (len(row) - 1) / 2, -level)
        for level, row in rows.items()
        for column, name in enumerate(row)
    }
    width = max(len(row) for row in rows.values())
    figure = Figure(figsize=(max(4.0, 2.6 * width), 1.1 * len(rows) + 0.4))
    ax = figure.subplots()
    for edge in drawable.edges:
        (x0, y0), (x1, y1) = place[edge.source], place[edge.target]
        # An edge back up leaves from the box's top and enters the other's bottom, shifted
        # left so it does not cover the edge down between the same two nodes.
        up = 1 if y1 > y0 else -1
        shift = -0.22 if up == 1 else 0.0
        ax.annotate(
            "",
            xy=(x1 + shift, y1 - up * 0.18),
            xytext=(x0 + shift, y0 + up * 0.18),
            arrowprops={
                "arrowstyle": "-|>",
                "color": "0.35",
                "linestyle": "--" if edge.conditional else "-",
                "shrinkA": 0,
                "shrinkB": 0,
            },
        )
    for name, (x, y) in place.items():
        terminal = name in ("__start__", "__end__")
        ax.add_patch(
            FancyBboxPatch(
                (x - 0.42, y - 0.18),
                0.84,
                0.36,
                boxstyle="round,pad=0.02,rounding_size=0.15",
                facecolor="0.92" if terminal else "#dbe9f6",
                edgecolor="0.5" if terminal else "tab:blue",
            )
        )
        ax.text(x, y, name.strip("_"), ha="center", va="center", fontsize=10)
    ax.set_xlim(-width / 2 - 0.2, width / 2 + 0.2)
    ax.set_ylim(-len(rows) + 0.5, 0.5)
    ax.set_aspect("auto")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return figure
