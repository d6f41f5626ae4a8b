"""train (``TrainReport``): time per phase (data, host-to-device, forward, loss, backward,
optimizer), per epoch and per rank, and the training curves. The ablate and loop views
(:mod:`.ablate`, :mod:`.loop`) and the phase table they share with it (:mod:`.phase_table`) are
modules of their own."""
from __future__ import annotations

from dataclasses import replace

from layerscope.core.units import si
from layerscope.training.ranks import waits_measured
from layerscope.views.ablate import (
    ABLATE,
    ablate_charts,
    ablate_csv,
    ablate_facts,
    ablate_heading,
    ablate_tables,
    ablate_terminal,
    variant_label,
)
from layerscope.views.common import (
    PHASE_LABELS,
    cell,
    efficiency_facts,
    efficiency_lines,
    median,
    ms,
    num,
    pct,
    phase_stack,
)
from layerscope.views.dataloading import data_facts, data_lines, data_tables
from layerscope.views.kernels import kernel_lines, kernel_tables
from layerscope.views.lead import lead_section
from layerscope.views.loop import (
    LOOP,
    LOOP_TOP_LAYERS,
    loop_charts,
    loop_csv,
    loop_facts,
    loop_heading,
    loop_tables,
    loop_terminal,
)
from layerscope.views.memory import post_mortem_line, post_mortem_table
from layerscope.views.phase_table import (
    COMMUNICATION_LABEL,
    PHASE_CSV,
    RANK_PHASE_LABELS,
    ordered,
    phase_csv_rows,
    phase_label,
    phase_table,
    phase_title,
)
from layerscope.views.sections import (
    PALETTE,
    Cell,
    Chart,
    DataTable,
    Lines,
    Point,
    RowTable,
    Series,
    View,
)

# train's view; the ablate and loop views and the shared phase table, importable from here as
# before
__all__ = ["ABLATE", "BACKWARD_WITH_ALLREDUCE", "COMMUNICATION_LABEL", "LOOP", "LOOP_TOP_LAYERS",
           "PHASE_CSV", "RANK_PHASE_LABELS", "STRAGGLER_NOT_MEASURED", "TRAIN", "TRANSIENT_WHAT",
           "ablate_charts", "ablate_csv", "ablate_facts", "ablate_heading", "ablate_tables",
           "ablate_terminal", "communication_line", "epoch_line", "job_line", "loop_charts",
           "loop_csv", "loop_facts", "loop_heading", "loop_tables", "loop_terminal",
           "phase_csv_rows", "phase_label", "phase_labels", "phase_table", "phase_title",
           "ordered", "ranks_terminal", "straggler_line", "train_charts", "train_csv",
           "train_facts", "train_heading", "train_tables", "train_terminal", "variant_label"]

# a watched script in a process group of several: DDP's all-reduce runs inside backward
BACKWARD_WITH_ALLREDUCE = "Backward (incl. all-reduce)"
STRAGGLER_NOT_MEASURED = ("not measured (the ranks' waits for each other are not timed: a "
                          "rank's step holds its wait inside backward's all-reduce)")


def phase_labels(result, base: dict[str, str]) -> dict[str, str]:
    """``base`` as ``result``'s tables label it. Only ``train --nproc-per-node`` times
    communication apart (its backward is compute); a watched script's backward is the whole
    backward, and in a process group of several it holds the gradient all-reduce."""
    if not getattr(result, "script", None):
        return base
    return {**base, "backward": BACKWARD_WITH_ALLREDUCE if _in_group(result)
            else PHASE_LABELS["backward"]}


def _in_group(result) -> bool:
    """A watched script that formed a process group of several processes."""
    return ((getattr(result, "process_group", None) or {}).get("world_size") or 1) > 1


def _who(result) -> str:
    """What a report calls its processes: ranks, unless they trained independently (a watched
    script's processes that formed no process group)."""
    if getattr(result, "script", None) and result.ranks and not _in_group(result):
        return "process"
    return "rank"


