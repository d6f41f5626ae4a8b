"""Where chart labels go, as pure arithmetic on boxes (pixels, y down), so the SVG and the PNG
place them the same way and tests can check that no two labels overlap.

- ``axis_labels``: one label per bar under the x axis; horizontal when every label fits its
  band, else rotated 90°; long names shortened in the middle (the leaf name at the end matters);
  when even the smallest font's line is taller than a band, every k-th label is kept, highlighted
  bars always, and no kept label touches another.
- ``place_labels``: names beside scatter points (roofline hot layers); greedy, in order of y,
  each label is nudged down / up until its box is clear of the ones placed before it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CHAR_EM = 0.56  # average glyph width / font size (sans-serif, mixed case and digits)
LINE_EM = 1.2  # line height / font size


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:  # touching edges do not overlap
        return (self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1
                and other.y0 < self.y1)

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    def shifted(self, dx: float = 0.0, dy: float = 0.0) -> Box:
        return Box(self.x0 + dx, self.y0 + dy, self.x1 + dx, self.y1 + dy)


def text_width(text: str, font: float) -> float:
    return len(text) * font * CHAR_EM


def shorten_middle(text: str, max_chars: int) -> str:
    """'layer3.2.conv2' with 10 -> 'lay….conv2': the start and (longer) the end, '…' between."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - 1, 2)
    tail = (keep + 1) // 2 + keep // 4  # the end gets about 3/4 of the room
    head = max(keep - tail, 0)
    return text[:head] + "…" + text[len(text) - tail:]


def any_overlap(boxes) -> bool:
    boxes = [b for b in boxes if b is not None]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@dataclass
class AxisLabels:
    texts: list[str | None]  # per bar: the label drawn, or None (thinned out)
    rotation: int  # 0 or 90 (reading upwards)
    font: float
    step: int  # 1: every bar labelled; k: every k-th (and every highlighted one)
    boxes: list[Box | None]  # per bar, below an axis at y = 0 with bar centres at (i + .5)·band
    hot: list[bool]  # per bar: highlighted (always named)

    @property
    def thinned(self) -> bool:
        return any(t is None for t in self.texts)


def axis_labels(names: list[str], hot: list[bool], band: float, fonts=(11.0, 10.0, 9.0, 8.0),
                max_chars: int = 24, gap: float = 1.0) -> AxisLabels:
    """Labels under ``len(names)`` bars of width ``band`` each, at the largest of ``fonts``
    that fits; ``gap`` space kept between neighbouring labels."""
    texts = [shorten_middle(n, max_chars) for n in names]
    longest = max((text_width(t, fonts[0]) for t in texts), default=0.0)
    if longest + gap <= band:  # all fit side by side at the largest font
        return _keep(texts, hot, band, fonts[0], 0, 1, gap)
    for font in fonts:
        if font * LINE_EM + gap <= band:
            return _keep(texts, hot, band, font, 90, 1, gap)
    font = fonts[-1]
    step = math.ceil((font * LINE_EM + gap) / band)
    return _keep(texts, hot, band, font, 90, step, gap)


def _label_box(i: int, text: str, band: float, font: float, rotation: int) -> Box:
    cx = (i + 0.5) * band
    if rotation:  # vertical: a line's height wide, the text's width tall
        half = font * LINE_EM / 2
        return Box(cx - half, 0.0, cx + half, text_width(text, font))
    half = text_width(text, font) / 2
    return Box(cx - half, 0.0, cx + half, font * LINE_EM)


def _keep(texts, hot, band, font, rotation, step, gap) -> AxisLabels:
    n = len(texts)
    boxes: list[Box | None] = [None] * n
    # highlighted bars first, then every step-th: a kept label never overlaps an earlier one
    order = [i for i in range(n) if i < len(hot) and hot[i]] + \
            [i for i in range(0, n, step) if not (i < len(hot) and hot[i])]
    kept: list[Box] = []
    for i in order:
        b = _label_box(i, texts[i], band, font, rotation)
        padded = Box(b.x0 - gap / 2, b.y0, b.x1 + gap / 2, b.y1)
        if any(padded.overlaps(k) for k in kept):
            continue
        kept.append(padded)
        boxes[i] = b
    shown = [t if boxes[i] is not None else None for i, t in enumerate(texts)]
    return AxisLabels(shown, rotation, font, step, boxes,
                      [i < len(hot) and bool(hot[i]) for i in range(n)])


def place_labels(anchors: list[tuple[float, float]], sizes: list[tuple[float, float]],
                 dx: float = 8.0, keep_clear: list[Box] | None = None,
                 x_max: float | None = None) -> list[Box]:
    """Boxes for labels of ``sizes`` (w, h) written right of ``anchors`` (x, y), vertically
    centred where possible; in order of y each is moved down / up by whole label heights until
    it overlaps no label placed before it (and none of ``keep_clear``). A label that would
    end right of ``x_max`` is written left of its point instead. Pure; pixels, y down.

    Finds a free place: n placed boxes of height ≤ h block at most 2n of the offsets 0, ±h,
    ±2h… and 2n + 3 of them are tried."""
    out: list[Box | None] = [None] * len(anchors)
    placed: list[Box] = list(keep_clear or [])
    for i in sorted(range(len(anchors)), key=lambda j: (anchors[j][1], anchors[j][0])):
        (x, y), (w, h) = anchors[i], sizes[i]
        base = Box(x + dx, y - h / 2, x + dx + w, y + h / 2)
        if x_max is not None and base.x1 > x_max:
            base = base.shifted(dx=-(2 * dx + w))
        step = max(h, 1.0)
        for k in range(2 * len(placed) + 3):
            off = (k + 1) // 2 * step * (1 if k % 2 else -1) if k else 0.0
            cand = base.shifted(dy=off)
            if not any(cand.overlaps(p) for p in placed):
                break
        out[i] = cand
        placed.append(cand)
    return out  # type: ignore[return-value]
