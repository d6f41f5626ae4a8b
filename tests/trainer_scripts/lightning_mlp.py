"""A Lightning script written without layerscope: an MLP on synthetic data, two epochs.

tests/test_integrations.py runs it as it is under ``layerscope run`` and with
``--layerscope OUT`` (the one place that knows layerscope: adds its callback)."""
import argparse

import lightning.pytorch as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

callbacks = []


class Net(L.LightningModule):
    def __init__(self, manual, fail_at):
        super().__init__()
        self.fail_at = fail_at
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        self.automatic_optimization = not manual

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step == self.fail_at:
            raise RuntimeError(f"failed at step {self.fail_at}")
        loss = F.cross_entropy(self(x), y)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--manual", action="store_true")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--val", action="store_true", help="validate every epoch")
    p.add_argument("--fail-at", type=int, default=-1, help="raise at this optimizer step")
    p.add_argument("--steps", type=int, help="the callback's steps=")
    p.add_argument("--layerscope", metavar="OUT")
    args = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    if args.layerscope:
        from layerscope.integrations.lightning import LayerscopeCallback

        callbacks.append(LayerscopeCallback(out=args.layerscope, steps=args.steps))
    trainer = L.Trainer(max_epochs=args.epochs, limit_train_batches=args.batches,
                        limit_val_batches=2,
                        accumulate_grad_batches=args.accumulate, accelerator="cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=callbacks)
    val = DataLoader(data, batch_size=64) if args.val else None
    trainer.fit(Net(args.manual, args.fail_at), DataLoader(data, batch_size=16, shuffle=True),
                val)
    print(f"optimizer steps: {trainer.global_step}")


if __name__ == "__main__":
    main()
