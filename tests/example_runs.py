"""The example spec (examples/frameworks) run by each framework's trainer in the tests: its files
and a freshly built model in a folder, what its first rollout must score, and the processes a
run left behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from itertools import combinations
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gmpo_plugins.frameworks.first_update import SIGN_LIKE, tolerance

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "frameworks"


def _module(name: str, path: Path) -> ModuleType:
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules.setdefault(name, module)  # a dataclass looks its module up while it is built
    module_spec.loader.exec_module(module)
    return module


def example_in(folder: Path, **replace: str) -> Path:
    """The example spec, its reward and prompts in ``folder``, with a freshly built model;
    ``replace`` maps spec text to its replacement (each must occur)."""
    for name in ("tiny.toml", "reward.py", "prompts.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    _module("build_tiny", EXAMPLE / "build_tiny.py").build_model(folder / "model")
    text = (folder / "tiny.toml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    (folder / "tiny.toml").write_text(text)
    return folder / "tiny.toml"


def adam_example_in(folder: Path, monkeypatch) -> Path:
    """``examples/frameworks/tiny_adam.toml`` with its prompts in ``folder`` and a freshly built
    model, SkyRL's Python 3.11 shims (``tests/skyrl/shims``) first on PYTHONPATH for the
    framework processes; returns the spec's path."""
    shims = Path(__file__).resolve().parent / "skyrl" / "shims"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(shims), os.environ.get("PYTHONPATH")])))
    example_in(folder)  # the model, the reward
    for name in ("tiny_adam.toml", "prompts_first_step.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    return folder / "tiny_adam.toml"


def first_rollout_reward(folder: Path, prompts: int = 2) -> float:
    """The mean reward of the first rollout every CPU stand-in draws for the example: the first
    ``prompts`` prompts of the file, 2 seeded samples each from the initial model, scored by the
    reward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    generation = _module("seeded_generation", EXAMPLES / "seeded_generation.py")
    model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "model")
    rows = [json.loads(line) for line in (folder / "prompts.jsonl").read_text().splitlines()[:prompts]]
    reward = _module("example_reward", folder / "reward.py")
    scores = []
    for row in rows:
        messages = [{"role": "user", "content": row["prompt"]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        for index in range(2):
            sample = generation.seeded_sample(model, ids["input_ids"], index, 8)
            text = tokenizer.decode(sample.token_ids, skip_special_tokens=True)
            scores.append(reward.reward(text, row["answer"]))
    return sum(scores) / len(scores)


def processes_naming(*texts: str) -> list[int]:
    """Ids of the processes, this one aside, whose command line contains one of ``texts``: what a
    run left behind (its folder, its Ray folder)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(text in cmdline for text in texts) and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


# the file each trainer's sync left after RL step 1: the parameters after its last optimiser step
SYNCED = {
    "verl": "weights/weights_0_1.pt",
    "openrlhf": "record/engine_weights_1.pt",
    "trl": "first_update.pt",
    "skyrl": "params_step1.pt",
}


def assert_last_step_is_the_synced_one(out, frameworks, steps: int) -> None:
    """The parameters a stand-in's hook saved after the last optimiser step are, to the bit, those the
    trainer's own weight sync handed its rollout engine: the hook reads what the trainer trains."""
    for framework in frameworks:
        saved = torch.load(out / framework / "optimiser_steps" / f"step_{steps}.pt")
        synced = torch.load(out / framework / SYNCED[framework])
        synced = synced.get("state_dict", synced)
        assert sorted(saved) == sorted(synced), framework
        assert all(torch.equal(saved[name], synced[name].float()) for name in saved), framework


def assert_every_pair_identical_sign_like(records: dict, frameworks: tuple[str, ...], reward: float) -> None:
    """Every pair of ``frameworks`` compared after each of the first RL step's two optimiser steps,
    sign-like (AdamW eps 1e-8) and identical within the tolerance of that step, on the same first
    rollout (each trainer's step-1 reward equal to ``reward``, the seeded sampler's)."""
    pairs = records["first_update"]
    for k in (1, 2):
        compared = sorted(tuple(pair["frameworks"]) for pair in pairs if pair["optimiser_step"] == k)
        assert compared == sorted(combinations(frameworks, 2)), k
    assert len(pairs) == 2 * len(list(combinations(frameworks, 2)))
    for pair in pairs:
        k = pair["optimiser_step"]
        assert pair["comparison"] == SIGN_LIKE
        assert pair["tolerance"] == tolerance("float32", k, SIGN_LIKE) == pytest.approx(2**k * 1e-5 - 1e-5)
        assert pair["rel"] <= pair["tolerance"] and pair["identical"] is True, pair
        assert pair["step_one_rewards"] == pytest.approx([reward] * 2, rel=1e-6)
    assert records["first_update_identical"] is True


def step_one_records(records: dict, frameworks: tuple[str, ...]) -> dict[str, dict]:
    """Each framework's record of RL step 1 (its logged metrics in the one vocabulary)."""
    return {name: [r for r in records["runs"][name]["records"] if r["step"] == 1][0] for name in frameworks}
