"""examples/openrlhf/run_gmpo.sh (a GPU command, not run here): its gmpo-openrlhf arguments parse with
gmpo-openrlhf's own parser (OpenRLHF's train_ppo_ray parser plus our checks), without training."""

from __future__ import annotations

import shlex
from pathlib import Path

from gmpo_plugins.adapters.openrlhf.cli import parse_args

SCRIPT = Path(__file__).parents[3] / "examples" / "openrlhf" / "run_gmpo.sh"
VALUES = {"$MODEL": "Qwen/Qwen2.5-Math-7B", "$PROMPTS": "prompts.jsonl", "$REWARD": "reward.py", "$OUT": "out"}


def script_arguments() -> list[str]:
    """The words after ``gmpo-openrlhf`` in the script, with its variables filled in."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    command = next(line for line in text.splitlines() if "-- gmpo-openrlhf" in line)
    for name, value in VALUES.items():
        command = command.replace(name, value)
    words = shlex.split(command)
    return words[words.index("gmpo-openrlhf") + 1 :]


def test_the_example_says_it_is_not_run_here():
    assert "NOT RUN by this project's tests" in SCRIPT.read_text()


def test_the_example_arguments_parse_with_gmpo_openrlhfs_parser():
    args = vars(parse_args(script_arguments()))
    assert args["actor.policy_loss_type"] == "gmpo"
    assert args["actor.eps_clip_low_high"] == [0.4, 0.4]
    assert args["algo.advantage.estimator"] == "group_norm" and args["algo.kl.init_coef"] == 0
    assert (args["rollout.n_samples_per_prompt"], args["rollout.batch_size"], args["train.batch_size"]) == (8, 128, 128)
    assert args["actor.adam.lr"] == 1e-6 and args["rollout.max_new_tokens"] == 3000
    assert args["vllm.num_engines"] * args["vllm.tensor_parallel_size"] == 8 and args["ds.zero_stage"] == 3