def _straggler_text(result) -> str | None:
    """The straggler, or why none is named: a watched script's ranks' waits are not measured;
    independent processes (no process group) have none to wait for."""
    if result.straggler:
        return straggler_line(result.straggler)
    if waits_measured(result.ranks):
        return None
    return STRAGGLER_NOT_MEASURED if _in_group(result) else None


def _rank_phases(result) -> dict[str, str]:
    """The per-rank tables' columns: the phases some rank measured, as ``result`` labels
    them (a watched script measures no wait and no communication)."""
    labels = phase_labels(result, {**RANK_PHASE_LABELS, "communication": "Communication"})
    return {p: label for p, label in labels.items()
            if any(p in e["phases"] for e in result.ranks)}


# ---- headings and key figures -----------------------------------------------------------
def train_heading(result) -> tuple[str, str]:
    b = result.breakdown
    script = getattr(result, "script", None)
    if script:  # a watched script: what ran, as it was called
        world = getattr(result, "world_size", None)
        rank = f" · {_who(result)} {result.rank} of {world}" if world else ""
        return (f"{' '.join([script['name'], *script['argv']])} — training",
                f"{b['steps']} measured steps · device {result.config.get('device')}{rank}")
    return (f"{result.recipe} — training",
            f"{len(result.epochs)} epoch(s) · {b['steps']} measured steps · "
            f"device {result.config.get('device')} · run directory {result.run_dir}")


def _samples(b: dict) -> str:
    """'512 samples', or 'samples not seen' where no step saw a batch (no throughput)."""
    return f"{b['samples']} samples" if b.get("samples") else "samples not seen"


def _throughput(b: dict) -> str:
    if b.get("throughput_per_s") is None and not b.get("samples"):
        return "samples not seen"
    return f"{num(b.get('throughput_per_s'), '.1f')} samples/s"


def train_facts(result) -> list[tuple[str, str]]:
    b = result.breakdown
    tokens = b.get("tokens")
    out = [("Measured steps", f"{b['steps']} ({_samples(b)}"
                              + (f", {tokens} tokens)" if tokens else ")")),
           ("Step time", f"{ms(b['wall_s'] / b['steps'] if b['steps'] else None, 2)} ms "
                         f"(median {ms(median(result.step_seconds), 2)} ms)"),
           ("Throughput", _throughput(b)
                          + (f", {num(b.get('tokens_per_s'), '.1f')} tokens/s" if tokens
                             else "")),
           ("CPU utilisation", f"{num(result.cpu_utilisation)} cores"),
           ("Peak RSS", f"{si(result.peak_rss_bytes)}B")]
    if result.peak_cuda_bytes:
        out.append(("Peak CUDA memory", f"{si(result.peak_cuda_bytes)}B"))
    final = result.epochs[-1] if result.epochs else None
    if final:
        out.append(("Final train loss / acc",
                    f"{final['train_loss']:.4f} / {final['train_top1']:.2%}"))
        if "val_loss" in final:
            out.append(("Final val loss / top-1 / top-5",
                        f"{final['val_loss']:.4f} / {final['val_top1']:.2%} / "
                        f"{final['val_top5']:.2%}"))
    out += _distributed_facts(result)
    out += data_facts(result)
    out += efficiency_facts(result)
    out += [("Note", n) for n in result.notes]
    return out


def _distributed_facts(result) -> list[tuple[str, str]]:
    if not result.ranks:
        return []
    out = [("Processes", f"{result.world_size} ({(result.config or {}).get('strategy', 'ddp')})")]
    straggler = _straggler_text(result)
    if straggler:
        out.append(("Straggler", straggler))
    if getattr(result, "job", None):
        out.append(("Job throughput", job_line(result)))
    c = result.communication
    if c:
        out.append(("Gradient communication", communication_line(c)))
        out += [("Communication hint", h) for h in c.get("hints") or []]
    return out


