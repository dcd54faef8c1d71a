"""CPU stand-in (example, not shipped): `from vllm.utils import random_uuid` (openrlhf/trainer/ray/vllm_engine.py)."""

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
