"""CPU stand-in (example, not shipped): `from vllm.inputs import TokensPrompt` (openrlhf/trainer/ray/vllm_engine.py)."""

from typing import TypedDict


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list
