"""A Hugging Face Trainer script in the shape of transformers' run_clm.py (a causal language
model trained from scratch from a config: arguments through ``HfArgumentParser`` with
``TrainingArguments``, text grouped into blocks of ``block_size`` tokens, labels = input ids,
``default_data_collator``, ``Trainer(...).train()``), on synthetic tokens, CPU, no download.
It knows nothing of layerscope; tests/test_script_corpus.py runs it bare and under
``layerscope run``.

Its standard output holds only what does not depend on timing (the optimizer steps the Trainer
counted, the training loss): the Trainer's own log printer, which prints the run's time, is
removed."""
import sys
from dataclasses import dataclass, field

import torch
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    HfArgumentParser,
    PrinterCallback,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclass
class ModelArguments:
    n_layer: int = field(default=1)
    n_embd: int = field(default=32)
    n_head: int = field(default=2)
    vocab_size: int = field(default=64)


@dataclass
class DataArguments:
    block_size: int = field(default=16)
    train_tokens: int = field(default=2048)


class Blocks(torch.utils.data.Dataset):
    """A token stream (synthetic text, already tokenized) grouped into blocks of block_size, as
    run_clm's group_texts does; the labels are the inputs (the model shifts them)."""

    def __init__(self, tokens: torch.Tensor, block_size: int):
        n = len(tokens) // block_size * block_size
        self.blocks = tokens[:n].view(-1, block_size)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        ids = self.blocks[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)
    config = GPT2Config(n_layer=model_args.n_layer, n_embd=model_args.n_embd,
                        n_head=model_args.n_head, vocab_size=model_args.vocab_size,
                        n_positions=data_args.block_size, bos_token_id=0, eos_token_id=0)
    model = AutoModelForCausalLM.from_config(config)
    tokens = torch.randint(0, model_args.vocab_size, (data_args.train_tokens,),
                           generator=torch.Generator().manual_seed(0))
    trainer = Trainer(model=model, args=training_args,
                      train_dataset=Blocks(tokens, data_args.block_size),
                      data_collator=default_data_collator)
    trainer.remove_callback(PrinterCallback)
    result = trainer.train()
    print(f"optimizer steps: {result.global_step}")
    print(f"train loss: {result.training_loss:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