def straggler_line(s: dict) -> str:
    return (f"rank {s['rank']}: {s['busy_s'] * 1e3:.2f} ms of its own work per step (not "
            f"waiting), {s['excess_s'] * 1e3:+.2f} ms ({s['excess_pct']:+.1f}%) over the median "
            f"{s['median_busy_s'] * 1e3:.2f} ms; most from {phase_label(s['phase']).lower()} "
            f"({s['phase_excess_s'] * 1e3:+.2f} ms)")


def job_line(result) -> str:
    """The job's samples/s beside rank 0's (the Throughput figure is rank 0's alone; the
    report holds rank 0's breakdown)."""
    j = result.job
    return (f"{num(j.get('throughput_per_s'), '.1f')} samples/s: {j['samples']} samples of "
            f"{j['processes']} processes in {j['wall_s']:.3f} s (the longest one's measured "
            f"steps); {_who(result)} 0 alone "
            f"{num(result.breakdown.get('throughput_per_s'), '.1f')}")


def communication_line(c: dict) -> str:
    buckets = c.get("buckets") or []
    return (f"{si(c['bytes_per_step'])}B per step in {len(buckets)} bucket(s) "
            f"(gradients {si(c['gradient_bytes'])}B; ring all-reduce moves "
            f"{si(c['theory_bytes_per_step'])}B per rank)")


# ---- row tables -------------------------------------------------------------------------
def _epochs_table(r) -> RowTable:
    val = any("val_loss" in e for e in r.epochs)
    cols = [("Epoch", True), ("Step", True), ("Train loss", True), ("Train acc", True)]
    if val:
        cols += [("Val loss", True), ("Val top-1", True), ("Val top-5", True)]
    cols += [("LR", True), ("Seconds", True)]
    rows = []
    for e in r.epochs:
        cells = [Cell(str(e["epoch"]), e["epoch"]), Cell(str(e["step"]), e["step"]),
                 Cell(f"{e['train_loss']:.4f}", e["train_loss"]),
                 Cell(pct(e["train_top1"], 2), e["train_top1"])]
        if val:
            cells += [Cell(num(e.get("val_loss"), ".4f"), e.get("val_loss")),
                      Cell(pct(e.get("val_top1"), 2), e.get("val_top1")),
                      Cell(pct(e.get("val_top5"), 2), e.get("val_top5"))]
        cells += [Cell(f"{e['lr']:.3g}", e["lr"]),
                  Cell(f"{e['epoch_seconds']:.1f}", e["epoch_seconds"])]
        rows.append(cells)
    return RowTable("epochs", "Per epoch", cols, rows)


TRANSIENT_WHAT = {"compile": "Compile step", "first step": "Slow first step",
                  "profiler start": "Profiler start", "profiler stop": "Profiler stop and export"}


def _transients_table(r) -> RowTable | None:
    """The one-time costs a watched run kept out of its measured steps, one row each: what it
    was, its seconds, the step it was (or ran after) and dynamo's compile seconds in it."""
    rows = getattr(r, "transients", None) or []
    if not rows:
        return None
    cells = []
    for t in rows:
        step = t.get("step")
        where = ("-" if step is None else f"after step {step}" if t["kind"].startswith("profiler")
                 else f"step {step}" + (" (warm-up)" if t.get("warmup") else ""))
        cells.append([Cell(TRANSIENT_WHAT.get(t["kind"], t["kind"]), t["kind"]),
                      Cell(f"{t['seconds']:.3f}", t["seconds"]), Cell(where, step),
                      Cell(num(t.get("compile_s"), ".3f"), t.get("compile_s"))])
    return RowTable("left-out", "Left out of the measured steps (one-time costs: not in the "
                                "phases, MFU or advice)",
                    [("One-time cost", False), ("Seconds", True), ("Where", False),
                     ("Compiling s", True)], cells)


