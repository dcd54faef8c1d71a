"""``gmpo-plugins doctor``: a green report in this environment, and exit status 1 with the
failing check named when a fused path is wrong or a framework does not see the losses."""

from __future__ import annotations

import json

from gmpo_plugins.adapters import visibility
from gmpo_plugins.bench import selfcheck
from gmpo_plugins.cli import main
from gmpo_plugins.core.kernels import rowsum_torch
from gmpo_plugins.core.registry import list_losses


def doctor_json(capsys) -> tuple[int, dict]:
    status = main(["doctor", "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_doctor_is_green_here_and_checks_every_loss(capsys):
    status, result = doctor_json(capsys)
    assert status == 0 and result["ok"] is True
    assert set(result["environment"]) == {"python", "torch", "torch_cuda_build", "cuda_device", "triton"}
    assert [check["framework"] for check in result["frameworks"]] == ["verl", "OpenRLHF", "SkyRL", "TRL"]
    assert all(check["ok"] is not False for check in result["frameworks"])
    assert set(result["impl_auto"]["cpu"].values()) == {"torch"}  # no Triton on CPU
    assert list(result["impl_auto"]["cpu"]) == ["float32", "bfloat16", "float16", "float64"]
    checked = {(check["loss"], check["impl"]) for check in result["numeric"] if check["device"] == "cpu"}
    for spec in list_losses():
        # a fused loss: every impl but the oracle that runs here ("auto", "torch"; "triton" only
        # with the interpreter); any other loss: once through the registry
        expected = {impl for impl in spec.impls if selfcheck._runnable(impl, "cpu")} or {"registry"}
        assert {impl for loss, impl in checked if loss == spec.name} == expected, spec.name
    assert {"auto", "torch"} <= {impl for loss, impl in checked if loss == "gmpo"}
    assert all(check["ok"] for check in result["numeric"])


def test_doctor_fails_on_a_wrong_fused_gradient(capsys, monkeypatch):
    real = rowsum_torch.backward
    monkeypatch.setattr(rowsum_torch, "backward", lambda active, coef, dtype: real(active, 2 * coef, dtype))
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] gmpo impl=torch on cpu: gradient differs from eager" in out
    assert "[FAIL] gmpo_nonorm impl=auto on cpu: gradient differs from eager" in out
    assert "[FAIL] grpo" not in out  # the token-level losses do not use this backend
    assert out.rstrip().endswith("some checks FAILED")


def test_doctor_fails_when_a_framework_does_not_see_the_losses(capsys, monkeypatch):
    def unseen() -> str:
        raise LookupError("get_policy_loss_fn does not give our loss for ['gmpo_plugins.gmpo']")

    monkeypatch.setattr(visibility, "FRAMEWORKS", (("verl", "gmpo-plugins", unseen),))  # an installed distribution
    status, result = doctor_json(capsys)
    assert status == 1 and result["ok"] is False
    (check,) = result["frameworks"]
    assert check["ok"] is False and check["version"] == result["gmpo_plugins"]
    assert check["detail"] == "LookupError: get_policy_loss_fn does not give our loss for ['gmpo_plugins.gmpo']"


def test_doctor_settings_need_a_framework(capsys):
    assert main(["doctor", "a=b"]) == 2
    assert capsys.readouterr().err == "gmpo-plugins doctor: error: settings ['a=b'] need --framework\n"
    assert main(["doctor", "--framework", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_doctor_reports_the_tested_range_and_whether_the_installed_version_is_in_it(capsys, monkeypatch):
    monkeypatch.setattr(visibility, "FRAMEWORKS", (("TRL", "trl", lambda: "sees the losses"),))
    for installed, inside, text in (("1.16.0", True, "in range"), ("1.17.0", False, "OUTSIDE the tested range")):
        monkeypatch.setattr(visibility, "installed_version", lambda distribution, v=installed: v)
        status, result = doctor_json(capsys)
        (check,) = result["frameworks"]
        assert status == 0 and check["ok"] is True  # outside the range is reported, not a failure
        assert (check["version"], check["tested_range"], check["in_tested_range"]) == (
            installed,
            "trl>=1.14.2,<1.17",
            inside,
        )
        assert main(["doctor"]) == 0
        assert f"TRL       {installed} (tested trl>=1.14.2,<1.17: {text})" in capsys.readouterr().out
