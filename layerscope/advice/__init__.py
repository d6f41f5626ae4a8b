"""``layerscope advise``: rules (advice/rules/, one module each) read the measured facts of a
saved result (advice/facts.py) and say what to change, by how much it should help (Amdahl over
the measured shares, with the arithmetic) and the command that measures it; ``verify`` runs
those commands (``ablate``: every variant in a fresh process, same seed) and marks each rule
confirmed, refuted or within the noise (ablate's rule: the step-time ranges overlap). On a
``layerscope run`` result the commands run the user's script again with run's what-if options
(``training.whatif``); a change in the script's own code is not run, its edit is said instead."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layerscope.advice import trust
from layerscope.advice.commands import command_for, run_argv, run_settings
from layerscope.advice.facts import KINDS, facts_of
from layerscope.advice.rule import CannotJudge, facts_text
from layerscope.advice.rules import RULES
from layerscope.core import values
from layerscope.core.environment import environment
from layerscope.core.errors import UserError
from layerscope.core.records.advice import Advice, AdviceReport, Gain
from layerscope.core.records.train import RunConfig
from layerscope.core.settings import REQUIRED, Settings, option

DEFAULT_STEPS = 20


@dataclass(kw_only=True, eq=False)
class AdviseSettings(Settings):
    """Every setting of ``layerscope advise`` and ``layerscope.advise``: a new one is a field
    here."""

    result: Any = option(REQUIRED, "JSON written by train, run, profile, sweep, scaling or "
                                   "ablate (--format json)", positional=True,
                         metavar="RESULT.json", record=False)
    verify: bool = option(False, "run each rule's command (ablate for train and ablate results, "
                                 "sweep for profile and sweep results, the script again with "
                                 "run's what-if options for run results; fresh processes, the "
                                 "result's seed) and mark it confirmed, refuted or within the "
                                 "noise")
    allow_code: bool = option(
        False, "let --verify run Python code the result names that is not its own recorded "
               "script (a model given as file.py:factory or package.module:factory, a script "
               "outside the folder it ran in, a -m module found elsewhere); without it such a "
               "result is refused, since a result file, not you, chose that code")
    steps: int | None = option(None, "steps per ablation or script run, runs per sweep cell "
                                     "(default 20)", parse=values.positive_int)
    repeats: int = option(1, "repeats per ablation variant", parse=values.positive_int)


def advise(result: Any = None, *, settings: AdviseSettings | None = None,
           progress: Callable[[int, int], None] | None = None,
           announce: Callable[[str], None] | None = None, **overrides: Any) -> AdviceReport:
    """What ``result`` (a saved result's path, or a result object) says to change: one entry per
    rule that fired, with its predicted gain and the command that tests it. ``settings``: an
    ``AdviseSettings``; keyword arguments override its fields. ``verify=True``
    runs those commands (a train or ablate result of a recipe: ablate, each variant in a fresh
    process, the result's seed, ``steps`` per run, default 20, ``repeats`` per variant; a
    profile or sweep result: each rule's sweep in a fresh process, ``steps`` runs per cell; a
    ``layerscope run`` result: the script again, as it ran and with each rule's what-if
    options, ``steps`` steps per run, in fresh processes) and marks each rule confirmed, refuted
    or within the noise, the measured gain beside the prediction.

    A result is data: ``verify`` runs Python code it names only where that code is the
    result's own, recorded and there (a run's script in the folder it ran in); a model given
    as code (file.py:factory, package.module:factory), a script outside its recorded folder
    or a ``-m`` module found elsewhere is refused unless ``allow_code=True``
    (advice/trust.py). What will run is said to ``announce`` (one line each) before it runs,
    and kept in the report's notes."""
    from layerscope.core.results import read_result

    if result is not None:
        overrides["result"] = result
    if settings is None and "result" not in overrides:
        raise UserError("give the result to advise on", arguments="result")
    s = AdviseSettings.of(settings, **overrides)
    result, source = s.result, "result"
    if isinstance(result, (str, os.PathLike)):
        source = os.fsdecode(os.fspath(result))
        result = read_result(source)
    steps = DEFAULT_STEPS if s.steps is None else s.steps
    report = advise_result(result, source, steps=steps, repeats=s.repeats)
    if s.verify:
        _verify_result(report, result.to_dict(), source, steps=steps, repeats=s.repeats,
                       progress=progress, allow_code=s.allow_code, announce=announce)
    return report


