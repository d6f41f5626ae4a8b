"""``layerscope predict``: top-1 and top-5 of one sample (validation index or image file)."""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from layerscope.core import values
from layerscope.core.errors import UserError, first_line
from layerscope.core.infiles import check_input_file
from layerscope.core.settings import REQUIRED, Settings, of_call, option

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass(kw_only=True, eq=False)
class PredictSettings(Settings):
    """Every setting of ``layerscope predict`` and ``layerscope.predict``: a new one is a
    field here (the CLI's option and the API's argument follow)."""

    source: str = option(REQUIRED, "a run directory or a checkpoint file", positional=True)
    index: int | None = option(None, "validation sample index (default 0)",
                               parse=values.non_negative_int, exclusive="sample")
    image: str | None = option(None, "an image file", exclusive="sample", reads=True)
    data_dir: str | None = option(None)
    k: int = option(5, "how many classes to list, most probable first",
                    parse=values.positive_int, cli=False)

    def check(self) -> None:
        if self.index is not None and self.image is not None:
            raise UserError("index and image each pick the sample: give one of them",
                            arguments=("index", "image"))


@dataclass
class Prediction:
    source: str
    label: int | None  # the true label when known (validation index)
    top: list[dict[str, Any]] = field(default_factory=list)  # class, name, probability
    kind: str = "predict"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _image(path: str, data: str) -> torch.Tensor:
    import torch

    from layerscope.training.data import DATASETS

    try:
        from PIL import Image
    except ImportError:
        raise UserError("image needs Pillow: pip install pillow", arguments="image") from None
    spec = DATASETS[data]
    check_input_file(path, "an image file")
    try:
        with warnings.catch_warnings():  # PIL warns from 89 million pixels, refuses from 179
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(path)
            img.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise UserError(f"image {path}: {first_line(exc)} (an image this large is refused "
                        "as a possible decompression bomb; give a smaller image)",
                        arguments="image") from exc
    except (OSError, ValueError) as exc:
        raise UserError(f"image {path}: not a readable image ({first_line(exc)})",
                        arguments="image") from exc
    channels, h, w = spec.shape
    img = img.convert("L" if channels == 1 else "RGB").resize((w, h))
    x = torch.tensor(list(img.getdata()), dtype=torch.float32).view(h, w, channels)
    x = x.permute(2, 0, 1) / 255.0
    if data == "digits":
        return x  # digits are scaled to [0, 1] like the training data (0..16 / 16)
    mean = torch.tensor(spec.mean).view(-1, 1, 1)
    std = torch.tensor(spec.std).view(-1, 1, 1)
    return (x - mean) / std


def predict(source: str | None = None, *, settings: PredictSettings | None = None,
            **overrides: Any) -> Prediction:
    """The ``k`` most probable classes (top-1 and top-5 by default) of a trained model (a run
    directory or a checkpoint) on one sample: validation sample ``index`` (default 0) or an
    ``image`` file. ``settings``: a ``PredictSettings``; keyword arguments override its
    fields."""
    import torch

    from layerscope.training.run_model import load_trained

    s = of_call(PredictSettings, settings, overrides, "predict", source=source)
    run = load_trained(s.source)
    recipe, model = run.recipe, run.module
    classes = run.state.get("classes") or []
    if s.image is not None:
        x, label, where = _image(s.image, recipe.data), None, s.image
    else:
        x, label, where = _validation_sample(run, s)
    with torch.no_grad():
        out = model(x.unsqueeze(0)).float()[0]
    # models trained with the NLL loss already output log-probabilities
    probs = out.exp() if recipe.loss == "nll" else torch.softmax(out, dim=0)
    top = probs.topk(min(s.k, probs.numel()))
    return Prediction(where, label, [
        {"class": int(i), "name": classes[int(i)] if int(i) < len(classes) else str(int(i)),
         "probability": float(p)} for p, i in zip(top.values, top.indices)])


def _validation_sample(run: Any, s: PredictSettings) -> tuple[Any, int, str]:
    """(input, true label, where) of validation sample ``s.index`` (default 0) of the data set
    the run trained on."""
    from layerscope.training.data import datasets

    config = run.state["config"]
    _, val, _ = datasets(run.recipe.data, synthetic=config.get("synthetic", False),
                         data_dir=s.data_dir or config.get("data_dir"), download=False,
                         augment=False, seed=config.get("seed", 0),
                         image_size=run.recipe.image_size,
                         synthetic_size=tuple(config["synthetic_size"])
                         if config.get("synthetic_size") else None)
    index = 0 if s.index is None else s.index
    if not 0 <= index < len(val):
        raise UserError(f"index {index} is out of range: the validation set has "
                        f"{len(val)} samples", arguments="index")
    x, label = val[index]
    return x, int(label), f"validation sample {index}"