def _ranks_table(r) -> RowTable:
    """One row per rank: ms per step of each phase; the additive ones sum to the step."""
    labels = _rank_phases(r)
    phases = list(labels)
    cols = [(_who(r).capitalize(), True), ("Step ms", True)] + [
        ("Communication (overlaps)" if p == "communication" else labels[p], True)
        for p in phases]
    with_mfu = any(e.get("mfu") is not None for e in r.ranks)
    cols += [("MFU", True)] if with_mfu else []
    slow = (r.straggler or {}).get("rank")
    rows, hot = [], []
    for e in r.ranks:
        cells = [Cell(str(e["rank"]), e["rank"]), Cell(ms(e["step_s"], 2), e["step_s"])]
        cells += [Cell(ms(e["phases"].get(p), 2), e["phases"].get(p)) for p in phases]
        cells += [Cell(pct(e.get("mfu"), 2), e.get("mfu"))] if with_mfu else []
        rows.append(cells)
        hot.append(e["rank"] == slow)
    title = f"Per {_who(r)} (ms per step" + ("; communication overlaps backward and is not part "
                                             "of the step)" if "communication" in labels else ")")
    return RowTable("ranks", title, cols, rows, hot=hot, emphasis="bold")


def _buckets_table(c: dict) -> RowTable:
    rows = [[Cell(str(i), i), Cell(f"{si(b['bytes'])}B", b["bytes"]),
             Cell(ms(b.get("median_s"), 3), b.get("median_s"))]
            for i, b in enumerate(c.get("buckets") or [])]
    return RowTable("buckets", "Gradient buckets (all-reduce per step)",
                    [("Bucket", True), ("Bytes", True), ("Median ms", True)], rows,
                    ["Total", f"{si(c['bytes_per_step'])}B", ""])


def _own_cell(seconds: float | None, steps: int) -> Cell:
    """Own forward ms per step; "-" in a report saved before the column existed."""
    if seconds is None:
        return Cell("-")
    return Cell(f"{seconds / steps * 1e3:.3f}", seconds / steps * 1e3)


def _watch_tables(r) -> list[RowTable]:
    """A watched script's --layers and --memory tables (none for a recipe's run)."""
    out = []
    if getattr(r, "layers", None):
        steps = max(r.breakdown.get("steps") or 0, 1)
        out.append(RowTable(
            "layers", "Time per layer (forward inclusive of the layers inside it; own: without "
                      "the layers it called; backward: the autograd nodes of the layer's own code)",
            [("Layer", False), ("Type", False), ("Calls", True), ("Forward s", True),
             ("Forward ms / step", True), ("Own ms / step", True), ("Backward s", True)],
            [[cell(row["name"]), cell(row["type"]), Cell(str(row["calls"]), row["calls"]),
              Cell(f"{row['forward_s']:.4f}", row["forward_s"]),
              Cell(f"{row['forward_s'] / steps * 1e3:.3f}", row["forward_s"] / steps * 1e3),
              _own_cell(row.get("own_s"), steps),
              Cell(num(row.get("backward_s"), ".4f"), row.get("backward_s"))]
             for row in r.layers]))
    if getattr(r, "phase_memory", None):
        # a CPU run has no CUDA column (no phase recorded CUDA memory)
        cuda = any("peak_cuda_bytes" in m for m in r.phase_memory.values())
        rows = [[Cell(PHASE_LABELS.get(p, p), p),
                 Cell(f"{si(m.get('peak_rss_bytes'))}B", m.get("peak_rss_bytes"))]
                + ([Cell(f"{si(m['peak_cuda_bytes'])}B" if m.get("peak_cuda_bytes") else "-",
                         m.get("peak_cuda_bytes"))] if cuda else [])
                for p, m in r.phase_memory.items()]
        cols = [("Phase", False), ("Peak RSS", True)] + ([("Peak CUDA", True)] if cuda else [])
        out.append(RowTable("memory", "Peak memory at the end of each phase", cols, rows))
    if getattr(r, "post_mortem", None) is not None:
        out.append(post_mortem_table(r.post_mortem))
    return out


