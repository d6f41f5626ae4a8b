"""What one ``layerscope train`` run is asked to do: the settings a checkpoint saves and a resumed
run validates (``checkpoint._config_problem``), apart from the loop that runs them."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class TrainConfig:
    recipe: str = "digits-cnn"
    epochs: int | None = None
    steps: int | None = None  # stop after this many optimizer steps in total
    batch_size: int | None = None
    lr: float | None = None
    optimizer: str | None = None
    data_dir: str | None = None
    download: bool = False
    synthetic: bool = False
    synthetic_size: tuple[int, int] | None = None  # (train, val) samples; default: the real sizes
    device: str = "cpu"
    num_workers: int = 0
    pin_memory: bool = False
    compile: bool = False
    torchscript: bool = False
    cudnn_benchmark: bool = False
    amp: bool = False
    channels_last: bool = False
    profile: str | None = None  # cprofile | torch | pyinstrument
    dry_run: bool = False
    resume: str | None = None
    out: str | None = None
    tensorboard: bool = False
    seed: int = 0
    weights: str | None = None
    warmup_steps: int = 0  # excluded from the phase breakdown (ablation)
    evaluate: bool = True
    threads: int | None = None
    checkpoint_every: int | None = None  # also a mid-epoch checkpoint every K optimizer steps
    # several processes (torchrun/srun, or train --nproc-per-node): how the model is replicated
    # and how long a collective may wait before the run ends (seconds)
    strategy: str = "ddp"
    comm_timeout: float = 600.0  # core.values.COMM_TIMEOUT_S

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
