"""The adapters' shared check of translated hyper-parameters."""

from __future__ import annotations

import pytest

from gmpo_plugins import get_loss
from gmpo_plugins.adapters._common import check_translated_hparams


class FrameworkError(ValueError):
    pass


def check(name: str, **params) -> None:
    check_translated_hparams(
        get_loss(name), params, setting_of=lambda h: f"--fw.{h}", context=f"loss={name}", error=FrameworkError
    )


def test_log_space_bound_is_explained_with_the_framework_setting():
    with pytest.raises(FrameworkError) as info:
        check("gmpo", eps_low=0.4, eps_high=-0.2)
    message = str(info.value)
    assert message.startswith("gmpo_plugins: --fw.eps_high=-0.2 is not valid for loss=gmpo: ")
    assert "LOG-space bound" in message and "0.4" in message and "> 0" in message


def test_ratio_space_bound_and_dual_clip():
    message = r"--fw.eps_low=1.5 .*RATIO-space bound: the ratio is clipped at 1 - eps_low"
    with pytest.raises(FrameworkError, match=message):
        check("grpo", eps_low=1.5)
    with pytest.raises(FrameworkError, match=r"--fw.dual_clip=0.9 .*dual-clip PPO"):
        check("grpo", dual_clip=0.9)


def test_valid_values_pass():
    check("gmpo", eps_low=0.4, eps_high=0.4)
    check("grpo", eps_low=0.2, eps_high=0.28, dual_clip=3.0, reduction="token-mean")


def test_a_loss_defined_by_its_reduction_says_so():
    with pytest.raises(FrameworkError) as info:
        check("dr_grpo", reduction="token-mean")
    message = str(info.value)
    assert "--fw.reduction='token-mean'" in message
    assert "dr_grpo is defined by its reduction 'seq-mean-token-sum-norm'" in message and "grpo" in message
