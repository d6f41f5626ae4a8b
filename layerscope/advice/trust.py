"""What ``advise --verify`` may run: a result file is data that travels between machines and CI
jobs, so the code it names is not run on its word.

- A profile's or sweep's model is swept again. A built-in name, an ``hf:`` config, an ONNX or
  TorchScript file and a training run's folder are models layerscope loads as data; a model
  given as Python code (``file.py:factory``, ``package.module:factory``) would be imported and
  run: refused unless the user confirms (``allow_code``). A model that is not one this machine
  can load, or that begins with ``-`` (an option, not a model), is refused.
- A ``layerscope run`` result's script is run again from the folder the result recorded: the
  script file must exist inside that folder (its real path: a link out of it is outside), and a
  ``-m`` module must be a module file inside it (``python -m`` would otherwise find installed
  code: ``-m pip``); anything else is refused unless the user confirms.

Each check returns what will run, in words (the CLI shows it before running), or raises
UserError naming the code and the way to confirm.
"""
from __future__ import annotations

import os
import re
import shlex
from typing import Any

from layerscope.core.errors import UserError

CONFIRM = ("check that code, then confirm with allow_code (it runs with your permissions); "
           "without verify, advise shows the commands and runs nothing")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def model_code(spec: str) -> str | None:
    """The Python code a model spec names, in words ("the Python file /abs/m.py", "the Python
    module pkg.models"), or None when it names none (a built-in name, a data file)."""
    from layerscope.frontends.detect import detect

    if detect(spec).kind != "factory":
        return None
    target = spec.rpartition(":")[0]
    if target.endswith(".py"):
        return f"the Python file {os.path.abspath(target)}"
    return f"the Python module {target}"


def check_model(spec: Any, source: str, allow_code: bool) -> list[str]:
    """Whether the model a profile or sweep result names may be swept here: [] for a model
    layerscope loads as data, the line saying which code runs for confirmed code; UserError
    otherwise."""
    from layerscope.frontends.detect import detect

    text = str(spec) if spec is not None else ""
    if not text.strip():
        raise UserError(f"{source} names no model: verify has nothing to sweep",
                        arguments="verify")
    if text.startswith("-"):
        raise UserError(f"{source}: its model {text!r} begins with '-', so it is not a model "
                        "but an option: verify runs nothing from it", arguments="verify")
    ref = detect(text)
    if ref.kind == "unknown":
        raise UserError(f"{source}: its model {text!r} is not a model on this machine "
                        f"({(ref.problem or '').split('. ')[0].rstrip('.')}); verify sweeps the "
                        "model the result measured",
                        arguments="verify")
    code = model_code(text)
    if code is None:
        return []
    if not allow_code:
        raise UserError(f"{source} names its model as Python code ({text}): verify would "
                        f"import and run {code}, which the result file chose, not you; "
                        f"{CONFIRM}", arguments=("verify", "allow_code"))
    return [f"verify imports and runs {code} ({text}), as {source} names it"]


def _module_file(name: str, cwd: str) -> str | None:
    """The file ``python -m NAME`` runs when NAME is a module in ``cwd`` (its first entry on
    sys.path): ``cwd/a/b.py`` or the package's ``cwd/a/b/__main__.py``, every package above
    it a folder there; None when NAME is not found there."""
    parts = name.split(".")
    folder = os.path.join(cwd, *parts)
    for path in (folder + ".py", os.path.join(folder, "__main__.py")):
        if os.path.isfile(path):
            return path
    return None


def check_script(script: dict[str, Any], source: str, allow_code: bool) -> list[str]:
    """Whether a ``layerscope run`` result's script may run again: its file (or ``-m`` module)
    exists inside the working directory the result recorded. Returns the line saying what
    runs; UserError otherwise."""
    cwd, path = str(script.get("cwd") or ""), str(script.get("path") or "")
    args = [str(a) for a in script.get("argv") or []]
    with_args = f" with the arguments {shlex.join(args)}" if args else " without arguments"
    if script.get("module"):
        if not _MODULE.fullmatch(path):
            raise UserError(f"{source}: -m {path!r} is not a module name: verify runs nothing "
                            "from it", arguments="verify")
        found = _module_file(path, cwd)
        if found is not None and _inside(found, cwd):
            return [f"verify runs -m {path} ({os.path.realpath(found)}) again in {cwd}"
                    f"{with_args}, as {source} recorded it"]
        what = f"-m {path}, which is not a module file in {cwd}, the folder {source} recorded " \
               "(python would import it from elsewhere: installed code)"
    else:
        full = os.path.join(cwd, path)
        if os.path.isfile(full) and _inside(full, cwd):
            return [f"verify runs the script {os.path.realpath(full)} again in {cwd}"
                    f"{with_args}, as {source} recorded it"]
        what = (f"the script {os.path.realpath(full)}, which is outside {cwd}, the folder "
                f"{source} recorded")
    if not allow_code:
        raise UserError(f"{source}: verify would run {what}; {CONFIRM}",
                        arguments=("verify", "allow_code"))
    return [f"verify runs {what}{with_args} (allowed)"]