def _verify_result(report: AdviceReport, d: dict[str, Any], source: str, *, steps: int,
                   repeats: int, progress: Callable[[int, int], None] | None,
                   allow_code: bool, announce: Callable[[str], None] | None) -> None:
    """``advise(verify=True)``: run the commands that test ``report``'s advice, as the
    result's kind says (``advise``'s docstring), and mark each rule."""
    facts = facts_of(d)
    facts["loadavg"] = (d.get("environment") or {}).get("loadavg")
    steps_then = _result_steps(d)

    def say(lines: list[str]) -> None:
        for line in lines:
            report.notes.append(line)
            if announce is not None:
                announce(line)

    if d["kind"] in ("profile", "sweep"):
        if any(a.argv for a in report.advice):  # something to run: the model must be loadable
            say(trust.check_model(facts.get("subject"), source, allow_code))
        _verify_sweeps(report, steps, facts)
        return
    if d["kind"] == "train" and d.get("script") is not None:
        _verify_runs(report, facts, source, steps=steps, repeats=repeats, progress=progress,
                     result_steps=steps_then, allow_code=allow_code, say=say)
        return
    if d["kind"] not in ("train", "ablate") or not facts.get("recipe") \
            or d.get("script") is not None:
        raise UserError(f"verify runs ablate (a training recipe), sweep (a profile's model) or "
                        f"the script of a layerscope run result: "
                        f"{source} is a {d['kind']} result of {facts.get('subject')!r}; leave "
                        "out verify", arguments="verify")
    if any(a.variant or a.threads for a in report.advice):
        from layerscope.training.recipes import lookup

        lookup(str(facts["recipe"]))  # a built-in recipe, or one line naming it
        config = RunConfig.of(d.get("config"))
        _verify(report, recipe=facts["recipe"], device=facts.get("device", "cpu"), steps=steps,
                repeats=repeats, seed=facts.get("seed", 0),
                synthetic=facts.get("synthetic", True), batch_size=config.batch_size,
                threads=config.threads, data_dir=config.data_dir,
                progress=progress, facts=facts, result_steps=steps_then)


def _result_steps(d: dict[str, Any]) -> list[float] | None:
    """The step times the result measured (a train or run result's ``step_seconds``; an
    ablate result's baseline repeats), which the re-run baseline must reproduce."""
    if d.get("kind") == "ablate":
        base = next((v for v in d.get("variants") or [] if v.get("variant") == "baseline"), {})
        steps = [x for rep in base.get("repeats") or [] for x in rep.get("step_seconds") or []]
        return steps or None
    return list(d.get("step_seconds") or []) or None


