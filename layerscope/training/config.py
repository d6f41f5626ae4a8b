"""What one ``layerscope train`` run is asked to do: the settings a checkpoint saves and a resumed
run validates (``checkpoint._config_problem``), apart from the loop that runs them.

Each setting is declared here once (``core.settings.option``): its default, its help, the parser
or choices its values must pass. ``TrainConfig`` validates itself when it is made, so the
Python API and ``layerscope train`` (whose options are built from these fields by
``cli.common.add_settings``) refuse the same values, each in its own words."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from layerscope.core import options, values
from layerscope.core.errors import UserError
from layerscope.core.settings import Settings, option

OPTIMIZERS = ("sgd", "adam", "adamw", "adadelta")  # training.recipes builds each of them
DISTRIBUTED = "several processes and machines (torch.distributed)"  # the options' group


@dataclass(kw_only=True)
class TrainConfig(Settings):
    """Every setting of ``layerscope train`` and ``layerscope.train``: a new one is a field here
    (the CLI's option, the API's argument, config.json and the report's ``config`` follow).
    Compared by value: a resumed run's settings are checked against the saved ones."""

    recipe: str = option("digits-cnn", "digits-cnn (default, offline), mnist-cnn, "
                                       "cifar10-resnet20, cifar100-resnet50", positional=True)
    epochs: int | None = option(None, parse=values.positive_int)
    steps: int | None = option(None, "stop after this many optimizer steps",
                               parse=values.positive_int)
    batch_size: int | None = option(None, parse=values.positive_int)
    lr: float | None = option(None, parse=values.finite_positive_float, maximum=values.LR_MAX)
    optimizer: str | None = option(None, choices=OPTIMIZERS)
    data_dir: str | None = option(None)
    download: bool = option(False, "download the dataset to --data-dir")
    synthetic: bool = option(False, "deterministic generated data of the real shapes and class "
                                    "counts")
    # (train, val) samples; default: the real sizes
    synthetic_size: tuple[int, int] | None = option(None, cli=False)
    device: str = options.device()
    memory_limit: int | None = options.memory_limit()
    num_workers: int = option(0, parse=values.non_negative_int, maximum=values.WORKERS_MAX)
    pin_memory: bool = option(False)
    compile: bool = option(False, "torch.compile the model")
    torchscript: bool = option(False, "torch.jit.trace the model")
    cudnn_benchmark: bool = option(False)
    amp: bool = option(False, "autocast (float16 on CUDA, bfloat16 on CPU)")
    channels_last: bool = option(False)
    profile: str | None = option(None, choices=("cprofile", "torch", "pyinstrument"))
    kernels: bool = option(False, "profile 3 training steps (after the first) with "
                                  "torch.profiler and join them to modules: CPU ops, device "
                                  "kernels and launch time per module, forward and backward; "
                                  "per step, device busy and idle (CUDA)")
    nvtx: bool = option(False, "NVTX ranges named after the step's phases and the model's "
                               "modules, for Nsight Systems (CUDA; a note and nothing else "
                               "without it)")
    dry_run: bool = option(False, "one small batch (8 samples unless --batch-size) through "
                                  "training, validation, checkpoint and outputs")
    resume: str | None = option(None, "a checkpoint or a run directory", metavar="CKPT",
                                reads=True)
    out: str | None = option(None, "run directory (default runs/RECIPE-TIME); -o, --html and "
                                   "--plot may go inside it", folder=True)
    tensorboard: bool = option(False, "TensorBoard scalars in RUN_DIR/tensorboard")
    seed: int = option(0, parse=values.seed)
    weights: str | None = option(None, "ImageNet weights for cifar100-resnet50", reads=True)
    threads: int | None = option(None, "torch intra-op threads", parse=values.thread_count)
    # excluded from the phase breakdown (ablation)
    warmup_steps: int = option(0, "steps left out of the phase breakdown",
                               parse=values.non_negative_int)
    evaluate: bool = option(True, "skip validation", flag="--no-eval")
    checkpoint_every: int | None = option(
        None, "also checkpoint every K optimizer steps (besides every epoch)",
        parse=values.positive_int, metavar="K")
    # several processes (torchrun/srun, or train --nproc-per-node): how the model is replicated
    # and how long a collective may wait before the run ends (seconds)
    strategy: str = option("ddp", "DistributedDataParallel (default) or FSDP2 fully_shard",
                           choices=("ddp", "fsdp"), group=DISTRIBUTED)
    comm_timeout: float = option(
        values.COMM_TIMEOUT_S, "a collective waiting longer ends the run (a hung or dead rank)",
        parse=values.finite_positive_float, maximum=values.COMM_TIMEOUT_MAX,
        metavar="SECONDS", group=DISTRIBUTED)

    def check(self) -> None:
        if self.kernels and self.profile == "torch":
            raise UserError("kernels runs torch.profiler itself over three steps: leave out "
                            "profile torch", arguments=("kernels", "profile"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True, eq=False)
class LaunchSettings(Settings):
    """How ``layerscope train`` starts its processes through torchrun (``training.distributed
    .launch``, which checks the node rank and the rendezvous against each other): options of
    the command, not settings of the run."""

    nproc_per_node: int | None = option(
        None, "launch N processes on this machine through torchrun (data parallel; "
              "--batch-size is per process)", parse=values.positive_int,
        maximum=values.NPROC_MAX, metavar="N", group=DISTRIBUTED)
    nnodes: int = option(1, "machines taking part (run the same command on each)",
                         parse=values.positive_int, maximum=values.NODES_MAX, group=DISTRIBUTED)
    node_rank: int = option(0, "this machine's rank, 0 .. --nnodes - 1",
                            parse=values.non_negative_int, maximum=values.NODES_MAX - 1,
                            group=DISTRIBUTED)
    rdzv_endpoint: str | None = option(None, "the machine of node rank 0 and a free port on it",
                                       parse=values.endpoint, metavar="HOST:PORT",
                                       group=DISTRIBUTED)