def train_tables(r) -> list[RowTable]:
    left_out = _transients_table(r)
    tables = [phase_table(r.breakdown, (r.config or {}).get("warmup_steps") or 0,
                           phase_labels(r, {}), len(left_out.rows) if left_out else 0)]
    tables += [left_out] if left_out else []
    if r.epochs or not getattr(r, "script", None):
        tables.insert(0, _epochs_table(r))
    if r.ranks:
        tables.append(_ranks_table(r))
    if r.communication:
        tables.append(_buckets_table(r.communication))
    return tables + _watch_tables(r) + data_tables(r) + kernel_tables(r)


# ---- CSV --------------------------------------------------------------------------------


def train_csv(r) -> DataTable:
    rows = phase_csv_rows("run", r.breakdown)
    for i, b in enumerate(r.epoch_breakdown):
        rows += phase_csv_rows(f"epoch {r.epochs[i]['epoch'] if i < len(r.epochs) else i + 1}",
                                b)
    for e in r.ranks or []:  # per step in the entry: the rank's seconds are per step x steps
        steps = e.get("steps") or 0
        rows += phase_csv_rows(f"rank {e['rank']}", {
            "seconds": {p: v * steps for p, v in e["phases"].items()}, "steps": steps,
            "wall_s": e["step_s"] * steps})
    return DataTable(PHASE_CSV, rows)


# ---- charts -----------------------------------------------------------------------------
def train_charts(r) -> list[Chart]:
    out = []
    additive = {p: label for p, label in (_rank_phases(r) if r.ranks else {}).items()
                if p != "communication"}
    cats, per, tips = [], [], []
    for i, b in enumerate(r.epoch_breakdown):
        steps = b.get("steps") or 0
        cats.append(f"epoch {r.epochs[i]['epoch'] if i < len(r.epochs) else i + 1}")
        per.append({p: (s / steps * 1e3 if steps else 0.0) for p, s in b["seconds"].items()})
        tips.append(f"{steps} measured steps, {ms(b['wall_s'] / steps if steps else None, 2)} "
                    f"ms per step")
    if cats:
        out.append(phase_stack("train-phases", "Time per phase, per epoch", cats, per, tips,
                                "epoch", additive if r.ranks else phase_labels(r, PHASE_LABELS)))
    if r.ranks:
        out.append(phase_stack(
            "rank-phases", f"Time per phase, per {_who(r)}",
            [f"{_who(r)} {e['rank']}" for e in r.ranks],
            [{p: e["phases"].get(p, 0.0) * 1e3 for p in additive} for e in r.ranks],
            [f"{e['step_s'] * 1e3:.2f} ms per step"
             + (f"; communication {e['phases']['communication'] * 1e3:.2f} ms (overlaps "
                "backward)" if "communication" in e["phases"] else "")
             for e in r.ranks], "rank", additive))
    epochs = [e["epoch"] for e in r.epochs]
    if r.epochs:
        loss = []
        for key, label, color in (("train_loss", "train loss", PALETTE[0]),
                                  ("val_loss", "validation loss", PALETTE[1])):
            pts = [Point(e["epoch"], e[key], f"epoch {e['epoch']}: {label} {e[key]:.4f}")
                   for e in r.epochs if e.get(key) is not None]
            if pts:
                loss.append(Series(label, color, pts))
        acc = []
        for key, label, color in (("train_top1", "train accuracy", PALETTE[0]),
                                  ("val_top1", "validation top-1", PALETTE[1]),
                                  ("val_top5", "validation top-5", PALETTE[4])):
            pts = [Point(e["epoch"], e[key] * 100, f"epoch {e['epoch']}: {label} "
                                                   f"{e[key]:.2%}")
                   for e in r.epochs if e.get(key) is not None]
            if pts:
                acc.append(Series(label, color, pts))
        out.append(Chart("loss", "lines", "Loss per epoch", "epoch", "loss", loss,
                         x_ticks=epochs))
        out.append(Chart("accuracy", "lines", "Accuracy per epoch", "epoch", "%", acc,
                         x_ticks=epochs))
    return out


