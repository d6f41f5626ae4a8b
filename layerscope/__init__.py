"""layerscope: where a model's compute, memory and time go."""
import importlib

from layerscope.core.report import LayerRow, Report, Totals
from layerscope.core.version import __version__
from layerscope.frontends import run_files as _run_files
from layerscope.renderers import display as _display

__all__ = ["analyze", "profile", "sweep", "ops", "train", "ablate", "predict", "activations",
           "compare", "graph", "export_onnx", "watch", "llm", "plan", "Report", "LayerRow",
           "Totals", "__version__", "scaling", "advise", "load", "memory", "diff",
           "ProfileSettings", "AnalyzeSettings"]


def load(path):
    """The result object of a JSON file layerscope saved, of any kind (``analyze ... -o
    r.json``, ``--format json``, a run directory's ``report.json``): a ``Report``,
    ``SweepReport``, ``TrainReport``, ... as the API call returned it, ready to show
    (``rich.print(result)``, a notebook cell) or to render (``layerscope render`` does the same).

    ``path`` is a str or ``os.PathLike``. A missing or unreadable file, a file that is not JSON,
    and JSON that is not a layerscope result (or was written by a newer layerscope) raise
    ``layerscope.errors.UserError`` with one line naming ``path``.
    """
    import os

    from layerscope.core.errors import UserError
    from layerscope.core.results import read_result

    try:
        name = os.fspath(path)
    except TypeError:
        raise UserError(f"path must be a file path (str or os.PathLike), got {path!r}") from None
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    return read_result(name)


# the public names made on first use, each by the module that defines it under the same name
# (``memory``: a training recipe's name is the step train runs, so training's wraps analysis's)
_LAZY = {
    "analyze": "layerscope.analysis.analyze",
    "profile": "layerscope.training.profiling",
    "AnalyzeSettings": "layerscope.analysis.analyze",
    "ProfileSettings": "layerscope.analysis.profiling",
    "sweep": "layerscope.analysis.sweep",
    "ops": "layerscope.analysis.op_profile",
    "train": "layerscope.training.loop",
    "ablate": "layerscope.training.ablation",
    "predict": "layerscope.training.predict",
    "memory": "layerscope.training.recipe_memory",
    "activations": "layerscope.analysis.activations",
    "compare": "layerscope.analysis.compare",
    "diff": "layerscope.analysis.diff",
    "graph": "layerscope.analysis.graph",
    "watch": "layerscope.training.watch",
    "scaling": "layerscope.training.scaling",
    "advise": "layerscope.advice",
    "export_onnx": "layerscope.analysis.onnx_export",
    "llm": "layerscope.analysis.llm",
    "plan": "layerscope.analysis.plan",
}


def __getattr__(name):  # lazy: `import layerscope` stays cheap and torch-free until needed
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'layerscope' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


# The API layer wires the layers below it together (docs/architecture.md): records draw themselves
# through the renderers, and the model router rebuilds training runs through training's recipes,
# without either lower layer importing the upper one.
def _load_training_run(path: str):
    from layerscope.training.run_model import load_trained

    return load_trained(path)


_display.install()
_run_files.install_run_loader(_load_training_run)
