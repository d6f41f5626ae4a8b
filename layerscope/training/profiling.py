"""``layerscope.profile``: the one entry point of the profile command. A model's layers and a
language model's decode steps are profiled by ``analysis.profiling``; inference over a data
set's loader (``loop``) by ``inference_loop``, which needs the training layer's data sets.
Every setting is a field of ``analysis.profiling.ProfileSettings``."""
from __future__ import annotations

import dataclasses
from typing import Any

from layerscope.analysis.profiling import (
    LOOP_WARMUP_DEFAULT,
    ProfileSettings,
    of_profile_call,
    profile_model,
    recorded_in,
)


def profile(model: Any = None, inputs: Any = None, *, settings: ProfileSettings | None = None,
            kwargs: dict[str, Any] | None = None, progress: Any = None, clock: Any = None,
            **overrides: Any):
    """Measured latency per layer (median, p10, p90, mean, n) of ``model`` on ``inputs``
    (``runtime.profile``; an ONNX file with onnxruntime on the CPU); with ``loop=DATASET``,
    inference over that data set's validation split, per phase and per layer (``runs``: the
    timed batches); with ``decode=N``, N decode steps of an ``hf:`` language model.
    ``settings``: a ``ProfileSettings``; keyword arguments override its fields. ``progress(done,
    total)`` as it goes; ``kwargs``: keyword tensors for forward."""
    s = of_profile_call(settings, model, inputs, overrides)
    if s.loop is None:
        return profile_model(s, kwargs=kwargs, progress=progress, clock=clock)
    from layerscope.training.inference_loop import profile_loop

    testing = {} if clock is None else {"clock": clock}
    s = dataclasses.replace(s, warmup=LOOP_WARMUP_DEFAULT if s.warmup is None else s.warmup)
    return recorded_in(profile_loop(
        s.model, s.loop, synthetic=s.synthetic, data_dir=s.data_dir, batch_size=s.batch_size,
        batches=s.runs, warmup=s.warmup,
        device=s.device, num_workers=s.num_workers, threads=s.threads, progress=progress,
        **testing), s)
