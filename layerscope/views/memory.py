"""layerscope memory (``MemoryReport``): the live set at the peak by module and kind (each row's
share of the peak), the totals per kind, and the live bytes over the pass or step with its
phases and the peak marked."""
from __future__ import annotations

from layerscope.core.units import si
from layerscope.views.common import PHASE_LABELS, cell, pct
from layerscope.views.sections import (
    PALETTE,
    PHASE_COLORS,
    Cell,
    Chart,
    Column,
    DataTable,
    Facts,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)

TERMINAL_ROWS = 25  # the terminal's module x kind table shows this many rows (the others: CSV)
CHART_POINTS = 1500  # the timeline chart keeps at most this many points (each bucket's highest)
TOP_LEVEL = "(top level)"


def nbytes(n: int | None) -> str:
    """'2.33 MB (2,326,536 B)' for large figures, '512 B' for small ones."""
    if n is None:
        return "-"
    return f"{si(n)}B ({n:,} B)" if abs(n) >= 1000 else f"{n:,} B"


def _short(n: int) -> str:
    return f"{si(n)}B" if abs(n) >= 1000 else f"{n} B"


def _module(name: str) -> str:
    return name or TOP_LEVEL


def _phase(name: str) -> str:
    return PHASE_LABELS.get(name, name.replace("_", " ").capitalize())


def heading(r) -> tuple[str, str]:
    parts = [r.mode]
    if r.batch_size is not None:
        parts.append(f"batch {r.batch_size}")
    if r.optimizer:
        parts.append(f"optimizer {r.optimizer}")
    rec = r.reconciliation
    if rec is not None and rec.static_peak_bytes is None:  # a script's own step
        parts.append("measured (the script's own step)")
    else:
        parts.append("static (fake tensors)" + (f" + measured on {_where(r)}" if rec else ""))
    return f"{r.model} — memory", " · ".join(parts)


def _where(r) -> str:
    """Where the measured step ran: CPU, or CUDA (``--device cuda``)."""
    return "CUDA" if (r.settings or {}).get("device") == "cuda" else "CPU"


def facts(r) -> list[tuple[str, str]]:
    out = [("Peak", f"{nbytes(r.peak_bytes)} in {_phase(r.peak_phase)} (event {r.peak_t} of "
                    f"{len(r.timeline)})")]
    per_phase: dict[str, int] = {}
    for p in r.timeline:
        if p.phase != "start":
            per_phase[p.phase] = max(per_phase.get(p.phase, 0), p.bytes)
    if len(per_phase) > 1:
        out.append(("Highest per phase", " · ".join(f"{_phase(k)} {_short(v)}"
                                                      for k, v in per_phase.items())))
    out += [(k.replace("_", " ").capitalize(), f"{_short(v)} ({pct(v / r.peak_bytes)})")
            for k, v in r.by_kind().items() if r.peak_bytes]
    rec = r.reconciliation
    if rec is not None:
        if rec.static_peak_bytes is not None:
            out.append((f"Measured peak ({_where(r)})", f"{nbytes(rec.measured_peak_bytes)}: "
                                               f"{_signed(rec.difference)} vs static"))
        if rec.rss_bytes is not None:
            out.append(("Resident set grew",
                        f"{nbytes(rec.rss_bytes)} during the measured step; unexplained "
                        f"{_signed(rec.unexplained_bytes)}"))
        if rec.allocated_peak_bytes is not None:
            out.append(("CUDA allocated / reserved peak",
                        f"{nbytes(rec.allocated_peak_bytes)} / "
                        f"{nbytes(rec.reserved_peak_bytes)}: fragmentation "
                        f"{_short(rec.fragmentation_bytes)}, unexplained "
                        f"{_signed(rec.cuda_unexplained_bytes)}"))
        if rec.driver_used_bytes is not None:
            out.append(("CUDA driver in use", nbytes(rec.driver_used_bytes)))
    out += _fit_facts(r)
    return out + [("Note", n) for n in r.notes]


