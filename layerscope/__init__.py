"""layerscope: where a model's compute, memory and time go."""
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


def __getattr__(name):  # lazy: `import layerscope` stays cheap and torch-free until needed
    if name == "analyze":
        from layerscope.analysis.analyze import analyze

        return analyze
    if name == "profile":
        from layerscope.training.profiling import profile

        return profile
    if name == "AnalyzeSettings":
        from layerscope.analysis.analyze import AnalyzeSettings

        return AnalyzeSettings
    if name == "ProfileSettings":
        from layerscope.analysis.profiling import ProfileSettings

        return ProfileSettings
    if name == "sweep":
        from layerscope.analysis.sweep import sweep

        return sweep
    if name == "ops":
        from layerscope.analysis.op_profile import ops

        return ops
    if name == "train":
        from layerscope.training.loop import train

        return train
    if name == "ablate":
        from layerscope.training.ablation import ablate

        return ablate
    if name == "predict":
        from layerscope.training.predict import predict

        return predict
    if name == "memory":  # a training recipe's name is the step train runs
        from layerscope.training.recipe_memory import memory

        return memory
    if name == "activations":
        from layerscope.analysis.activations import activations

        return activations
    if name == "compare":
        from layerscope.analysis.compare import compare

        return compare
    if name == "diff":
        from layerscope.analysis.diff import diff

        return diff
    if name == "graph":
        from layerscope.analysis.graph import graph

        return graph
    if name == "watch":
        from layerscope.training.watch import watch

        return watch
    if name == "scaling":
        from layerscope.training.scaling import scaling

        return scaling
    if name == "advise":
        from layerscope.advice import advise

        return advise
    if name == "export_onnx":
        from layerscope.analysis.onnx_export import export_onnx

        return export_onnx
    if name == "llm":
        from layerscope.analysis.llm import llm

        return llm
    if name == "plan":
        from layerscope.analysis.plan import plan

        return plan
    raise AttributeError(f"module 'layerscope' has no attribute {name!r}")


# The API layer wires the layers below it together (docs/architecture.md): records draw themselves
# through the renderers, and the model router rebuilds training runs through training's recipes,
# without either lower layer importing the upper one.
def _load_training_run(path: str):
    from layerscope.training.run_model import load_trained

    return load_trained(path)


_display.install()
_run_files.install_run_loader(_load_training_run)
