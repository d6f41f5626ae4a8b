"""``layerscope predict``: top-1 and top-5 of one sample (validation index or image file)."""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from layerscope.core.errors import UserError, first_line
from layerscope.core.infiles import check_input_file
from layerscope.training.data import DATASETS, datasets


@dataclass
class Prediction:
    source: str
    label: int | None  # the true label when known (validation index)
    top: list[dict[str, Any]] = field(default_factory=list)  # class, name, probability
    kind: str = "predict"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _image(path: str, data: str) -> torch.Tensor:
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


def predict(source: str, *, index: int | None = None, image: str | None = None,
            data_dir: str | None = None, k: int = 5) -> Prediction:
    from layerscope.training.run_model import load_trained

    run = load_trained(source)
    state, recipe, model = run.state, run.recipe, run.module
    config = state["config"]
    classes = state.get("classes") or []
    if image is not None:
        x, label, where = _image(image, recipe.data), None, image
    else:
        _, val, _ = datasets(recipe.data, synthetic=config.get("synthetic", False),
                             data_dir=data_dir or config.get("data_dir"), download=False,
                             augment=False, seed=config.get("seed", 0),
                             image_size=recipe.image_size,
                             synthetic_size=tuple(config["synthetic_size"])
                             if config.get("synthetic_size") else None)
        index = 0 if index is None else index
        if not 0 <= index < len(val):
            raise UserError(f"index {index} is out of range: the validation set has "
                            f"{len(val)} samples", arguments="index")
        x, label = val[index]
        label, where = int(label), f"validation sample {index}"
    with torch.no_grad():
        out = model(x.unsqueeze(0)).float()[0]
    # models trained with the NLL loss already output log-probabilities
    probs = out.exp() if recipe.loss == "nll" else torch.softmax(out, dim=0)
    top = probs.topk(min(k, probs.numel()))
    return Prediction(where, label, [
        {"class": int(i), "name": classes[int(i)] if int(i) < len(classes) else str(int(i)),
         "probability": float(p)} for p, i in zip(top.values, top.indices)])
