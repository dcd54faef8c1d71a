"""Group advantages, completion text, sampling and scoring with a scripted model."""

import math
from types import SimpleNamespace

import pytest
import torch

from gmpo_plugins.compare.experiment.rollout import collect_rollout, completion_text, group_advantages
from gmpo_plugins.compare.experiment.task import Problem, build_char_tokenizer


def test_group_advantages_known_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    advantages = group_advantages(rewards, group_size=4)
    # group 1: mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    # group 2: constant -> 0; group 3: mean 0.5, std sqrt(4 * 0.25 / 3)
    s3 = math.sqrt(1 / 3)
    expected = [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, -0.5 / s3, 0.5 / s3, -0.5 / s3, 0.5 / s3]
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=0)
    assert advantages[4:8].eq(0).all()  # exactly zero, not eps-small
    torch.testing.assert_close(advantages.view(3, 4).sum(1), torch.zeros(3), atol=1e-6, rtol=0)


def test_group_advantages_constant_zero_group_is_zero():
    assert group_advantages(torch.zeros(6), group_size=3).eq(0).all()


@pytest.mark.parametrize("group_size", [1, 5])
def test_group_advantages_bad_group_size(group_size):
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.zeros(8), group_size=group_size)


def test_completion_text():
    tokenizer = build_char_tokenizer()
    assert completion_text(tokenizer, [6, 5, 4, 1], finished=True) == "210"
    assert completion_text(tokenizer, [6, 5, 4], finished=False) == "210"
    assert completion_text(tokenizer, [6, 0, 4, 1], finished=True) == "2<pad>0"


class ScriptedModel:
    """Emits a fixed token script after the prompt, whatever the prompt (one-hot logits)."""

    def __init__(self, script, vocab, prompt_len):
        self.script, self.vocab, self.prompt_len = script, vocab, prompt_len

    def __call__(self, input_ids, attention_mask, position_ids):
        batch, length = input_ids.shape
        logits = torch.full((batch, length, self.vocab), -1e4)
        for row in range(batch):
            step = length - self.prompt_len
            token = self.script[row][min(step, len(self.script[row]) - 1)]
            logits[row, -1, token] = 0.0
        return SimpleNamespace(logits=logits)


def test_collect_rollout_scores_and_masks():
    tokenizer = build_char_tokenizer()
    problems = [Problem("12=", "21"), Problem("34=", "43")]
    ids = {c: tokenizer.convert_tokens_to_ids(c) for c in "1234"}
    eos = tokenizer.eos_token_id
    script = [
        [ids["2"], ids["1"], eos],  # right, stops
        [ids["2"], eos],  # wrong, stops early
        [ids["4"], ids["3"], eos],  # right
        [ids["4"], ids["3"], ids["3"], ids["3"], ids["3"], ids["3"]],  # never stops: truncated
    ]
    model = ScriptedModel(script, len(tokenizer), prompt_len=3)
    rollout = collect_rollout(
        model,
        tokenizer,
        problems,
        group_size=2,
        max_new_tokens=5,
        generator=torch.Generator(),
        device=torch.device("cpu"),
    )
    assert rollout.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(rollout.advantages, torch.tensor([0.7071, -0.7071, 0.7071, -0.7071]), atol=1e-4, rtol=0)
    assert rollout.response_mask.sum(1).tolist() == [3, 2, 3, 5]
    assert rollout.response_ids[1, 2:].eq(tokenizer.pad_token_id).all()
    assert rollout.prompt_len == 3 and rollout.input_ids.shape == (4, 8)


def test_greedy_decoding_takes_the_argmax():
    """temperature 0: the scripted (one-hot) token every time, whatever the generator."""
    from gmpo_plugins.compare.experiment.rollout import score_completions

    tokenizer = build_char_tokenizer()
    ids = {c: tokenizer.convert_tokens_to_ids(c) for c in "12"}
    script = [[ids["2"], ids["1"], tokenizer.eos_token_id], [ids["1"], tokenizer.eos_token_id]]
    model = ScriptedModel(script, len(tokenizer), prompt_len=3)
    scored = score_completions(
        model,
        tokenizer,
        [Problem("12=", "21"), Problem("12=", "21")],
        max_new_tokens=4,
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        temperature=0.0,
    )
    assert scored.rewards.tolist() == [1.0, 0.0]
