"""The commands an advice gives to measure its change: ``layerscope ablate`` of a training
recipe, ``layerscope run`` of the user's own script with its what-if options, or
``layerscope sweep`` of a profiled model, each written as an argument list from the settings
declarations (``Settings.flags``) and shown quoted for a POSIX shell. Every value a result holds
is one argument: a result cannot add options, commands or shell syntax to what is run."""
from __future__ import annotations

import os
import shlex
from typing import Any

from layerscope.core.errors import UserError


def ablate_argv(facts: dict[str, Any], variant: str | None, threads: int | None,
                 steps: int, repeats: int) -> list[str]:
    """``layerscope ablate`` of the result's recipe: the baseline and ``variant`` (first, so
    the command reads as what it tests), at the result's settings, written by
    ``AblateSettings.flags`` (a value that begins with '-' as ``--option=value``)."""
    from layerscope.training.ablation import AblateSettings

    synthetic = bool(facts.get("synthetic", True))
    device = facts.get("device", "cpu")
    rest = {"steps": steps, "repeats": repeats if repeats > 1 else None,
            "device": None if device == "cpu" else device,
            "batch_size": facts.get("batch_size") or None, "synthetic": synthetic,
            "data_dir": None if synthetic else facts.get("data_dir") or None,
            "seed": facts.get("seed", 0), "threads": threads or facts.get("threads_flag")}
    return ["layerscope", "ablate", str(facts.get("recipe")),
            *AblateSettings.flags(variants=f"baseline,{variant}" if variant else "baseline"),
            *AblateSettings.flags(**rest)]


def run_settings(variant: str | None, threads: int | None) -> dict[str, Any] | None:
    """The ``layerscope run`` what-if settings (training.whatif) that make a rule's change on
    the user's own script: the train settings of its ablation variant when ``WhatIf`` has
    each of them (workers=N, pin-memory); None when the change needs the script's code
    edited."""
    import dataclasses

    from layerscope.training.ablation import variant_settings
    from layerscope.training.whatif import WhatIf

    if threads:
        return {"threads": threads}
    if not variant:
        return None
    try:
        settings, _ = variant_settings(variant, "cuda")  # what it sets, wherever it applies
    except UserError:
        return None
    known = {f.name for f in dataclasses.fields(WhatIf)}
    return settings if settings and set(settings) <= known else None


def run_argv(script: dict[str, Any], settings: dict[str, Any], steps: int,
             extra: tuple[str, ...] = ()) -> list[str]:
    """``layerscope run`` with the what-if ``settings``, ``steps`` steps (the warm-up of
    ablate's comparisons left out) and ``extra`` options, then the script (or ``-m`` module)
    and its own arguments, as the result recorded them."""
    from layerscope.training.ablation import default_warmup_steps
    from layerscope.training.script_runner import RunSettings
    from layerscope.training.whatif import WhatIf

    argv = ["layerscope", "run", *WhatIf.flags(**WhatIf(**settings).given()),
            *RunSettings.flags(steps=steps, warmup_steps=default_warmup_steps(steps) or None),
            *extra]
    target = str(script.get("path") or script.get("name"))
    own = [str(a) for a in script.get("argv") or []]
    if script.get("module"):
        return argv + RunSettings.flags(module=[target, *own])
    return [*argv, "--", target, *own]  # after --: a script named like an option stays one


def run_command(facts: dict[str, Any], variant: str | None, threads: int | None, steps: int,
                 edit: str) -> tuple[list[str], str]:
    """The command that measures a change on a watched script: ``layerscope run`` with its
    what-if options, or, for a change in the script's code, the run to repeat after the edit;
    as (argument list, the text shown: quoted, after ``cd`` to the script's folder)."""
    script = facts["script"]
    settings = run_settings(variant, threads)
    base = dict(facts.get("what_if") or {})
    argv = run_argv(script, {**base, **(settings or {})}, steps)
    command = shlex.join(argv)
    cwd = script.get("cwd")
    if cwd and os.path.abspath(str(cwd)) != os.getcwd():
        command = f"cd {shlex.quote(str(cwd))} && {command}"
    if settings is None:
        command += f" (after this edit to {shlex.quote(str(script.get('name')))}: {edit})"
    return argv, command


def sweep_argv(facts: dict[str, Any], options: list[str], steps: int) -> list[str]:
    """``layerscope sweep`` of the result's model with ``options``, at the result's threads
    and batch size (unless ``options`` name them) and ``steps`` runs per cell."""
    argv = ["layerscope", "sweep", str(facts.get("subject")), *options]
    if facts.get("threads") and "--threads" not in options:
        argv += ["--threads", str(facts["threads"])]
    if facts.get("batch_size") and "--batch-sizes" not in options:
        argv += ["--batch-sizes", str(facts["batch_size"])]
    return argv + ["--runs", str(steps)]


def command_for(rule: Any, found: Any, facts: dict[str, Any], steps: int, repeats: int
             ) -> tuple[list[str] | None, str]:
    """The command that tests a rule's finding: its argument list (None when it is not a
    command to run as it is: a placeholder, or a step to do by hand first) and its text, the
    list quoted for a POSIX shell (``shlex.join``) with what to do around it in words. Every
    value a result holds (its model, recipe, data folder, script, arguments) is one argument:
    a result cannot add options, commands or shell syntax to what is run or shown."""
    kind = facts.get("kind")
    if found.command:  # the rule's own command, and what to do around it
        argv = list(found.command)
        sweep = argv[:2] == ["layerscope", "sweep"]
        if sweep:
            argv += ["--runs", str(steps)]
        text = shlex.join(argv) + (f" {found.after}" if found.after else "")
        return (argv if sweep and not found.after else None), text
    if facts.get("script"):
        argv, text = run_command(facts, found.variant, found.threads, steps,
                                  rule.edit or found.change)
        return argv, text
    if rule.sweep and kind in ("profile", "sweep") and facts.get("subject"):
        argv = sweep_argv(facts, shlex.split(rule.sweep), steps)
    elif verifiable(facts):
        argv = ablate_argv(facts, found.variant, found.threads, steps, repeats)
    elif found.variant:
        return None, (f"layerscope ablate RECIPE --variants baseline,{found.variant} "
                      f"(a training recipe of {shlex.quote(str(facts.get('subject')))})")
    else:
        now = facts.get("threads")
        threads = (f"{now},{found.threads}" if now and now != found.threads
                   else str(found.threads))
        argv = sweep_argv(facts, ["--threads", threads], steps)
    return argv, shlex.join(argv)


def verifiable(facts: dict[str, Any]) -> bool:
    return bool(facts.get("recipe")) and facts.get("kind") in ("train", "ablate")
