"""Reward of the tiny example task: reward(response, answer) -> float, the run spec's one signature.

1 when the expected digit is among the response's words, plus the fraction of the response's
words that are digits (so the samples of a prompt differ and group advantages are not zero).
"""


def reward(response: str, answer: str) -> float:
    words = response.split()
    digits = sum(word.isdigit() for word in words) / max(1, len(words))
    return float(answer in words) + digits
