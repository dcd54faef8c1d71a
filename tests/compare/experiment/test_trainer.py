"""Trainer helpers with hand-computed values."""

import math

import pytest
import torch

from gmpo_plugins.compare.experiment.trainer import _aggregate, gather_log_probs, post_update_spread


def test_post_update_spread_known_values():
    log_ratio = torch.tensor([[0.1, 0.3, 9.0], [-0.2, 9.0, 9.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    spread = post_update_spread(log_ratio, mask)
    # valid values sorted: -0.2, 0.1, 0.3; linear interpolation at 0.02 and 1.98
    assert spread["post_log_ratio_q01"] == pytest.approx(-0.2 + 0.02 * 0.3)
    assert spread["post_log_ratio_q99"] == pytest.approx(0.1 + 0.98 * 0.2)
    # sequence weights exp(mean): exp(0.2), exp(-0.2); the empty row is ignored
    assert spread["post_seq_weight_min"] == pytest.approx(math.exp(-0.2))
    assert spread["post_seq_weight_max"] == pytest.approx(math.exp(0.2))


def test_aggregate_min_max_mean():
    metrics = [
        {"log_ratio_min": -1.0, "log_ratio_max": 2.0, "clip_frac": 0.1},
        {"log_ratio_min": -3.0, "clip_frac": 0.3},
    ]
    assert _aggregate(metrics) == {"log_ratio_min": -3.0, "log_ratio_max": 2.0, "clip_frac": pytest.approx(0.2)}


def test_gather_log_probs():
    log_softmax = torch.log_softmax(torch.tensor([[[0.0, 1.0, 2.0], [2.0, 0.0, 0.0]]]), dim=-1)
    tokens = torch.tensor([[2, 0]])
    expected = torch.tensor([[2.0 - math.log(1 + math.e + math.e**2), 2.0 - math.log(math.e**2 + 2)]])
    torch.testing.assert_close(gather_log_probs(log_softmax, tokens), expected)


def test_length_spread_known_values():
    from gmpo_plugins.compare.experiment.trainer import length_spread

    # lengths, groups of 2: [3, 1] and [2, 2]: ranges 2 and 0 -> 1.0; group means 2 and 2 -> spread 0
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]]).bool()
    assert length_spread(mask, 2) == {"group_len_range": 1.0, "group_len_spread": 0.0}
    # groups [3, 1] and [1, 1]: ranges 2, 0 -> 1.0; means 2 and 1 -> population std 0.5
    mask[2, 1] = False
    mask[3, 1] = False
    assert length_spread(mask, 2) == {"group_len_range": 1.0, "group_len_spread": 0.5}
