"""channels-last for conv nets: convolutions on NHWC tensors use the faster kernels (oneDNN on
CPUs, cuDNN's tensor-core kernels on GPUs); nothing changes for a net without convolutions."""
from layerscope.advice.rule import Finding, Rule, amdahl_range, pick

SPEEDUP = {"cuda": (1.1, 1.5), "cpu": (1.0, 1.3)}


def check(facts) -> Finding | None:
    if not facts.get("conv_layers") or facts.get("channels_last"):
        return None
    share, what = facts.get("conv_share"), "convolution"
    if share is None:  # a training step's time is not split by layer type: bound it
        share, what = facts.get("compute_share"), "forward+backward (bounds convolution)"
    if not share:
        return None
    low, high, text = amdahl_range(share, SPEEDUP.get(facts.get("device"), SPEEDUP["cpu"]), what)
    return Finding(
        cause=f"{facts['conv_layers']} convolution layer(s) run on NCHW (contiguous) tensors",
        change="convert the model and its inputs to torch.channels_last "
               "(train --channels-last)",
        low=low, high=high, derivation=text, variant="channels-last",
        facts=pick(facts, "conv_layers", "conv_share", "compute_share", "device"))


RULE = Rule("channels-last", ("conv_layers", "conv_share or compute_share", "channels_last",
                              "device"),
            "f x (1 - 1/s), f = convolution share, s = 1.0..1.3 (CPU), 1.1..1.5 (CUDA)", check,
            edit="model = model.to(memory_format=torch.channels_last), and the same for each "
                 "input batch")
