"""``layerscope advise``: rules (advice/rules/, one module each) read the measured facts of a
saved result (advice/facts.py) and say what to change, by how much it should help (Amdahl over
the measured shares, with the arithmetic) and the command that measures it; ``verify`` runs
those commands (``ablate``: every variant in a fresh process, same seed) and marks each rule
confirmed, refuted or within the noise (ablate's rule: the step-time ranges overlap)."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from layerscope.advice.facts import KINDS, facts_of
from layerscope.advice.rules import RULES
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.records.advice import Advice, AdviceReport, Gain

DEFAULT_STEPS = 20
SWEEP = "layerscope sweep "  # a rule whose command starts so is verified by running it


def advise(result: Any, *, verify: bool = False, steps: int | None = None, repeats: int = 1,
           progress: Callable[[int, int], None] | None = None) -> AdviceReport:
    """What ``result`` (a saved result's path, or a result object) says to change: one entry per
    rule that fired, with its predicted gain and the command that tests it. ``verify=True``
    runs those commands (a train or ablate result of a recipe: ablate, each variant in a fresh
    process, the result's seed, ``steps`` per run, default 20, ``repeats`` per variant; a
    profile or sweep result: each rule's sweep in a fresh process, ``steps`` runs per cell) and
    marks each rule confirmed, refuted or within the noise, the measured gain beside the
    prediction."""
    from layerscope.core import values
    from layerscope.core.results import read_result

    source = "result"
    if isinstance(result, (str, os.PathLike)):
        source = os.fsdecode(os.fspath(result))
        result = read_result(source)
    steps = DEFAULT_STEPS if steps is None else values.positive_int(steps, "steps")
    repeats = values.positive_int(repeats, "repeats")
    report = advise_result(result, source, steps=steps, repeats=repeats)
    if not verify:
        return report
    d = result.to_dict()
    facts = facts_of(d)
    if d["kind"] in ("profile", "sweep"):
        _verify_sweeps(report, steps)
        return report
    if d["kind"] not in ("train", "ablate") or not facts.get("recipe") \
            or d.get("script") is not None:
        raise UserError(f"verify runs ablate (a training recipe) or sweep (a profile's model): "
                        f"{source} is a {d['kind']} result of {facts.get('subject')!r}; leave "
                        "out verify", arguments="verify")
    if any(a.variant or a.threads for a in report.advice):
        config = d.get("config") or {}
        _verify(report, recipe=facts["recipe"], device=facts.get("device", "cpu"), steps=steps,
                repeats=repeats, seed=facts.get("seed", 0),
                synthetic=facts.get("synthetic", True), batch_size=config.get("batch_size"),
                threads=config.get("threads"), data_dir=config.get("data_dir"),
                progress=progress)
    return report


def _ablate_command(facts: dict[str, Any], variant: str | None, threads: int | None,
                    steps: int, repeats: int) -> str:
    parts = ["layerscope", "ablate", str(facts.get("recipe")), "--variants",
             f"baseline,{variant}" if variant else "baseline", "--steps", str(steps)]
    if repeats > 1:
        parts += ["--repeats", str(repeats)]
    parts += ["--seed", str(facts.get("seed", 0))]
    if facts.get("synthetic", True):
        parts.append("--synthetic")
    elif facts.get("data_dir"):
        parts += ["--data-dir", str(facts["data_dir"])]
    if facts.get("device", "cpu") != "cpu":
        parts += ["--device", facts["device"]]
    if facts.get("batch_size"):
        parts += ["--batch-size", str(facts["batch_size"])]
    if threads or facts.get("threads_flag"):
        parts += ["--threads", str(threads or facts["threads_flag"])]
    return " ".join(parts)


def _verifiable(facts: dict[str, Any]) -> bool:
    return bool(facts.get("recipe")) and facts.get("kind") in ("train", "ablate")


def advise_result(result: Any, source: str = "result", *, steps: int = DEFAULT_STEPS,
                  repeats: int = 1) -> AdviceReport:
    """The advice on a loaded result (train, profile, sweep, scaling or ablate)."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    kind = d.get("kind")
    if kind not in KINDS:
        raise UserError(f"{source}: advise reads {', '.join(KINDS)} results, not {kind!r}")
    facts = facts_of(d)
    if kind == "train":
        facts["threads_flag"] = (d.get("config") or {}).get("threads")
    items = []
    for rule in RULES:
        found = rule.check(facts)
        if found is None:
            continue
        if found.command:
            command = found.command + (f" --runs {steps}" if found.command.startswith(SWEEP)
                                       else "")
        elif _verifiable(facts):
            command = _ablate_command(facts, found.variant, found.threads, steps, repeats)
        elif found.variant:
            command = (f"layerscope ablate RECIPE --variants baseline,{found.variant} "
                       f"(a training recipe of {facts.get('subject')})")
        else:
            now = facts.get("threads")
            command = (f"{SWEEP}{facts.get('subject')} --threads "
                       + (f"{now},{found.threads}" if now and now != found.threads
                          else str(found.threads))
                       + (f" --batch-sizes {facts['batch_size']}" if facts.get("batch_size")
                          else "") + f" --runs {steps}")
        items.append(Advice(rule.name, found.cause, found.change, command,
                            Gain(round(found.low, 4), round(found.high, 4)), found.derivation,
                            facts=found.facts, variant=found.variant, threads=found.threads))
    notes = [] if items else ["no rule fired: nothing in the measured facts points at a change "
                              f"the {len(RULES)} rules know"]
    return AdviceReport(source, kind, str(facts.get("subject")), str(facts.get("device")),
                        items, checked=[r.name for r in RULES], notes=notes,
                        environment=environment())


def _verify(report: AdviceReport, *, recipe: str, device: str, steps: int = DEFAULT_STEPS,
           repeats: int = 1, seed: int = 0, synthetic: bool = True,
           batch_size: int | None = None, threads: int | None = None,
           data_dir: str | None = None,
           progress: Callable[[int, int], None] | None = None) -> AdviceReport:
    """Run the ablations that test ``report``'s advice and mark each rule's verdict."""
    from layerscope.training.ablation import ablate, beyond_noise

    common = dict(steps=steps, repeats=repeats, device=device, batch_size=batch_size,
                  synthetic=synthetic, seed=seed, data_dir=data_dir)
    variants = list(dict.fromkeys(a.variant for a in report.advice if a.variant))
    main = ablate(recipe, variants=["baseline", *variants], threads=threads, progress=progress,
                  **common)
    by_name = {v.variant: v for v in main.variants}
    base = by_name.get("baseline")
    report.verify = {"steps": steps, "repeats": repeats, "seed": seed,
                     "warmup_steps": main.warmup_steps, "device": device,
                     "baseline_step_s": base.step["median_s"] if base and base.step else None,
                     "speedups": {v.variant: v.speedup for v in main.variants
                                  if v.speedup is not None}}
    for item in report.advice:
        if item.variant:
            _judge(item, by_name.get(item.variant), base, beyond_noise, "ablate")
        elif item.threads:
            other = ablate(recipe, variants=["baseline"], threads=item.threads, **common)
            res = other.variants[0]
            _judge(item, res, base, beyond_noise, f"ablate --threads {item.threads}")
            if res.step and base and base.step:
                report.verify["speedups"][f"threads={item.threads}"] = (
                    base.step["median_s"] / res.step["median_s"])
        else:
            item.verify_note = "its command is not an ablation: run it by hand"
    if main.noise and main.noise.warnings:
        report.notes += [f"verification: {w}" for w in main.noise.warnings]
    return report


def _judge(item: Advice, res, base, beyond_noise, what: str) -> None:
    if res is None or base is None or res.status != "ok" or base.status != "ok" \
            or not res.step or not base.step:
        why = (res.reason if res is not None and res.reason else
               base.reason if base is not None and base.reason else "no step times")
        item.verdict, item.verify_note = "not-run", f"{what}: {why}"
        return
    new, old = res.step["median_s"], base.step["median_s"]
    _mark(item, 1 - new / old, res is not base and beyond_noise(res, base),
          f"{what}: step {new * 1e3:.2f} ms against the baseline's {old * 1e3:.2f} ms")


def _mark(item: Advice, gain: float, beyond: bool, measured: str) -> None:
    """The verdict: beyond the noise and faster is confirmed, beyond and not faster refuted,
    else within the noise; the note says what was measured and if it fell in the range."""
    item.measured_gain = round(gain, 4)
    if not beyond:
        item.verdict = "within-noise"
    else:
        item.verdict = "confirmed" if item.measured_gain > 0 else "refuted"
    inside = item.predicted_gain.low <= item.measured_gain <= item.predicted_gain.high
    item.verify_note = (f"{measured} ({'beyond' if beyond else 'within'} the noise); "
                        f"{'inside' if inside else 'outside'} the predicted range")


def _verify_sweeps(report: AdviceReport, runs: int) -> None:
    """Run each rule's ``layerscope sweep`` command in a fresh process and judge its second
    cell against its first (the setting the result ran with): sweep's noise rule (the cells'
    p10-p90 per sample overlap) and its speed-up in samples per second."""
    import json
    import shlex
    import subprocess
    import sys
    import tempfile

    report.verify = {"runs": runs, "speedups": {}}
    for item in report.advice:
        if not item.command.startswith(SWEEP):
            item.verify_note = "its command is not a sweep: run it by hand"
            continue
        with tempfile.TemporaryDirectory(prefix="layerscope-advise-") as tmp:
            out = os.path.join(tmp, "sweep.json")
            argv = [sys.executable, "-m", "layerscope", *shlex.split(item.command)[1:],
                    "--quiet", "--format", "json", "-o", out]
            proc = subprocess.run(argv, capture_output=True, text=True)
            if proc.returncode != 0:
                lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
                item.verify_note = f"sweep: {lines[-1] if lines else proc.returncode}"
                continue
            with open(out, encoding="utf-8") as f:
                cells = json.load(f)["cells"]
        ok = [c for c in cells if c.get("status") == "ok" and c.get("speedup")]
        if len(ok) < 2:
            why = next((c.get("error") for c in cells if c.get("error")), "fewer than 2 cells")
            item.verify_note = f"sweep: {why}"
            continue
        speedup = ok[1]["speedup"]
        report.verify["speedups"][item.rule] = speedup
        _mark(item, 1 - 1 / speedup, not ok[1].get("within_noise"),
              f"sweep: {ok[1]['throughput_per_s']:.1f} samples/s against "
              f"{ok[0]['throughput_per_s']:.1f}")
