"""The Lightning and Hugging Face Trainer callbacks on CUDA: tiny models, a few steps."""
from __future__ import annotations

import pytest
from gpu_helpers import DRY_RUN, step_phase_sum

pytestmark = pytest.mark.cuda
STEPS, WARMUP = 8, 2


def _import_or_skip(name: str, figures: dict):
    try:
        return __import__(name, fromlist=["_"])
    except Exception as exc:  # noqa: BLE001 - any import failure is a recorded skip
        figures["skipped_because"] = f"import {name} failed: {type(exc).__name__}: {exc}"
        pytest.skip(figures["skipped_because"])


def _check(report: dict, figures: dict, device: str) -> None:
    b = report["breakdown"]
    figures.update(breakdown=b, peak_cuda_bytes=report.get("peak_cuda_bytes"))
    assert b["steps"] == STEPS - WARMUP
    assert step_phase_sum(b["seconds"]) == pytest.approx(b["wall_s"], rel=0.1)
    assert b["seconds"]["forward"] > 0 and b["seconds"]["backward"] > 0
    assert b["seconds"]["optimizer"] > 0
    if device == "cuda":
        assert b["seconds"]["h2d"] > 0, b["seconds"]


def test_lightning_callback_on_cuda(tmp_path, device, figures):
    L = _import_or_skip("lightning.pytorch", figures)
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from layerscope.integrations.lightning import LayerscopeCallback

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                           torch.nn.Linear(256, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 64), torch.randint(0, 4, (512,)))
    cb = LayerscopeCallback(out=str(tmp_path / "lightning.json"), warmup_steps=WARMUP)
    trainer = L.Trainer(max_steps=STEPS, accelerator="gpu" if device == "cuda" else "cpu",
                        devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
                        default_root_dir=str(tmp_path))
    trainer.fit(Net(), DataLoader(data, batch_size=32, pin_memory=device == "cuda"))
    figures["trainer_steps"] = trainer.global_step
    assert trainer.global_step == STEPS
    _check(cb.report.to_dict(), figures, device)
    assert (tmp_path / "lightning.json").exists()


def test_hf_trainer_callback_on_cuda(tmp_path, device, figures, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never download
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    transformers = _import_or_skip("transformers", figures)
    import torch

    from layerscope.integrations.transformers import LayerscopeCallback

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            ids = torch.randint(0, 128, (32,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0))
    cb = LayerscopeCallback(out=str(tmp_path / "hf.json"), warmup_steps=WARMUP)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=STEPS, per_device_train_batch_size=8,
        learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=DRY_RUN, disable_tqdm=True, dataloader_pin_memory=device == "cuda")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   callbacks=[cb])
    trainer.train()
    figures.update(trainer_steps=trainer.state.global_step,
                   model_device=str(next(model.parameters()).device))
    assert trainer.state.global_step == STEPS
    if not DRY_RUN:
        assert next(model.parameters()).device.type == "cuda"
    _check(cb.report.to_dict(), figures, device)
    assert (tmp_path / "hf.json").exists()
