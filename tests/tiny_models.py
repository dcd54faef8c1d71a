"""Tiny randomly initialised causal LMs for the tests, built in the test (nothing is downloaded).

One size for every framework's tests (``TINY``: hidden 32, 2 layers, 4 attention heads over 2
key/value heads, 128 positions, lm_head untied from the embeddings), float32, seeded. What a
test needs beyond that is an argument at its call site: the vocabulary and special-token ids of
its tokenizer, eager attention, and so on.

transformers is imported inside the functions: each nox session's virtualenv has its own
transformers version (see noxfile.py), and all of them have these architectures.
"""

from __future__ import annotations

from typing import Any

import torch

# architecture -> (configuration class, causal-LM class), both in transformers
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
}
TINY: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
}
# qwen2_moe on top of TINY: 4 experts of width 32, 2 per token, a shared expert of width 32
TINY_MOE: dict[str, Any] = {
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "router_aux_loss_coef": 0.01,
}


def _classes(architecture: str) -> tuple[type, type]:
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {architecture!r}")
    import transformers

    config_name, model_name = ARCHITECTURES[architecture]
    return getattr(transformers, config_name), getattr(transformers, model_name)


def tiny_config(architecture: str, vocab_size: int, **overrides: Any) -> Any:
    """The transformers configuration of a tiny ``architecture`` model.

    Args:
        architecture: a key of ``ARCHITECTURES`` ("llama", "qwen2", "qwen2_moe").
        vocab_size: rows of the embedding and of lm_head.
        **overrides: configuration fields that replace or add to ``TINY`` (e.g. ``pad_token_id``,
            ``eos_token_id``, ``bos_token_id=None``, ``attn_implementation="eager"``).

    Returns:
        The configuration (``LlamaConfig``, ``Qwen2Config`` or ``Qwen2MoeConfig``).
    """
    config_class, _ = _classes(architecture)
    moe = TINY_MOE if architecture == "qwen2_moe" else {}
    return config_class(**{**TINY, **moe, "vocab_size": vocab_size, **overrides})


def tiny_model(architecture: str, vocab_size: int, *, seed: int = 0, **overrides: Any) -> Any:
    """A randomly initialised tiny causal LM: ``torch.manual_seed(seed)``, then the model class of
    ``tiny_config(architecture, vocab_size, **overrides)`` (float32 weights, the default dtype).

    Args:
        architecture: a key of ``ARCHITECTURES``.
        vocab_size: rows of the embedding and of lm_head.
        seed: the global torch seed set right before the weights are drawn.
        **overrides: configuration fields, as for ``tiny_config``.

    Returns:
        The model (e.g. ``LlamaForCausalLM``) in train mode, as constructed.
    """
    config = tiny_config(architecture, vocab_size, **overrides)
    _, model_class = _classes(architecture)
    torch.manual_seed(seed)
    return model_class(config)
