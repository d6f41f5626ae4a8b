"""A Hugging Face Trainer script written without layerscope: a tiny GPT-2 built from a config,
synthetic tokens.

tests/test_integrations.py runs it as it is under ``layerscope run`` and with
``--layerscope OUT`` (the one place that knows layerscope: adds its callback)."""
import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

callbacks = []


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--callback-steps", type=int, help="the callback's steps=")
    p.add_argument("--layerscope", metavar="OUT")
    args = p.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1,
                                       n_head=2, bos_token_id=0, eos_token_id=0))
    if args.layerscope:
        from layerscope.integrations.transformers import LayerscopeCallback

        callbacks.append(LayerscopeCallback(out=args.layerscope, steps=args.callback_steps))
    targs = TrainingArguments(output_dir=args.output_dir, max_steps=args.steps,
                              per_device_train_batch_size=4,
                              gradient_accumulation_steps=args.accumulate, learning_rate=1e-3,
                              logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                              disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=callbacks)
    trainer.train()
    print(f"optimizer steps: {trainer.state.global_step}")
    print(f"log entries: {len(trainer.state.log_history)}")


if __name__ == "__main__":
    main()
