"""A data-parallel script in the shape of PyTorch's DDP examples (distributed/ddp-tutorial-series
multigpu_torchrun.py): the process group from torchrun's environment, the model wrapped in
DistributedDataParallel, a DistributedSampler with set_epoch, a small Trainer class; gloo on CPU.
It knows nothing of layerscope; tests/test_script_corpus.py runs it under torchrun and under
``layerscope run --nproc-per-node 2``.

Rank 0 prints what does not depend on timing (the steps this rank ran, counted by the script,
and the final loss), so the standard output is the same on every run."""
import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, get_rank, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomPairs(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 20, generator=g)
        self.y = torch.randn(size, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.rank = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.steps = 0
        self.loss = None

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        self.loss = loss.detach()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    init_process_group(backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    dataset = RandomPairs(64)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False,
                        sampler=DistributedSampler(dataset))
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-2))
    trainer.train(args.epochs)
    if get_rank() == 0:
        print(f"steps on rank 0: {trainer.steps}")
        print(f"final loss: {trainer.loss.item():.6f}")
    destroy_process_group()


if __name__ == "__main__":
    main()
