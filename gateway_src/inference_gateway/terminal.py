"""Terminal output that reads at 80 columns and in CI logs.

Every `igw` table goes through `compact_table`: no vertical rules and collapsed padding,
so eight figures and a name fit in 80 columns; numbers never wrap, names wrap after a
hyphen (`wrap_name`) rather than being cut mid-word, and abbreviated headers carry a
legend in the caption. Progress goes to stderr, one line per update (`progress_line`),
so it never runs into the table on stdout or into the next line of a log.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from typing import Literal

from rich import box
from rich.table import Table

__all__ = ["compact_table", "name_width", "progress_line", "wrap_name"]


def compact_table(
    title: str,
    columns: Sequence[str],
    *,
    caption: str | None = None,
    names: Sequence[str] = (),
    name_width: int = 16,
    text_columns: int = 1,
) -> Table:
    """A table whose first column holds names (wrapped at `name_width`, as `wrap_name`
    does for the rows, and never narrower than the longest wrapped piece of `names`) and
    the others figures that never wrap, right-aligned after the first `text_columns`."""
    table = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    for i, column in enumerate(columns):
        if i == 0:
            pieces = [p for n in names for p in wrap_name(n, name_width).splitlines()]
            widest = max([len(p) for p in pieces] + [len(column)])
            table.add_column(column, min_width=widest, max_width=max(widest, name_width))
        else:
            justify: Literal["left", "right"] = "left" if i < text_columns else "right"
            table.add_column(column, justify=justify, no_wrap=True)
    return table


def name_width(console_width: int) -> int:
    """How wide the name column may be: 16 at 80 columns, whole names from 110."""
    return 16 if console_width < 110 else 32


def wrap_name(name: str, width: int = 16) -> str:
    """`production-stack-prefixaware` → three lines broken after hyphens, never mid-word
    (a single word longer than `width` stays whole and the column folds it)."""
    return textwrap.fill(name, width, break_long_words=False) or name


def progress_line(message: str) -> None:
    """One progress update on stderr, on a line of its own."""
    print(message, file=sys.stderr, flush=True)
