"""The toy task: generator, reward, tokenizer."""

import pytest
import torch

from gmpo_plugins.compare.task import VOCAB, Problem, ReverseTask, build_char_tokenizer, reward


def test_sample_is_seeded_and_well_formed():
    task = ReverseTask(min_digits=3, max_digits=6)
    first = task.sample(50, torch.Generator().manual_seed(7))
    again = task.sample(50, torch.Generator().manual_seed(7))
    other = task.sample(50, torch.Generator().manual_seed(8))
    assert first == again
    assert first != other
    for problem in first:
        digits, sep = problem.prompt[:-1], problem.prompt[-1]
        assert sep == "=" and digits.isdigit() and 3 <= len(digits) <= 6
        assert problem.answer == digits[::-1]
    assert {len(p.prompt) - 1 for p in first} == {3, 4, 5, 6}


def test_default_task_answers_are_at_least_16_tokens():
    task = ReverseTask()
    problems = task.sample(20, torch.Generator().manual_seed(0))
    tokenizer = build_char_tokenizer()
    for problem in problems:
        assert len(tokenizer(problem.answer, add_special_tokens=False).input_ids) + 1 >= 16  # + EOS
    assert task.max_answer_tokens == 17


def test_known_problem():
    generator = torch.Generator().manual_seed(0)
    (problem,) = ReverseTask(min_digits=4, max_digits=4).sample(1, generator)
    assert problem == Problem(prompt=problem.answer[::-1] + "=", answer=problem.answer)


@pytest.mark.parametrize(
    ("completion", "finished", "answer", "expected"),
    [
        ("4321", True, "4321", 1.0),
        (" 4321\n", True, "4321", 1.0),
        ("4321", False, "4321", 0.0),  # no EOS: truncated
        ("432", True, "4321", 0.0),
        ("43210", True, "4321", 0.0),
        ("4<pad>321", True, "4321", 0.0),
        ("", True, "4321", 0.0),
    ],
)
def test_reward(completion, finished, answer, expected):
    assert reward(completion, finished, answer) == expected


def test_invalid_lengths_rejected():
    with pytest.raises(ValueError, match="min_digits"):
        ReverseTask(min_digits=5, max_digits=4)


def test_char_tokenizer_round_trip(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = build_char_tokenizer()
    assert len(tokenizer) == len(VOCAB) == 14
    assert tokenizer("120=", add_special_tokens=False).input_ids == [5, 6, 4, 3]
    assert tokenizer.decode([13, 4, 1]) == "90<eos>"
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("987=", add_special_tokens=False).input_ids == [13, 12, 11, 3]
