"""Configurations the loss or SkyRL refuses: ``python -m skyrl_cpu`` exits with status 2 and one
line naming the setting, before Ray starts (seconds, never a hang)."""

from __future__ import annotations

import pytest

from .harness import ALGORITHM, launch

# importing SkyRL and torch takes a few seconds; a run that starts Ray would take far longer
TIMEOUT_S = 120


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (f"{ALGORITHM}.policy_loss_type=gmpo_typo", "policy_loss_type"),
        (f"{ALGORITHM}.loss_reduction=token_mean", f"{ALGORITHM}.loss_reduction"),
        (f"{ALGORITHM}.eps_clip_low=0", f"{ALGORITHM}.eps_clip_low"),
    ],
)
def test_bad_configuration_exits_naming_the_setting(base, override, named, tmp_path):
    done = launch(["--out", str(tmp_path), *base, override], TIMEOUT_S)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m skyrl_cpu: invalid configuration:")
    assert named in last
    assert not (tmp_path / "metrics.json").exists()