# ---- terminal ---------------------------------------------------------------------------
def epoch_line(row: dict) -> str:
    parts = [f"epoch {row['epoch']:>3}", f"step {row['step']}",
             f"train loss {row['train_loss']:.4f}", f"train acc {row['train_top1']:.2%}"]
    if "val_loss" in row:
        parts += [f"val loss {row['val_loss']:.4f}", f"val top-1 {row['val_top1']:.2%}",
                  f"top-5 {row['val_top5']:.2%}"]
    parts += [f"lr {row['lr']:.3g}", f"{row['epoch_seconds']:.1f}s"]
    return " | ".join(parts)


def train_terminal(report) -> list:
    """The phase table, the run's figures, per rank, the watched layers and memory, the
    operators."""
    from layerscope.core.optable import OpTable
    from layerscope.views.ops import ops_terminal

    b = report.breakdown
    lines = [
        f"{report.recipe}: {b['steps']} measured steps, "
        + (f"{b['samples']} samples, " if b.get("samples") else "")
        + (f"{b['tokens']} tokens, " if b.get("tokens") else "")
        + (f"throughput {_throughput(b)}" if b.get("samples") else "samples not seen (no "
           "throughput)")
        + (f", {b.get('tokens_per_s') or 0:.1f} tokens/s" if b.get("tokens") else ""),
        f"CPU utilisation {report.cpu_utilisation or 0:.2f} cores; peak RSS "
        f"{si(report.peak_rss_bytes)}B"
        + (f"; peak CUDA {si(report.peak_cuda_bytes)}B" if report.peak_cuda_bytes else ""),
    ]
    if getattr(report, "script", None):
        lines.insert(0, train_heading(report)[0])
    else:
        lines.append(f"run directory: {report.run_dir}")
    if report.final:
        lines.insert(0, "final: " + epoch_line(report.final))
    lines += efficiency_lines(report)
    lines += [f"note: {n}" for n in report.notes]
    pm = getattr(report, "post_mortem", None)
    untracked = pm is not None and not pm.tracked  # no live set: a line, not an empty table
    if untracked:
        lines.append(post_mortem_line(pm).removeprefix("layerscope: "))
    left_out = _transients_table(report)
    out = [phase_table(b, (report.config or {}).get("warmup_steps") or 0,
                        phase_labels(report, {}), len(left_out.rows) if left_out else 0)]
    out += [left_out] if left_out else []
    out.append(Lines(lines))
    if report.ranks:
        out += [Lines([""]), ranks_terminal(report)]
    for extra in _watch_tables(report) + data_tables(report):
        if not (untracked and extra.id == "post-mortem"):
            out += [Lines([""]), extra]
    if data_lines(report):
        out.append(Lines(data_lines(report)))
    if report.ops:
        out += [Lines([""]), *ops_terminal(OpTable.from_dict(report.ops))]
    if getattr(report, "kernels", None):
        out += [Lines([""]), *kernel_tables(report), Lines(kernel_lines(report))]
    return out


def ranks_terminal(report) -> RowTable:
    """The per-rank table with the straggler line under it."""
    straggler = _straggler_text(report)
    if straggler:
        lines = [f"{report.world_size} processes; straggler {straggler}"]
    elif waits_measured(report.ranks):
        lines = [f"{report.world_size} processes; no straggler (one process)"]
    else:
        lines = [f"{report.world_size} processes, trained independently (no process group)"]
    if getattr(report, "job", None):
        lines.append("job throughput " + job_line(report))
    if report.communication:
        lines.append("gradient communication: " + communication_line(report.communication))
    return replace(_ranks_table(report), caption="\n".join(lines),
                   title=f"Per {_who(report)}, ms per step ({report.world_size} processes)")


TRAIN = View(heading=train_heading, terminal=train_terminal, facts=train_facts,
             tables=train_tables, charts=train_charts, csv=train_csv, lead=lead_section)