def advise_result(result: Any, source: str = "result", *, steps: int = DEFAULT_STEPS,
                  repeats: int = 1) -> AdviceReport:
    """The advice on a loaded result (train, profile, sweep, scaling or ablate)."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    kind = d.get("kind")
    if kind not in KINDS:
        raise UserError(f"{source}: advise reads {', '.join(KINDS)} results, not {kind!r}")
    facts = facts_of(d)
    if kind == "train":
        facts["threads_flag"] = RunConfig.of(d.get("config")).threads
    items, refused = [], []
    for rule in RULES:
        found = rule.apply(facts)
        if isinstance(found, CannotJudge):
            refused.append(f"{rule.name}: cannot judge: {found.reason} (facts: "
                           f"{facts_text(found.facts) or 'none'})")
            continue
        if found is None:
            continue
        argv, command = command_for(rule, found, facts, steps, repeats)
        change = found.change
        if facts.get("script") and rule.edit:  # a script: the edit, not a train option
            change = f"{rule.edit} in the script"
        items.append(Advice(rule.name, found.cause, change, command,
                            Gain(round(found.low, 4), round(found.high, 4)), found.derivation,
                            facts=found.facts, variant=found.variant, threads=found.threads,
                            argv=argv))
    notes = [] if items else ["no rule fired: nothing in the measured facts points at a change "
                              f"the {len(RULES)} rules know"]
    notes += refused
    return AdviceReport(source, kind, str(facts.get("subject")), str(facts.get("device")),
                        items, checked=[r.name for r in RULES], notes=notes,
                        environment=environment())


def _verify(report: AdviceReport, *, recipe: str, device: str, steps: int = DEFAULT_STEPS,
            repeats: int = 1, seed: int = 0, synthetic: bool = True,
            batch_size: int | None = None, threads: int | None = None,
            data_dir: str | None = None,
            progress: Callable[[int, int], None] | None = None,
            facts: dict[str, Any] | None = None,
            result_steps: list[float] | None = None) -> AdviceReport:
    """Run the ablations that test ``report``'s advice in rounds (each: ``ablate`` of the
    baseline and every variant, then the baseline at each rule's thread count) and mark each
    rule's verdict (advice/verdict.py)."""
    from layerscope.advice.verdict import ROUNDS
    from layerscope.training.ablation import ablate

    common = dict(steps=steps, repeats=1, device=device, batch_size=batch_size,
                  synthetic=synthetic, seed=seed, data_dir=data_dir)
    variants = list(dict.fromkeys(a.variant for a in report.advice if a.variant))
    counts = list(dict.fromkeys(a.threads for a in report.advice
                                if a.threads and not a.variant))
    failed: dict[str, str] = {}  # variant -> why it did not run
    seen: dict[str, Any] = {}  # the last round's ablate report: warm-up steps, noise

    calls = [("baseline", variants, threads)] + [(f"threads={n}", [], n) for n in counts]
    per_round = sum(1 + len(more) for _, more, _ in calls)  # fresh processes a round

    def run_round(r: int) -> dict[str, Round]:
        out: dict[str, Round] = {}
        done = r * per_round
        total = per_round * (max(repeats, r + 1) if r < repeats else ROUNDS)
        for name, more, n in calls:
            def step(i: int, _n: int, offset: int = done) -> None:
                if progress:
                    progress(offset + i, total)
            rep = ablate(recipe, variants=["baseline", *more], threads=n, progress=step,
                         **common)
            done += 1 + len(more)
            seen["report"] = rep
            for v in rep.variants:
                key = name if v.variant == "baseline" else v.variant
                if v.status != "ok" or not v.repeats or not v.repeats[0].step_seconds:
                    failed.setdefault(key, v.reason or "no step times")
                else:
                    out[key] = Round(list(v.repeats[0].step_seconds), dict(v.phases_ms or {}))
        return out

    measured, check = _rounds(run_round, result_steps, repeats)
    last = seen.get("report")
    report.verify = {"steps": steps, "repeats": repeats, "seed": seed, "device": device,
                     "warmup_steps": last.warmup_steps if last is not None else None}
    _conclude(report, measured, check, failed, facts, "ablate",
              lambda item: item.variant or f"threads={item.threads}")
    if last is not None and last.noise and last.noise.warnings:
        report.notes += [f"verification: {w}" for w in last.noise.warnings]
    return report


@dataclass(frozen=True)
class Round:
    """One run of one variant in a round of ``--verify``: its measured step times in run
    order and its phases in ms per step."""

    steps: list[float]
    phases_ms: dict[str, float]


def _rounds(run_round: Callable[[int], dict[str, Round]], result_steps: list[float] | None,
            repeats: int) -> tuple[dict[str, list[Round]], Any]:
    """Every variant's runs, round by round (``run_round(r)``: variant -> its run), and the
    check of the baseline against the result's own steps (advice/verdict.py): ``repeats``
    rounds; when the baseline did not reproduce, rounds up to ROUNDS in all, and the check
    again on all of them. The check is None when the result kept no step times or the
    baseline measured none."""
    from layerscope.advice.verdict import ROUNDS, reproduces

    measured: dict[str, list[Round]] = {}

    def more(rounds: int) -> None:
        for r in range(max((len(v) for v in measured.values()), default=0), rounds):
            for name, run in run_round(r).items():
                measured.setdefault(name, []).append(run)

    def check() -> Any:
        if not result_steps or not measured.get("baseline"):
            return None
        return reproduces(result_steps, [run.steps for run in measured["baseline"]])

    more(repeats)
    first = check()
    if first is None or first.reproduced or repeats >= ROUNDS:
        return measured, first
    more(ROUNDS)
    return measured, check()


