"""channels-last for conv nets: convolutions on NHWC tensors use the faster kernels (oneDNN on
CPUs, cuDNN's tensor-core kernels on GPUs); nothing changes for a net without convolutions."""
from layerscope.advice.rule import STEADY, Finding, Rule, amdahl_range, need

SPEEDUP = {"cuda": (1.1, 1.5), "cpu": (1.0, 1.3)}


def _share(facts) -> tuple[float | None, str]:
    if facts.get("conv_share") is not None:
        return facts["conv_share"], "convolution"
    # a training step's time is not split by layer type: bound it
    return facts.get("compute_share"), "forward+backward (bounds convolution)"


NEEDS = (
    need("convolution layers counted (> 0)", "conv_layers", lambda f: bool(f.get("conv_layers"))),
    need("not channels-last already", "channels_last", lambda f: not f.get("channels_last")),
    need("a convolution share (profile) or a forward+backward share (> 0)",
         ("conv_share", "compute_share"), lambda f: bool(_share(f)[0])),
    STEADY,
)


def check(facts) -> Finding | None:
    share, what = _share(facts)
    if not share:
        return None
    low, high, text = amdahl_range(share, SPEEDUP.get(facts.get("device"), SPEEDUP["cpu"]), what)
    return Finding(
        cause=f"{facts['conv_layers']} convolution layer(s) run on NCHW (contiguous) tensors",
        change="convert the model and its inputs to torch.channels_last "
               "(train --channels-last)",
        low=low, high=high, derivation=text, variant="channels-last")


RULE = Rule("channels-last", ("conv_share", "compute_share", "device"),
            "f x (1 - 1/s), f = convolution share, s = 1.0..1.3 (CPU), 1.1..1.5 (CUDA)", check,
            needs=NEEDS,
            edit="model = model.to(memory_format=torch.channels_last), and the same for each "
                 "input batch")