def _fit_facts(r) -> list[tuple[str, str]]:
    """--fit and --fit-seq: the answer, the peaks either side of it, and how it was found."""
    out = []
    f = getattr(r, "fit", None)
    if f is not None:
        out.append((f"Fits {_short(f.budget_bytes)}",
                    f"batch size {f.max_batch_size:,} ({nbytes(f.bytes_at_max)}; "
                    + ("larger sizes not searched" if f.bytes_at_next is None else
                       f"{f.max_batch_size + 1:,} needs {nbytes(f.bytes_at_next)}") + "), "
                    f"{f.method}, {'confirmed by measured steps' if f.confirmed else 'static'}"))
        out += [("Fit note", n) for n in f.notes]
    s = getattr(r, "fit_seq", None)
    if s is not None:
        nxt = ("the position table's end" if s.bytes_at_next is None else
               f"{s.max_seq_len + 1:,} needs {nbytes(s.bytes_at_next)}")
        out.append((f"Fits {_short(s.budget_bytes)} at batch {s.batch_size:,}",
                    f"sequence length {s.max_seq_len:,} ({nbytes(s.bytes_at_max)}; {nxt}), "
                    f"{s.method}"))
        out += [("Fit note", n) for n in s.notes]
    return out


def _signed(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{'+' if n >= 0 else '-'}{_short(abs(n))}"


COLUMNS = [Column("module", max_chars=60), Column("kind"), Column("bytes", True),
           Column("share of peak", True)]


def _rows(r, limit: int | None) -> list[list[Cell]]:
    rows = r.by_module_kind if limit is None else r.by_module_kind[:limit]
    return [[Cell(_module(x.module)), Cell(x.kind), cell(x.bytes, _short(x.bytes)),
             cell(x.bytes / r.peak_bytes if r.peak_bytes else None,
                  pct(x.bytes / r.peak_bytes if r.peak_bytes else None))] for x in rows]


def _kind_table(r) -> RowTable:
    rows = [[Cell(k), cell(v, _short(v)), cell(v / r.peak_bytes if r.peak_bytes else None,
                                               pct(v / r.peak_bytes if r.peak_bytes else None))]
            for k, v in r.by_kind().items()]
    return RowTable("memory-kinds", "Alive at the peak, per kind",
                    [Column("kind"), Column("bytes", True), Column("share of peak", True)],
                    rows, foot=["total", _short(r.peak_bytes), pct(1.0 if r.peak_bytes else None)])


def tables(r) -> list[RowTable]:
    return [RowTable("memory-live", "Alive at the peak, by module and kind", COLUMNS,
                     _rows(r, None), foot=["total", "", _short(r.peak_bytes), pct(1.0)]),
            _kind_table(r)]


def terminal(r) -> list:
    shown = _rows(r, TERMINAL_ROWS)
    more = len(r.by_module_kind) - len(shown)
    caption = f"{more} smaller rows left out (the CSV, JSON and HTML have them all)" \
        if more > 0 else ""
    title = f"{r.model}: alive at the peak ({_phase(r.peak_phase)}), largest first"
    return [RowTable("memory-live", title, COLUMNS, shown, caption=caption,
                     foot=["total", "", _short(r.peak_bytes), pct(1.0)]),
            _kind_table(r), Facts("Memory", facts(r)),
            Lines([f"a module's row holds what its forward or backward created; gradients "
                   f"and optimizer states are charged to their parameter's module; "
                   f"{TOP_LEVEL}: ops outside any submodule"])]


def _thinned(points) -> list:
    """At most CHART_POINTS points: each bucket of consecutive events keeps its highest one, so
    the peak is always drawn."""
    if len(points) <= CHART_POINTS:
        return list(points)
    size = -(-len(points) // CHART_POINTS)
    return [max(points[i:i + size], key=lambda p: p.bytes)
            for i in range(0, len(points), size)]


def charts(r) -> list[Chart]:
    """The live bytes after each event, one line per phase (in its colour; each phase is one
    stretch of events), the peak marked."""
    series: list[Series] = []
    for p in _thinned(r.timeline):
        if not series or series[-1].name != _phase(p.phase):
            color = PHASE_COLORS.get(p.phase, PALETTE[len(series) % len(PALETTE)])
            series.append(Series(_phase(p.phase), color))
            if len(series) > 1:  # the lines join at the boundary
                series[-1].points.append(Point(series[-2].points[-1].x,
                                               series[-2].points[-1].y))
        hot = p.t == r.peak_t
        series[-1].points.append(Point(p.t, p.bytes / 1e6, f"{_phase(p.phase)}, event {p.t}: "
                                                           f"{_short(p.bytes)}", hot=hot,
                                       label=f"peak {_short(p.bytes)}" if hot else None))
    return [Chart("memory-timeline", "lines", f"{r.model}: live memory over the {r.mode} "
                  f"{'step' if r.mode == 'training' else 'pass'}", "event (op)", "MB",
                  series,
                  note=f"peak {_short(r.peak_bytes)} in {_phase(r.peak_phase)}")]


CSV = ["module", "kind", "bytes", "share_of_peak"]


def csv(r) -> DataTable:
    return DataTable(CSV, [[x.module, x.kind, x.bytes,
                            x.bytes / r.peak_bytes if r.peak_bytes else None]
                           for x in r.by_module_kind])


VIEW = View(heading=heading, terminal=terminal, facts=facts, tables=tables, charts=charts,
            csv=csv, facts_title="Memory")


# ---------------------------------------------------------------- the out-of-memory post-mortem
def _mb(n: int | None) -> str:
    return "? MB" if n is None else f"{n / 1e6:.1f} MB"


def _holder(pm) -> tuple[str, str, int]:
    """(kind, modules, bytes) of the largest (kind, top-level module) group of the live set:
    'layer2.*' when the group is a module's submodules."""
    groups: dict[tuple[str, str], list[str]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for row in pm.by_module_kind:
        top = row.module.split(".")[0]
        key = (row.kind, top)
        groups.setdefault(key, []).append(row.module)
        sizes[key] = sizes.get(key, 0) + row.bytes
    if not sizes:
        return "", "", 0
    (kind, top), size = max(sizes.items(), key=lambda kv: kv[1])
    members = groups[(kind, top)]
    name = members[0] if len(members) == 1 else f"{top}.*"
    return kind, _module(name), size


# what a post-mortem without --memory-limit says about the live set
UNTRACKED = ("what was alive is tracked only with --memory-limit SIZE (any size, e.g. above "
             "the machine's memory: every tensor is then counted by module and kind)")


def _failed_where(pm) -> str:
    """'in fc1 (forward, step 3)', 'in step 3', '' when nothing is known."""
    step = f"step {pm.step}" if pm.step is not None else ""
    if pm.phase == "unknown" and not pm.module:
        return f"in {step}" if step else ""
    return f"in {_module(pm.module)} ({', '.join(p for p in (pm.phase, step) if p)})"


def post_mortem_line(pm) -> str:
    """'out of memory in layer3.1.conv2 (forward, step 3) asking 25.7 MB with 498.2 MB live:
    activations of layer2.* hold 61%'; without --memory-limit, where and the bytes asked,
    and how to see what was alive."""
    if not pm.tracked:
        asked = f" asking {_mb(pm.asked_bytes)}" if pm.asked_bytes is not None else ""
        return " ".join(p for p in ("layerscope: out of memory", _failed_where(pm)) if p) + \
            f"{asked} ({pm.error}): {UNTRACKED}"
    kind, who, size = _holder(pm)
    limit = f" of a {_mb(pm.limit_bytes)} limit" if pm.limit_bytes else ""
    held = (f": {kind} of {who} hold {pct(size / pm.live_bytes)}"
            if pm.live_bytes and kind else "")
    return " ".join(p for p in ("layerscope: out of memory", _failed_where(pm),
                                f"asking {_mb(pm.asked_bytes)} with {_mb(pm.live_bytes)} "
                                f"live{limit}{held}") if p)


def post_mortem_table(pm) -> RowTable:
    """The live set at the failure, by module and kind (every row: the CSV, JSON and HTML);
    without --memory-limit no row, and the title says what is known and how to see the
    rest."""
    asked = _short(pm.asked_bytes) if pm.asked_bytes is not None else "?"
    columns = [Column("module", max_chars=60), Column("kind"), Column("bytes", True),
               Column("share of live", True)]
    if not pm.tracked:
        where = _failed_where(pm)
        return RowTable("post-mortem", f"Out of memory{' ' + where if where else ''}: "
                                       f"{pm.error} asking {asked}; {UNTRACKED}", columns, [])
    total = pm.live_bytes
    rows = [[Cell(_module(x.module)), Cell(x.kind), cell(x.bytes, _short(x.bytes)),
             cell(x.bytes / total if total else None, pct(x.bytes / total if total else None))]
            for x in pm.by_module_kind]
    step = f", step {pm.step}" if pm.step is not None else ""
    title = (f"Out of memory in {_module(pm.module)} ({pm.phase}, {pm.op or 'op unknown'}"
             f"{step}) asking {asked}"
             + (f", limit {_short(pm.limit_bytes)}" if pm.limit_bytes else "")
             + ": alive at the failure")
    return RowTable("post-mortem", title, columns, rows,
                    foot=["total", "", _short(total), pct(1.0 if total else None)])
