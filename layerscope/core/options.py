"""The options several commands share, each declared once as a settings field
(``core.settings.option``): a command's settings class takes them by calling these
(``device: str = options.device()``), so the flag, its help, its parser and its limits are
the same everywhere they appear, on the command line and in the Python API."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from layerscope.core import values
from layerscope.core.errors import UserError
from layerscope.core.settings import REQUIRED, one_of, option

MODEL_HELP = ("built-in name (resnet50, resnet20, mnist-cnn, llama-3-8b, ...), "
              "hf:PATH/config.json, file.py:factory, package.module:factory or a TorchScript "
              "file")
INPUTS_HELP = ("input shape such as 1x3x224x224 or 1x128:int64 (scalar: a 0-d tensor), in "
               "forward's argument order; NAME=SHAPE[:DTYPE] passes a keyword argument "
               "(attention_mask=1x128:int64); repeat for several inputs")
MEMORY_LIMIT_HELP = ("watch every tensor the run makes: an allocation that would take the live "
                     "tensor bytes above SIZE (512MB, 2GiB) raises torch.OutOfMemoryError, and "
                     "the report's post-mortem says what was alive, by module and kind "
                     "(slower: every op is checked)")
OPTIMIZER_NAMES = ("sgd", "momentum", "adam", "adamw")  # analyze's and memory's optimizer
MODES = ("inference", "training")
ATTENTION_COUNTS = ("causal", "full")


def model(help: str = MODEL_HELP) -> Any:
    """The model a command reads (a positional argument; an nn.Module in the Python API, so
    the saved result names it in its header instead of its settings)."""
    return option(REQUIRED, help, positional=True, record=False)


def inputs(help: str = INPUTS_HELP, metavar: str = "[NAME=]SHAPE[:DTYPE]") -> Any:
    """--input, repeated: the model's inputs as shapes (tensors in the Python API; the saved
    result lists their shapes in its header)."""
    return option(None, help, flag="--input", append=True, metavar=metavar, record=False)


def batch_size(help: str = "override the first dimension") -> Any:
    return option(None, help, parse=values.positive_int)


def device() -> Any:
    """--device: cpu or cuda (``core.values.device``; whether a GPU is there is the caller's
    check)."""
    return option("cpu", values.DEVICE_HELP, parse=values.device)


def threads(help: str | None = "torch intra-op threads", default: int | None = None) -> Any:
    return option(default, help, parse=values.thread_count)


def memory_limit() -> Any:
    """--memory-limit SIZE (run, train): the out-of-memory post-mortem."""
    return option(None, MEMORY_LIMIT_HELP, parse=values.byte_size, metavar="SIZE")


def mode() -> Any:
    """--mode inference|training: one forward pass, or a training step (analyze, memory)."""
    return option("inference", choices=MODES)


def optimizer(help: str, names: tuple[str, ...] = OPTIMIZER_NAMES,
              default: str | None = "adam") -> Any:
    """--optimizer: sgd (no state), momentum (SGD with momentum 0.9: one state per
    parameter), adam or adamw (two); ``names``: the choices."""
    return option(default, help, choices=names)


def seq_len() -> Any:
    """--seq-len: the S of a language model's token-id inputs."""
    return option(None, "sequence length of token-id inputs (B x S), e.g. for the LLM presets "
                        "(default 2048, gpt2 1024)", parse=values.positive_int, metavar="S")


def attention() -> Any:
    return option("causal", "count causal attention kernels (is_causal=True) as the lower "
                            "triangle incl. the diagonal, s(s+1)/2 scores per head (causal, "
                            "default), or as the whole matrix the math fallback computes (full)",
                  choices=ATTENTION_COUNTS)


def ort_level(flag: str | None = None, note: str = "") -> Any:
    """onnxruntime's graph optimisation level (``profile --optimization``, ``verify
    --ort-optimization``): one vocabulary, ``core.values.ORT_LEVELS``, with its aliases."""
    return option(values.ORT_LEVELS[0], values.ORT_LEVEL_HELP + note, parse=values.ort_level,
                  choices=values.ORT_LEVELS, flag=flag)


def kernels(help: str) -> Any:
    """--kernels: a torch.profiler window joined to the model's modules (profile, run)."""
    return option(False, help)


def nvtx(help: str) -> Any:
    """--nvtx: NVTX ranges named after the modules and phases, for Nsight Systems."""
    return option(False, help)


# --- set36a
# The title argparse gives a parser's plain options (Python 3.10+). A field declared in this
# group is listed among them, where the command adds the group: after an option the command
# declares by hand between (``graph``, ``export``: -o after --batch-size, as they always were).
PLAIN = "options"
# --- set36b
def listed(item: Callable[..., Any] | None, allowed: tuple[str, ...] | None = None,
           what: str = "") -> Callable[..., list[Any]]:
    """The parser of a list setting: a comma-separated text (``1,16,64``, the CLI's) or a
    sequence, each item checked by ``item`` (None: kept as given) and, with ``allowed``,
    one of them ("unknown device 'tpu' in devices: use cpu or cuda"); at least one."""
    def parse(value: Any, name: str | None = None) -> list[Any]:
        if isinstance(value, str):
            items = values.comma_list(value, name, item=item or (lambda t, n: t))
        else:
            items = [v if v is None or item is None else item(v, f"{name} item" if name else None)
                     for v in value]
        bad = [v for v in items if allowed is not None and v not in allowed]
        if bad:
            raise UserError(f"unknown {what} {bad[0]!r}{f' in {name}' if name else ''}: use "
                            f"{one_of(allowed or ())}", arguments=(name,) if name else ())
        if not items:
            raise UserError(f"{name} must list at least one {what or 'value'}",
                            arguments=(name,) if name else ())
        return items

    parse.__name__ = "listed"
    return parse
