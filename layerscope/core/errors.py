"""Errors that mean "the user's input was wrong": the CLI prints them as one line, exit code 2."""
from __future__ import annotations

import re


class UserError(Exception):
    """Bad input: the message names what was wrong and what to do.

    ``arguments``: the public API's arguments the message names, written in it as in Python
    (``batch_size must be at least 1``). The CLI shows each as the option that sets it instead
    (``--batch-size must be at least 1``): one translation, in ``cli.main``, from argparse's
    own dest -> option table. The first whole-word occurrence of each listed name is that
    argument (later ones are prose: "inputs 'y=1x8': the model has no input 'y'; its inputs
    are x").
    """

    def __init__(self, *args: object, arguments: str | tuple[str, ...] = ()) -> None:
        super().__init__(*args)
        self.arguments = (arguments,) if isinstance(arguments, str) else tuple(arguments)


_TORCH_TAIL = "(Could this error message be improved?"
# terminal escape sequences (colours, cursor moves): torch.onnx's exporter colours its errors
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def first_line(exc: BaseException | str, *, with_type: bool = False) -> str:
    """The first non-blank line of an exception's message (library errors such as torch.load's
    weights_only refusal span many lines; a report line takes only the first), or the
    exception's type name when the message is empty. ``with_type`` prefixes 'TypeName: '.
    Terminal escape sequences (colour codes) are removed: the line is plain text."""
    text = _ANSI.sub("", exc if isinstance(exc, str) else str(exc))
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.split(_TORCH_TAIL)[0].strip()  # PyTorch's plea, not part of the message
    if isinstance(exc, str):
        return line
    if not line:
        return type(exc).__name__
    return f"{type(exc).__name__}: {line}" if with_type else line


class LayerscopeWarning(UserWarning):
    """Something was wrong but the command carries on (a damaged cache is ignored): the CLI
    prints it as one line, ``layerscope: warning: ...``."""
