"""GRPO with RREDCoT credit in a plain TRL script (docs/trl.md): a model, a dataset in the
NuminaMath-CoT layout (`problem`, `solution`), TRL's math accuracy reward, RREDCoTTrainer.

    python examples/rredcot_trl.py --model Qwen/Qwen2.5-Math-1.5B   # a GPU, NuminaMath-CoT
    python examples/rredcot_trl.py --tiny   # CPU, offline: tiny random model, $RREDCOT_MIRROR rows
"""

import argparse
import json
import os
from pathlib import Path

import torch
from datasets import Dataset, load_dataset
from trl.rewards import accuracy_reward

from rredcot import RREDCoTConfig, RREDCoTTrainer

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--model", default="Qwen/Qwen2.5-Math-1.5B")
parser.add_argument("--dataset", default="AI-MO/NuminaMath-CoT")
parser.add_argument("--output_dir", default="rredcot-grpo")
parser.add_argument("--max_steps", type=int, default=100)
parser.add_argument("--tiny", action="store_true", help="tiny random model, mirror rows, CPU")
cli = parser.parse_args()


def tiny_model(path: str) -> str:
    """A tiny random Qwen3 with the project's byte tokenizer, saved like a Hub checkpoint."""
    from rredcot.models.tiny import build_tiny_model
    from rredcot.models.tokenizer import build_chat_tokenizer

    tokenizer = build_chat_tokenizer()
    arch = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    arch |= {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}
    build_tiny_model(arch, tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def mirror_rows(n: int = 4) -> Dataset:
    """n short problems with worked solutions (Minerva) in the NuminaMath-CoT layout."""
    lines = (Path(os.environ["RREDCOT_MIRROR"]) / "minerva.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if 100 < len(r["solution"]) < 400][:n]
    return Dataset.from_list([{"problem": r["problem"], "solution": r["solution"]} for r in rows])


model = tiny_model(os.path.join(cli.output_dir, "base")) if cli.tiny else cli.model
dataset = mirror_rows() if cli.tiny else load_dataset(cli.dataset, split="train")
dataset = dataset.map(
    lambda row: {"prompt": [{"role": "user", "content": f"{row['problem']}\n{INSTRUCTION}"}]}
)
gpu = torch.cuda.is_available() and not cli.tiny
args = RREDCoTConfig(
    output_dir=cli.output_dir,
    credit="rredcot",  # reference solutions from the `solution` column (reference_column)
    max_steps=2 if cli.tiny else cli.max_steps,
    learning_rate=1e-2 if cli.tiny else 1e-6,
    per_device_train_batch_size=4 if cli.tiny else 8,
    num_generations=4 if cli.tiny else 8,
    max_completion_length=32 if cli.tiny else 1024,
    use_cpu=not gpu,
    bf16=gpu,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
)


def printable(completions, **kwargs):  # --tiny: a random model is never right; samples differ
    return [sum(ch.isprintable() for ch in c[0]["content"]) / 32 for c in completions]


rewards = [accuracy_reward, printable] if cli.tiny else [accuracy_reward]  # math-verify vs solution
trainer = RREDCoTTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=dataset)
trainer.train()
trainer.save_model(cli.output_dir)
trainer.save_state()  # trainer_state.json: the logged metrics, credit/… among them
