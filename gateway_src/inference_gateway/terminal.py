"""Terminal tables that never cut a figure, at any width, piped or on a terminal.

Every `igw` table (and `igw-preflight`'s) goes through `print_table`. A figure column
never wraps and is never cropped; a text column (names, descriptions, cluster lists)
wraps at spaces and after hyphens, never inside a word. When the table does not fit the
width (a terminal's, else $COLUMNS, else 80 when piped), it is split: the first
`keys` columns repeat in front of each group of the others that fits, as a wide
data frame prints; when not even one column fits beside the keys, each row prints as a
`header: value` list. Titles and legends are paragraphs that wrap at word boundaries.
Progress goes to stderr, one line per update (`progress_line`), so it never runs into
a table on stdout or into the next line of a log.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Column", "print_table", "progress_line"]

GAP = 2  # spaces between two columns


@dataclass(frozen=True)
class Column:
    """`header` may hold a line break ("TTFT\\np99"); `text` columns are left-aligned and
    wrap at word boundaries unless `wrap` is off (names such as a region); the others
    are figures that never wrap (right-aligned)."""

    header: str
    text: bool = False
    wrap: bool = True


def _plain(cell: str) -> str:
    return Text.from_markup(cell).plain


def _wrap(cell: str, width: int) -> str:
    """A text cell wrapped at spaces and after hyphens, never inside a word."""
    return "\n".join(
        textwrap.fill(line, width, break_long_words=False, break_on_hyphens=True) or line
        for line in cell.splitlines() or [""]
    )


def _natural(cells: Sequence[str]) -> int:
    return max((len(line) for c in cells for line in _plain(c).splitlines()), default=0)


def _least(column: Column, cells: Sequence[str]) -> int:
    """A figure column's natural width; a text column's longest unbreakable piece."""
    texts = [column.header, *cells]
    if not (column.text and column.wrap):
        return _natural(texts)
    pieces = [p for c in texts for p in _wrap(_plain(c), 1).splitlines()]
    return max((len(p) for p in pieces), default=0)


def _fit(least: Sequence[int], natural: Sequence[int], width: int) -> list[int] | None:
    """Widths for one table: natural, text columns narrowed (widest first) down to their
    least until the table fits `width`; None when it cannot."""
    widths = list(natural)
    room = width - GAP * (len(widths) - 1)
    while sum(widths) > room:
        shrinkable = [i for i, w in enumerate(widths) if w > least[i]]
        if not shrinkable:
            return None
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] = max(least[widest], widths[widest] - (sum(widths) - room))
    return widths


def _groups(
    least: Sequence[int], natural: Sequence[int], keys: int, width: int
) -> list[tuple[list[int], list[int]]] | None:
    """(column indexes, widths) per printed table: all columns in one when they fit,
    else the keys in front of each of as few, as even, groups of the others as fit;
    None when the keys and one other column are already too wide."""
    others = list(range(keys, len(least)))
    for count in range(1, len(others) + 1):
        size = -(-len(others) // count)  # ceil: groups as even as their order allows
        groups = [[*range(keys), *others[i : i + size]] for i in range(0, len(others), size)]
        fitted = [_fit([least[j] for j in g], [natural[j] for j in g], width) for g in groups]
        if all(f is not None for f in fitted):
            return [(g, f) for g, f in zip(groups, fitted, strict=True) if f is not None]
    return None


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    legend: str | None = None,
    keys: int = 1,
    sections: bool = False,
) -> None:
    """Print `rows` (cells as strings; rich markup allowed) under `title`, whole."""
    cells = [[r[i] for r in rows] for i in range(len(columns))]
    least = [_least(c, cells[i]) for i, c in enumerate(columns)]
    natural = [_natural([c.header, *cells[i]]) for i, c in enumerate(columns)]
    console.print(Text(title, style="bold"))
    groups = _groups(least, natural, keys, console.width)
    if groups is None:
        _print_vertical(console, columns, rows, keys)
    for n, (group, widths) in enumerate(groups or []):
        if n:
            console.print()
        table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False, show_edge=False)
        for i, w in zip(group, widths, strict=True):
            column = columns[i]
            wraps = column.text and column.wrap
            header = _wrap(column.header, w) if wraps else column.header
            justify: Literal["left", "right"] = "left" if column.text else "right"
            table.add_column(header, justify=justify, no_wrap=True, width=w)
        for row in rows:
            table.add_row(
                *(
                    _wrap(row[i], w)
                    if columns[i].text and columns[i].wrap and "[" not in row[i]
                    else row[i]
                    for i, w in zip(group, widths, strict=True)
                ),
                end_section=sections,
            )
        console.print(table)
    if legend:
        console.print()
        console.print(Text(legend))


def _print_vertical(
    console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], keys: int
) -> None:
    """One block per row: its keys, then `header: value` lines (a narrow terminal)."""
    for n, row in enumerate(rows):
        if n:
            console.print()
        console.print(Text.from_markup(" ".join(row[:keys]), style="bold"))
        for column, cell in zip(columns[keys:], row[keys:], strict=True):
            header = " ".join(column.header.split())
            console.print(Text.assemble(f"  {header}: ", Text.from_markup(cell)))


def progress_line(message: str) -> None:
    """One progress update on stderr, on a line of its own."""
    print(message, file=sys.stderr, flush=True)
