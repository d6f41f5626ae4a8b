"""layerscope: where a model's compute, memory and time go."""
from layerscope.core.report import LayerRow, Report, Totals

__version__ = "0.1.0"
__all__ = ["analyze", "profile", "sweep", "ops", "train", "ablate", "predict", "activations",
           "compare", "graph", "Report", "LayerRow", "Totals", "__version__"]


def __getattr__(name):  # lazy: `import layerscope` stays cheap and torch-free until needed
    if name == "analyze":
        from layerscope.analysis.analyze import analyze

        return analyze
    if name == "profile":
        from layerscope.analysis.runtime import profile

        return profile
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
    if name == "activations":
        from layerscope.analysis.activations import activations

        return activations
    if name == "compare":
        from layerscope.analysis.compare import compare

        return compare
    if name == "graph":
        from layerscope.analysis.graph import graph

        return graph
    raise AttributeError(f"module 'layerscope' has no attribute {name!r}")