def _conclude(report: AdviceReport, measured: dict[str, list[Round]], check: Any,
              failed: dict[str, str], facts: dict[str, Any] | None, what: str,
              name_of: Callable[[Advice], str]) -> None:
    """Each verified rule's verdict from the rounds (advice/verdict.py: unverifiable when the
    baseline did not reproduce the result); the check, the rounds and the speed-ups go into
    ``report.verify``."""
    import statistics

    from layerscope.advice.verdict import judge_variant, unverifiable

    def pooled(runs: list[Round]) -> float:
        return statistics.median(x for run in runs for x in run.steps)

    def phases(runs: list[Round]) -> dict[str, float]:
        names = dict.fromkeys(p for run in runs for p in run.phases_ms)
        return {p: statistics.median(run.phases_ms.get(p, 0.0) for run in runs) for p in names}

    base = measured.get("baseline") or []
    verify = report.verify if report.verify is not None else {}
    report.verify = verify
    verify.update(rounds=max((len(v) for v in measured.values()), default=0),
                  baseline_step_s=pooled(base) if base else None, speedups={})
    if check is not None:
        verify.update(result_step_s=check.result_s, baseline_reproduced=check.reproduced)
    elif base:
        report.notes.append("verification: the result kept no step times, so whether the "
                            "re-run baseline measures what the result measured is not checked")
    for item in report.advice:
        if item.verify_note:  # not a change the rounds measure (said already)
            continue
        name = name_of(item)
        label = f"{what} {name}" if name else what
        runs = measured.get(name) or []
        if not base or not runs:
            why = failed.get(name) or failed.get("baseline") or "no step times"
            item.verdict, item.verify_note = "not-run", f"{label}: {why}"
            continue
        verify["speedups"][name] = pooled(base) / pooled(runs)
        if check is not None and not check.reproduced:
            load_then = ((facts or {}).get("loadavg") or [None])[0]
            item.verdict, item.measured_gain = "unverifiable", None
            item.verify_note = f"{label}: {unverifiable(check, load_then, _load_now())}"
            continue
        judged = judge_variant([run.steps for run in base], [run.steps for run in runs])
        _mark(item, judged.gain, judged.beyond, f"{label}: {judged.measured}", facts,
              phases(base), phases(runs), judged.basis)


def _load_now() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _mark(item: Advice, gain: float, beyond: bool, measured: str,
          facts: dict[str, Any] | None = None, base_ms: dict[str, float] | None = None,
          new_ms: dict[str, float] | None = None, basis: str | None = None) -> None:
    """The verdict: beyond the noise and faster is confirmed, beyond and not faster refuted,
    else within the noise; the note says what was measured, whether it fell in the range and,
    when not, why not (the rule's ``explain``, in the measured numbers)."""
    from layerscope.advice.rule import Outcome

    item.measured_gain = round(gain, 4)
    if not beyond:
        item.verdict = "within-noise"
    else:
        item.verdict = "confirmed" if item.measured_gain > 0 else "refuted"
    low, high = item.predicted_gain.low, item.predicted_gain.high
    inside = low <= item.measured_gain <= high
    by = f": {basis}" if basis else ""
    item.verify_note = (f"{measured} ({'beyond' if beyond else 'within'} the noise{by}); "
                        f"{'inside' if inside else 'outside'} the predicted range")
    if not inside:
        rule = next(r for r in RULES if r.name == item.rule)
        outcome = Outcome(facts or {}, low, high, item.measured_gain, dict(base_ms or {}),
                          dict(new_ms or {}), item.variant, item.threads)
        item.verify_note += f": {rule.why(outcome)}"


