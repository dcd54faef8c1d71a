"""The toy task: generator, reward, tokenizer."""

import pytest
import torch

from gmpo_plugins.compare.experiment.task import (
    VOCAB,
    Problem,
    RepeatTask,
    ReverseTask,
    build_char_tokenizer,
    make_task,
    reward,
)


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


def test_reverse_task_answers_are_17_tokens():
    task = ReverseTask()
    problems = task.sample(200, torch.Generator().manual_seed(0))
    tokenizer = build_char_tokenizer()
    lengths = {len(tokenizer(p.answer, add_special_tokens=False).input_ids) + 1 for p in problems}  # + EOS
    assert lengths == {17}
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
    assert len(tokenizer) == len(VOCAB) == 15
    assert tokenizer("7x03=", add_special_tokens=False).input_ids == [11, 14, 4, 7, 3]
    assert tokenizer("120=", add_special_tokens=False).input_ids == [5, 6, 4, 3]
    assert tokenizer.decode([13, 4, 1]) == "90<eos>"
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("987=", add_special_tokens=False).input_ids == [13, 12, 11, 3]


def test_repeat_task_problems_and_reward():
    task = RepeatTask()
    problems = task.sample(400, torch.Generator().manual_seed(0))
    for problem in problems:
        digit, times, count, sep = problem.prompt[0], problem.prompt[1], problem.prompt[2:4], problem.prompt[4]
        assert (times, sep) == ("x", "=") and digit.isdigit() and count.isdigit()
        assert problem.answer == digit * int(count) and 1 <= int(count) <= 12
        assert reward(problem.answer, True, problem.answer) == 1.0
        assert reward(problem.answer + digit, True, problem.answer) == 0.0  # one too many
        assert reward(problem.answer[:-1], True, problem.answer) == 0.0  # one too few
    assert Problem("3x04=", "3333") in task._all()
    assert task.max_answer_tokens == 13
    assert task.sample(50, torch.Generator().manual_seed(3)) == task.sample(50, torch.Generator().manual_seed(3))


def test_repeat_task_lengths_vary_between_and_within_groups():
    """Correct answers have n + 1 tokens (EOS included), n spread over 1..12: between groups the
    lengths differ. (Within a group they differ through wrong completions: checked on real
    rollouts in test_compare.py.)"""
    task = RepeatTask()
    tokenizer = build_char_tokenizer()
    problems = task.sample(2000, torch.Generator().manual_seed(1))
    lengths = [len(tokenizer(p.answer, add_special_tokens=False).input_ids) + 1 for p in problems]
    assert set(lengths) == set(range(2, 14))
    # uniform over the 88 training (digit, count) pairs; count n has k_n of them (k_n <= 10, 88 in all)
    train = task._split()[0]
    expected = {n + 1: sum(p.answer == p.answer[0] * n for p in train) / len(train) for n in range(1, 13)}
    counts = torch.bincount(torch.tensor(lengths))
    for length, share in expected.items():
        assert counts[length] / len(lengths) == pytest.approx(share, abs=0.03)
    mean = sum(length * share for length, share in expected.items())
    assert sum(lengths) / len(lengths) == pytest.approx(mean, abs=0.2) and 6.5 < mean < 8.5


@pytest.mark.parametrize("name", ["repeat", "reverse"])
def test_held_out_prompts_never_sampled(name):
    task = make_task(name)
    held = {p.prompt for p in task.held_out()}
    assert len(held) == task.held_out_size == 32
    assert task.held_out() == make_task(name).held_out()  # fixed, independent of any run seed
    for seed in range(3):
        sampled = {p.prompt for p in task.sample(2000, torch.Generator().manual_seed(seed))}
        assert not sampled & held
    if name == "repeat":  # the 120 prompts split into 88 training and 32 held-out ones
        assert len(sampled) == 88 and len(held | sampled) == 120


def test_reverse_held_out_excluded_even_when_drawn():
    """A tiny prompt space forces collisions: the held-out prompts must still never come back."""
    task = ReverseTask(min_digits=2, max_digits=2, held_out_size=20)
    held = {p.prompt for p in task.held_out()}
    sampled = {p.prompt for p in task.sample(3000, torch.Generator().manual_seed(0))}
    assert not sampled & held and len(sampled | held) == 100


def test_unknown_task():
    with pytest.raises(ValueError, match="valid: repeat, reverse"):
        make_task("sort")
