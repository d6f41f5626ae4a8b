"""The sections a result is drawn as, independent of the output: row tables whose cells carry a
display text and a sort key, charts as plain data, the CSV's table of raw values, and ``View``,
the record of one result kind's sections (views/__init__.py keeps one per kind).

Renderers (terminal, CSV, JSON, HTML, PNG) take these and draw them; they never ask which kind
of result they were given.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from layerscope.core.phases import STEP_PHASES

# Tableau 10: readable on white, distinct in print
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]
PHASE_COLORS = {p.name: p.color for p in STEP_PHASES}


# ---- tables ------------------------------------------------------------------------------
# A row table is declared once; HTML, the notebook and the terminal draw the same declaration.
# What only a terminal needs (it has a width and no sorting) is declared on the column or the
# cell as a hint that the other renderers ignore.
@dataclass(frozen=True)
class Column:
    """One column of a ``RowTable``.

    numeric   right-aligned (every renderer); its cells sort by number (HTML)
    priority  what a terminal too narrow for the table leaves out: 0 is always shown; 1, 2, 3
              are less and less essential. While the table is wider than the terminal, one
              column is left out: of the highest level, the rightmost first (never one of
              level 0); what was left out is named under the table
    min_width terminal: at least this many characters wide
    max_chars terminal: a longer text is cut to this many characters, its last one '…'
    wrap      terminal: a text too long for the width goes onto more lines, never cut
              (otherwise a cell keeps to one line); a text of up to WRAP_WHOLE characters is
              kept on one line before a column of priority > 0 is left out
    shrink    terminal: the column takes what the others leave of the width (at least
              min_width, else SHRINK_FLOOR characters), its texts cut with '…' (a CUDA
              kernel's name runs to hundreds of characters; the figures beside it stay whole)
    optional  terminal: left out when every cell of the column is empty
    terminal  False: the terminal leaves the column out, its layout writing these texts in
              full under the table (compare's explanations)
    """
    label: str
    numeric: bool = False
    priority: int = 0
    min_width: int | None = None
    max_chars: int | None = None
    wrap: bool = False
    shrink: bool = False
    optional: bool = False
    terminal: bool = True


SHRINK_FLOOR = 12  # the narrowest a shrinking column gets without a min_width of its own
WRAP_WHOLE = 40  # a wrapping column's texts this short stay whole before columns are left out


@dataclass
class Cell:
    text: str
    sort: Any = None  # number or string; None sorts last
    indent: int = 0  # terminal: the text is indented by this many levels (a tree's depth)
    style: str | None = None  # terminal: a rich style for this cell (e.g. "red" for an error)


@dataclass
class RowTable:
    """A table of cells under declared columns. ``columns`` may be given as (label, numeric)
    pairs; they are read as ``Column``s."""
    id: str
    title: str
    columns: list[Column]
    rows: list[list[Cell]]
    foot: list[str] = field(default_factory=list)  # a totals row, never sorted
    hot: list[bool] = field(default_factory=list)  # per row: emphasise
    caption: str = ""  # terminal: a line under the table (what its emphasis means)
    emphasis: str = "bold red"  # terminal: the rich style of a hot row
    title_left: bool = False  # terminal: the title starts at the left edge (else centred)

    def __post_init__(self):
        self.columns = [c if isinstance(c, Column) else Column(*c) for c in self.columns]


@dataclass
class Lines:
    """Lines of text (a table's legend, key figures written out, notes), drawn as they are;
    ``wrap=False``: a line longer than the width runs on (a listing), never wrapped; ``style``:
    how they are drawn in the terminal (e.g. "bold")."""
    lines: list[str]
    wrap: bool = True
    style: str = ""  # a rich style for every line


@dataclass
class Facts:
    """Key figures as a name column (bold) and a value column, without rules, under a title."""
    title: str
    pairs: list[tuple[str, str]]


@dataclass
class Lead:
    """The answer first: one headline sentence (views/lead.py) and the advice rules that fired.
    The HTML report draws it before everything else in the result's section (the headline,
    ``table``, ``note``); the terminal at the end of the layout (the headline, ``lines``: one
    per rule, ``note``)."""
    headline: str
    table: RowTable | None = None  # HTML, notebook: one row per rule that fired
    lines: list[str] = field(default_factory=list)  # terminal: one line per rule that fired
    note: str = ""  # e.g. that no rule fired


@dataclass
class DataTable:
    """Raw values under column names: what the CSV writes (None as an empty field)."""
    columns: list[str]
    rows: list[list[Any]]


# ---- charts ------------------------------------------------------------------------------
@dataclass
class Point:
    x: float  # bars / stacked: the category index
    y: float
    tip: str = ""
    lo: float | None = None  # whisker (e.g. p10)
    hi: float | None = None  # (p90)
    hot: bool = False
    label: str | None = None  # written beside a hot mark


@dataclass
class Series:
    name: str
    color: str
    points: list[Point] = field(default_factory=list)
    dashed: bool = False


CATEGORY_KINDS = ("bars", "stacked")  # charts whose x axis names categories by index


@dataclass
class Chart:
    id: str
    kind: str  # bars | stacked | lines | scatter: each renderer has one drawer per kind
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    categories: list[str] = field(default_factory=list)  # bars/stacked: x labels by index
    log_x: bool = False
    log_y: bool = False
    x_ticks: list[float] | None = None  # lines: ticks at these x values
    guides: list[Series] = field(default_factory=list)  # lines without markers (ceilings)
    note: str | None = None  # under the title

    @property
    def categorical(self) -> bool:
        """Whether the x axis names categories (bars) rather than numbers (lines, points)."""
        return self.kind in CATEGORY_KINDS


# ---- a result kind's view ----------------------------------------------------------------
def _none(result) -> list:
    return []


def noise_warnings(result) -> list[str]:
    """The warnings of a timed result's ``noise`` section (drawn above its key figures)."""
    return list((getattr(result, "noise", None) or {}).get("warnings") or [])


def result_name(result) -> str:
    """What a saved copy of the result is named after (its model, else its recipe)."""
    return f"{getattr(result, 'model', None) or getattr(result, 'recipe', 'result')}"


@dataclass(frozen=True)
class View:
    """What one result kind shows. Every renderer draws these and nothing else.

    heading   result -> (title, one-line description of the settings)
    terminal  (result, **options) -> [RowTable | Lines | Facts]: the terminal's sections in
              order (renderers/terminal.py draws them); None: the heading, the warnings, the
              row tables and the key figures, in that order
    facts     result -> [(name, value)]: key figures, titled ``facts_title``
    tables    result -> [RowTable] (HTML report, notebook)
    charts    result -> [Chart] (HTML report's SVG, --plot's PNG)
    csv       result -> DataTable: the CSV's raw values (every kind has one)
    lead      result -> Lead | None: the answer first (a timed result's headline and advice);
              every renderer but the CSV and JSON draws it
    """
    heading: Callable[[Any], tuple[str, str]]
    terminal: Callable[..., list] | None = None
    facts: Callable[[Any], list[tuple[str, str]]] = _none
    tables: Callable[[Any], list[RowTable]] = _none
    charts: Callable[[Any], list[Chart]] = _none
    csv: Callable[[Any], DataTable] | None = None
    warnings: Callable[[Any], list[str]] = noise_warnings
    facts_title: str = "Summary"
    environment: Callable[[Any], dict | None] = lambda r: getattr(r, "environment", None)
    name: Callable[[Any], str] = result_name
    lead: Callable[[Any], Lead | None] = lambda r: None