def _verify_runs(report: AdviceReport, facts: dict[str, Any], source: str, *, steps: int,
                 repeats: int = 1, progress: Callable[[int, int], None] | None = None,
                 result_steps: list[float] | None = None, allow_code: bool = False,
                 say: Callable[[list[str]], None] | None = None) -> None:
    """Run a watched script again, as its result recorded it (path, arguments, working
    directory; this environment), once as it ran and once per rule with the what-if options
    of ``layerscope run`` that make its change, each in a fresh process with ``steps`` steps
    and its standard output discarded, in rounds; judge each against the first
    (advice/verdict.py). A rule whose change needs the script's code edited is not run."""
    import subprocess
    import sys

    from layerscope.advice.verdict import ROUNDS
    from layerscope.core.io import temp_dir
    from layerscope.training.ablation import default_warmup_steps

    script = _script_to_rerun(facts, source)
    cwd = script["cwd"]
    allowed = trust.check_script(script, source, allow_code)  # before anything runs
    base = dict(facts.get("what_if") or {})
    plan: dict[str, dict[str, Any]] = {"baseline": base}  # variant -> its what-if settings
    for item in report.advice:
        settings = run_settings(item.variant, item.threads)
        if not item.argv or item.argv[:2] != ["layerscope", "run"]:
            item.verify_note = "its command is not a run of the script: run it by hand"
        elif settings is None:
            edit = next(r for r in RULES if r.name == item.rule).edit or item.change
            item.verify_note = (f"not run: the change is in the script's own code ({edit}); "
                                "edit it, then run the command and compare the two results")
        else:
            plan.setdefault(_run_variant(base, settings), {**base, **settings})
    if len(plan) == 1:  # no rule's change is a what-if of run: nothing to compare
        report.verify = {"steps": steps, "repeats": repeats, "cwd": cwd, "speedups": {}}
        return
    if say is not None:
        say(allowed)
    failed: dict[str, str] = {}  # variant -> why its run failed

    with temp_dir() as folder:
        def run_round(r: int) -> dict[str, Round]:
            out: dict[str, Round] = {}
            for i, (name, settings) in enumerate(plan.items()):
                if name in failed:
                    continue
                path = os.path.join(folder, f"run-{r}-{i}.json")
                argv = [sys.executable, "-m", "layerscope",
                        *run_argv(script, settings, steps, ("--format", "json", "-o", path))[1:]]
                proc = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, errors="replace")
                if progress:
                    progress(r * len(plan) + i + 1,
                             len(plan) * (max(repeats, r + 1) if r < repeats else ROUNDS))
                rep = _read_run(path) if proc.returncode == 0 else None
                if rep is None or not rep.get("step_seconds"):
                    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
                    failed[name] = (lines[-1] if proc.returncode and lines else
                                    f"exit code {proc.returncode}" if proc.returncode else
                                    "no training step measured")
                    continue
                breakdown = rep.get("breakdown") or {}
                n = breakdown.get("steps") or 0
                out[name] = Round(list(rep["step_seconds"]),
                                  {p: v / n * 1e3 for p, v in
                                   (breakdown.get("seconds") or {}).items()} if n else {})
            return out

        measured, check = _rounds(run_round, result_steps, repeats)
    report.verify = {"steps": steps, "repeats": repeats,
                     "warmup_steps": default_warmup_steps(steps), "cwd": cwd}
    _conclude(report, measured, check, failed, facts, "run",
              lambda item: _run_variant(base, run_settings(item.variant, item.threads) or {}))


def _script_to_rerun(facts: dict[str, Any], source: str) -> dict[str, Any]:
    """The watched script a result recorded, checked before anything runs: one process, its
    path and working directory recorded, and both still there. Raises UserError otherwise."""
    script = facts.get("script") or {}
    cwd = script.get("cwd")
    if (facts.get("world_size") or 1) > 1:
        raise UserError(f"{source} is the merged result of several processes (run "
                        "--nproc-per-node): verify reruns one process; advise --verify the "
                        "result of a single-process layerscope run", arguments="verify")
    if not script.get("path") or not cwd:
        raise UserError(f"{source} does not record the script's path and working directory "
                        "(a result of layerscope.watch() or of an older release): run the "
                        "script with this release's layerscope run and advise --verify that "
                        "result", arguments="verify")
    if not os.path.isdir(cwd) or not (script.get("module") or os.path.isfile(
            os.path.join(cwd, script["path"]))):
        raise UserError(f"{source}: the script {script['path']} (run in {cwd}) is not there "
                        "any more: verify runs it again from there", arguments="verify")
    return script


def _run_variant(base: dict[str, Any], settings: dict[str, Any]) -> str:
    """A variant's name: the what-if options of its run, e.g. "--num-workers 2"."""
    from layerscope.training.whatif import WhatIf

    return " ".join(WhatIf.flags(**WhatIf(**{**base, **settings}).given()))


def _read_run(path: str) -> dict[str, Any] | None:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _verify_sweeps(report: AdviceReport, runs: int,
                   facts: dict[str, Any] | None = None) -> None:
    """Run each rule's ``layerscope sweep`` command in a fresh process and judge its second
    cell against its first (the setting the result ran with): sweep's noise rule (the cells'
    p10-p90 per sample overlap) and its speed-up in samples per second."""
    import json
    import subprocess
    import sys
    import tempfile

    report.verify = {"runs": runs, "speedups": {}}
    for item in report.advice:
        if not item.argv or item.argv[:2] != ["layerscope", "sweep"]:
            item.verify_note = "its command is not a sweep: run it by hand"
            continue
        with tempfile.TemporaryDirectory(prefix="layerscope-advise-") as tmp:
            out = os.path.join(tmp, "sweep.json")
            argv = [sys.executable, "-m", "layerscope", *item.argv[1:],
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
              f"{ok[0]['throughput_per_s']:.1f}", facts)
