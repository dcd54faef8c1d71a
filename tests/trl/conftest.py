"""Fixtures for the TRL adapter tests (real TRL on CPU, nothing downloaded)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402

from .tiny import PROMPTS, build_model_dir, build_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> str:
    return build_model_dir(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def moe_model_dir(tmp_path_factory) -> str:
    return build_model_dir(tmp_path_factory.mktemp("tiny-qwen2-moe"), moe=True)


@pytest.fixture()
def tokenizer():
    return build_tokenizer()


@pytest.fixture()
def prompts() -> Dataset:
    return Dataset.from_dict({"prompt": PROMPTS * 2})
