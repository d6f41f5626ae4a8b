"""A Lightning script in the shape of Lightning's basic examples (a backbone inside a
LightningModule that logs its loss, a LightningDataModule, ``Trainer(...).fit``), on synthetic
data, CPU. It knows nothing of layerscope; tests/test_script_corpus.py runs it bare and under
``layerscope run``.

It prints only what does not depend on timing (the steps Lightning counted, the final loss), so
its standard output is the same on every run; it exits with ``--exit-code`` (a script's own
final status)."""
import argparse
import sys

import lightning.pytorch as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Backbone(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.l1 = nn.Linear(16, hidden)
        self.l2 = nn.Linear(hidden, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class LitClassifier(L.LightningModule):
    def __init__(self, learning_rate=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = Backbone()
        self.last_loss = None

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class RandomData(L.LightningDataModule):
    def __init__(self, batch_size=8):
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(1234)
        x = torch.randn(96, 16, generator=g)
        self.train = TensorDataset(x[:80], (x[:80].sum(1) > 0).long() + 2 * (x[:80, 0] > 0))
        self.val = TensorDataset(x[80:], (x[80:].sum(1) > 0).long())

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=self.batch_size)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--exit-code", type=int, default=0)
    args = p.parse_args()
    L.seed_everything(1234, verbose=False)
    model = LitClassifier()
    trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, val_check_interval=5,
                        limit_val_batches=2, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=RandomData())
    print(f"global steps: {trainer.global_step}")
    print(f"final loss: {model.last_loss.item():.6f}")
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
