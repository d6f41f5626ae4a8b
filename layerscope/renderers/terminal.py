"""Any result as terminal text (rich): the sections its view lays out for the terminal
(``View.terminal``: row tables, lines of text, key figures), each kind of section drawn one way
for every result; the views import nothing of rich. A row table is the very declaration the
HTML report and the notebook draw; its columns' hints (alignment, priority, widths) say how it
fits a terminal."""
from __future__ import annotations

import io
import re

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from layerscope.views import view_for
from layerscope.views.sections import SHRINK_FLOOR, WRAP_WHOLE, Facts, Lead, Lines, RowTable

# control characters but tab and newline (C0, DEL, C1): a name in a result file is data from
# elsewhere, and an escape sequence in it (ESC [ ...) would drive the terminal (colours, cursor
# moves, the window title) instead of being read
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: str) -> str:
    """``text`` with each control character written out (ESC as ``\\x1b``): shown, never
    obeyed by the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def default_layout(view, result) -> list:
    """A view without a terminal layout of its own: what the HTML report shows, in its order."""
    title, sub = view.heading(result)
    facts = view.facts(result)
    return [Lines([title, sub] + [f"Warning: {w}" for w in view.warnings(result)]),
            *view.tables(result),
            *([Lines([f"{name}: {value}" for name, value in facts])] if facts else [])]


def sections(result, **options) -> list:
    """The sections the terminal shows for ``result``, in order: its layout, then its lead
    (the headline and the advice, the last lines a terminal leaves in view)."""
    view = view_for(result)
    out = default_layout(view, result) if view.terminal is None else \
        view.terminal(result, **options)
    lead = view.lead(result)
    return out + [lead] if lead is not None else out


def render_table(result, **options):
    """The rich renderable of ``result`` (what ``print`` in a rich console shows)."""
    return Group(*[draw(s) for s in sections(result, **options)])


def draw(section):
    """One section as a rich renderable."""
    if isinstance(section, RowTable):
        return FittedTable(section)
    if isinstance(section, Lines):
        text = plain("\n".join(section.lines))
        if not section.wrap:
            return Text(text, style=section.style, no_wrap=True, overflow="ignore")
        return Text(text, style=section.style)
    if isinstance(section, Lead):
        text = Text("Answer: ", style="bold")
        text.append(plain(section.headline))
        rest = section.lines + ([section.note] if section.note and not section.lines else [])
        return Group(Text(""), text, *[Text(plain(line)) for line in rest])
    if isinstance(section, Facts):
        grid = Table(title=Text(plain(section.title)) if section.title else None,
                     show_header=False, pad_edge=False, box=None, title_justify="left")
        grid.add_column("name", style="bold", no_wrap=True)
        grid.add_column("value")
        for name, value in section.pairs:
            grid.add_row(Text(plain(str(name)), style="bold"), Text(plain(str(value))))
        return grid
    raise TypeError(f"a terminal layout holds RowTable, Lines, Facts and Lead sections, not "
                    f"{type(section).__name__}")


def _cell_text(cell, column) -> Text:
    text = plain(cell.text)
    if column.max_chars and len(text) > column.max_chars:
        text = text[:column.max_chars - 1] + "…"
    return Text("  " * max(cell.indent, 0) + text, style=cell.style or "")


def _floor(column) -> int:
    """The narrowest a shrinking column is drawn."""
    return column.min_width or SHRINK_FLOOR


class FittedTable:
    """A ``RowTable`` drawn at the width it is given. While it is wider, its least essential
    column is left out (``Column.priority``: the highest level first, right to left within a
    level, never level 0), and the caption names what was left out; a shrinking column then
    takes what the others leave, a wrapping one goes onto more lines."""

    def __init__(self, table: RowTable):
        self.table = table

    def shown(self) -> list[int]:
        """The columns a terminal of any width may show (optional ones only when filled)."""
        t = self.table
        return [i for i, c in enumerate(t.columns) if c.terminal and (
            not c.optional or any(row[i].text for row in t.rows))]

    def build(self, keep: list[int], left_out: list[str],
              widths: dict[int, int] | None = None) -> Table:
        """The rich table of the columns ``keep`` (``widths``: the most a column may take)."""
        t = self.table
        caption = [t.caption] if t.caption else []
        if left_out:
            caption.append(f"Left out at this width: {', '.join(left_out)} (every column: "
                           "a wider terminal, or the HTML or CSV output)")
        out = Table(title=Text(plain(t.title)) if t.title else None,
                    caption=Text(plain("\n".join(caption))) if caption else None,
                    caption_justify="left", header_style="bold", pad_edge=False,
                    title_justify="left" if t.title_left else "center")
        for i in keep:
            c = t.columns[i]
            # a numeric column may wrap: its long label goes onto more lines at its spaces
            # (a number has none), so a narrow table never cuts a number to "0.…"
            out.add_column(c.label, justify="right" if c.numeric else "left",
                           no_wrap=not (c.wrap or c.numeric),
                           overflow="fold" if c.wrap else "ellipsis",
                           min_width=c.min_width, max_width=(widths or {}).get(i))
        for n, row in enumerate(t.rows):
            hot = n < len(t.hot) and t.hot[n]
            out.add_row(*[_cell_text(row[i], t.columns[i]) for i in keep],
                        style=t.emphasis if hot else None)
        if t.foot:
            out.add_section()
            out.add_row(*[Text(plain(t.foot[i]), style="bold" if i == 0 else "")
                          for i in keep])
        return out

    def natural_width(self, i: int) -> int:
        """What column ``i`` needs, its padding and rules left aside: its widest text (a
        wrapping column's long texts at their longest word, a shrinking column at its floor)."""
        t = self.table
        c = t.columns[i]
        if c.shrink:
            return max(_floor(c), cell_len(c.label))
        texts = [c.label] + ([t.foot[i]] if t.foot else [])
        for row in t.rows:
            text = _cell_text(row[i], c).plain
            if c.wrap and len(row[i].text) > WRAP_WHOLE:
                text = max(row[i].text.split() or [""], key=len)
            texts.append(text)
        return max([c.min_width or 0] + [cell_len(line) for x in texts
                                         for line in x.split("\n")])

    def __rich_console__(self, console, options):
        keep = self.shown()
        columns = self.table.columns
        natural = {i: self.natural_width(i) for i in keep}

        def needs(keep: list[int]) -> int:
            # each column is padded by a space either side but at the table's edges, and
            # ruled on both sides: 3 characters a column, less the 2 missing edge pads, plus 1
            return sum(natural[i] for i in keep) + 3 * len(keep) - 1

        # the order a too narrow terminal leaves columns out in: the highest priority level
        # first, right to left within a level; level 0 never
        order = sorted((i for i in keep if columns[i].priority > 0),
                       key=lambda i: (-columns[i].priority, -i))
        left_out: list[int] = []
        while order and needs(keep) > options.max_width:
            left_out.append(order.pop(0))
            keep = [i for i in keep if i not in left_out]
        shrink = [i for i in keep if columns[i].shrink]
        widths = {}
        if shrink:
            spare = max(options.max_width - needs(keep), 0) // len(shrink)
            widths = {i: _floor(columns[i]) + spare for i in shrink}
        yield self.build(keep, [columns[i].label for i in sorted(left_out)], widths=widths)


def to_text(result, width: int | None = None, **options) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None,
                      highlight=False, soft_wrap=False)
    console.print(render_table(result, **options))
    return buf.getvalue()
