"""Inside the data loaders (a ``train`` result's ``data_loading`` section, built by
training.dataloading): one row per DataLoader, one per worker process, and the verdict with
the knob that removes the wait."""
from __future__ import annotations

from layerscope.views.common import cell
from layerscope.views.sections import Cell, Column, RowTable


def _s(x: float | None, fmt: str = ".3f") -> Cell:
    return Cell("" if x is None else format(x, fmt), x)  # empty: an optional column goes


def _loader_name(lo) -> str:
    return lo["dataset"] + ("" if lo["training"] else " (eval)")


def data_tables(r) -> list[RowTable]:
    """The loaders' table and, when they had workers, the workers' table."""
    d = getattr(r, "data_loading", None)
    if not d or not d["loaders"]:
        return []
    cols = [Column("Loader"), Column("Collate", priority=2), Column("Workers", True),
            Column("Passes", True), Column("Batches", True), Column("Wait s", True),
            Column("First batch s", True, priority=1), Column("Fetch s", True),
            Column("Collate s", True), Column("CPU s", True, priority=1),
            Column("Start-up s", True, priority=1, optional=True),
            Column("Ready", True, priority=2, optional=True),
            Column("In flight", True, priority=2, optional=True)]
    rows = [[cell(_loader_name(lo)), cell(lo["collate"]),
             Cell(str(lo["num_workers"]), lo["num_workers"]),
             Cell(str(lo["epochs"]), lo["epochs"]), Cell(str(lo["batches"]), lo["batches"]),
             _s(lo["wait_s"]), _s(lo["first_wait_s"]), _s(lo["fetch_s"]), _s(lo["collate_s"]),
             _s(lo["cpu_s"]), _s(lo.get("startup_s")),
             _s(lo.get("ready_mean"), ".1f"), _s(lo.get("in_flight_mean"), ".1f")]
            for lo in d["loaders"]]
    out = [RowTable("data_loaders", "Data loaders (wait: the main process in iter() and "
                                    "next(); fetch, collate, CPU: the work behind the batches)",
                    cols, rows)]
    workers = [(lo, w) for lo in d["loaders"] for w in lo.get("workers") or []]
    if workers:
        out.append(RowTable(
            "data_workers", "Data loader workers (seconds in each worker process)",
            [Column("Loader"), Column("Pass", True), Column("Worker", True),
             Column("Batches", True), Column("Fetch s", True), Column("Collate s", True),
             Column("CPU s", True), Column("Start-up s", True, optional=True)],
            [[cell(_loader_name(lo)), Cell(str(w["epoch"]), w["epoch"]),
              Cell(str(w["worker"]), w["worker"]), Cell(str(w["batches"]), w["batches"]),
              _s(w["fetch_s"]), _s(w["collate_s"]), _s(w["cpu_s"]), _s(w.get("startup_s"))]
             for lo, w in workers]))
    return out


def data_lines(r) -> list[str]:
    """The verdict (the first finding) and the others, one line each, for the terminal."""
    d = getattr(r, "data_loading", None)
    if not d:
        return []
    found = d["findings"]
    lines = [f"data loading: {f['message']}" for f in found[:1]]
    lines += [f"data loading (also): {f['message']}" for f in found[1:]]
    lines += [f"data loading note: {n}" for n in d.get("notes") or []]
    return lines


def data_facts(r) -> list[tuple[str, str]]:
    """The verdict as facts: the finding, and its knob with the value suggested."""
    d = getattr(r, "data_loading", None)
    if not d or not d["findings"]:
        return []
    out = [("Data loading", f["message"]) for f in d["findings"]]
    knobs = [f"{f['knob']}={f['value']}" for f in d["findings"] if f.get("knob")]
    if knobs:
        out.append(("Data loader knobs", ", ".join(knobs)))
    return out
