"""Tiny, download-free ingredients for real TRL runs: a random tiny Qwen2 (or Qwen2-MoE)
saved to a folder, a character-level tokenizer built with ``tokenizers``, a reward
function, and hand-built GRPO micro-batches for calling ``_compute_loss`` directly."""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tests.tiny_models import tiny_model

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARACTERS = list(string.ascii_lowercase + string.digits + " +=?.")
VOCAB = 64
PROMPTS = ["1 + 1 =", "2 + 3 =", "what is 7?", "count to 4", "abc", "xyz 9"]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; left padding as generation needs."""
    vocab = {token: index for index, token in enumerate(SPECIALS + CHARACTERS)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(""), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_model_dir(path, *, seed: int = 0, moe: bool = False) -> str:
    """A random tiny Qwen2 (``tests.tiny_models``, vocab 64), or its 4-expert Qwen2-MoE, saved with its tokenizer."""
    tokenizer = build_tokenizer()
    model = tiny_model(
        "qwen2_moe" if moe else "qwen2",
        VOCAB,
        seed=seed,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def count_digits_reward(completions, **kwargs) -> list[float]:
    """Reward: number of digits in the completion, so rewards differ within a group."""
    return [float(sum(ch.isdigit() for ch in completion)) for completion in completions]


def micro_batch(
    trainer,
    *,
    seed: int,
    batch: int = 6,
    prompt_length: int = 4,
    length: int = 7,
    spread: float = 0.3,
    advantages: torch.Tensor | None = None,
) -> dict:
    """A GRPO micro-batch as GRPOTrainer hands it to ``_compute_loss``: random prompt and
    completion tokens, left-padded prompts, right-padded completions of varied lengths,
    advantages of both signs, and old/ref log-probs = the model's current log-probs plus
    Gaussian noise of std ``spread`` (so that some tokens fall outside the clip band)."""
    generator = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, VOCAB, (batch, prompt_length), generator=generator)
    completion_ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    prompt_mask = torch.ones(batch, prompt_length, dtype=torch.long)
    prompt_mask[0, :2] = 0
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    completion_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    if advantages is None:
        advantages = torch.randn(batch, generator=generator)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
    }
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1),
            length,
        )
    inputs["old_per_token_logps"] = logps + spread * torch.randn(logps.shape, generator=generator)
    inputs["ref_per_token_logps"] = logps + spread * torch.randn(logps.shape, generator=generator)
    return inputs


def grpo_config(output_dir, config_class=None, **overrides):
    """A CPU GRPOConfig (or ``config_class``) small enough for a few real steps in seconds."""
    if config_class is None:
        from trl import GRPOConfig as config_class
    settings = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        num_iterations=2,
        max_steps=3,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,  # float32 throughout (TRL enables bf16 autocast by default, also on CPU)
        seed=0,
    )
    settings.update(overrides)
    return config_class(**settings)


def run_loss(trainer, inputs, *, accumulation: int = 1) -> tuple[torch.Tensor, dict, dict]:
    """Call ``trainer._compute_loss`` once in train mode as the training loop would and
    back-propagate; returns (loss, gradients by parameter name, last logged metrics)."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = accumulation
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}
    metrics = {key: values[-1] for key, values in trainer._metrics["train"].items() if values}
    return loss.detach(), grads, metrics


def max_grad_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a, "both runs must produce gradients for the same parameters"
    return max((a[name] - b[name]).abs().max().item() for name in a)
