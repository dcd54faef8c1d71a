"""``gmpo-openrlhf``: OpenRLHF's train_ppo_ray parser with registry names, usage errors for
refused settings, the runtime env handed to ``ray.init``; the light Python API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gmpo_plugins.adapters.openrlhf import HOOK, hook, runtime_env, version
from gmpo_plugins.adapters.openrlhf.cli import main, parse_args

GROUP = ["--algo.advantage.estimator", "group_norm", "--rollout.n_samples_per_prompt", "2", "--algo.kl.use_loss"]
OPENRLHF_ENV_VARS = {"TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"}


class _RayInitCalled(Exception):
    pass


def record_ray_init(monkeypatch, argv):
    """Run ``main(argv)`` up to OpenRLHF's ``ray.init`` and return the kwargs it got."""
    import ray

    seen = {}

    def fake_init(*args, **kwargs):
        seen.update(kwargs)
        raise _RayInitCalled

    monkeypatch.setattr(ray, "init", fake_init)
    with pytest.raises(_RayInitCalled):
        main(argv)
    return seen


def test_parses_registry_names(loss_module):
    args = parse_args(["--actor.policy_loss_type", "gmpo", "--actor.eps_clip_low_high", "0.4", "0.4", *GROUP])
    assert getattr(args, "actor.policy_loss_type") == "gmpo"
    assert getattr(args, "actor.eps_clip_low_high") == [0.4, 0.4]
    args = parse_args(
        ["--actor.policy_loss_type", "gmpo_plugins.gspo", "--actor.loss_agg_mode", "seq-mean-token-mean", *GROUP]
    )
    assert getattr(args, "actor.policy_loss_type") == "gmpo_plugins.gspo"
    assert getattr(parse_args(["--actor.policy_loss_type", "ppo", *GROUP]), "actor.policy_loss_type") == "ppo"


def test_unknown_name_is_rejected_listing_the_valid_ones(loss_module, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--actor.policy_loss_type", "gmpoo", *GROUP])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --actor.policy_loss_type: invalid choice: 'gmpoo'" in err
    for name in ("ppo", "gspo", "gmpo", "gmpo_seqclip", "grpo", "gmpo_plugins.gspo"):
        assert f"'{name}'" in err or f" {name}," in err or f" {name})" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--actor.policy_loss_type", "dr_grpo", *GROUP],
            "--actor.loss_agg_mode token-mean cannot be expressed by --actor.policy_loss_type=dr_grpo",
        ),
        (  # gae: OpenRLHF's own normalisation wants a critic, here from the reward model
            ["--actor.policy_loss_type", "gmpo", "--algo.kl.use_loss", "--reward.model_name_or_path", "rm"],
            "--algo.advantage.estimator gae gives per-token advantages",
        ),
        (["--actor.policy_loss_type", "gmpo", *GROUP[:4]], "--algo.kl.init_coef 0.01 without --algo.kl.use_loss"),
        (["--actor.policy_loss_type", "gmpo", *GROUP, "--actor.dual_clip", "3"], "--actor.dual_clip=3.0 is not"),
        (
            ["--actor.policy_loss_type", "grpo", *GROUP, "--actor.eps_clip", "1.2"],
            "--actor.eps_clip_low_high (LOW)=1.2 is not valid",
        ),
    ],
)
def test_refused_settings_are_usage_errors(loss_module, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_main_runs_openrlhfs_entry_point_with_the_hook_in_rays_runtime_env(loss_module, monkeypatch):
    seen = record_ray_init(monkeypatch, ["--actor.policy_loss_type", "gmpo", *GROUP])
    env = seen["runtime_env"]
    assert env["worker_process_setup_hook"] == HOOK
    assert set(env["env_vars"]) == OPENRLHF_ENV_VARS  # OpenRLHF's own runtime env, kept


def test_main_rejects_an_unknown_name(loss_module, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--actor.policy_loss_type", "nope"])
    assert exc.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_installed_console_script(loss_module):
    """The ``gmpo-openrlhf`` entry point of pyproject.toml, in a fresh process."""
    script = os.path.join(os.path.dirname(sys.executable), "gmpo-openrlhf")
    done = subprocess.run([script, "--actor.policy_loss_type", "gmpoo"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "gmpo-openrlhf: error: argument --actor.policy_loss_type: invalid choice: 'gmpoo'" in done.stderr
    assert "gmpo_plugins.gspo" in done.stderr


def test_runtime_env_merges_once():
    base = {"env_vars": {"A": "1"}, "pip": ["x"]}
    merged = runtime_env(base)
    assert merged == {**base, "worker_process_setup_hook": HOOK} and "worker_process_setup_hook" not in base
    assert runtime_env(merged) == merged
    assert runtime_env() == {"worker_process_setup_hook": HOOK}
    with pytest.raises(ValueError, match="already sets worker_process_setup_hook='my.hook'"):
        runtime_env({"worker_process_setup_hook": "my.hook"})


def test_runtime_env_leaves_the_hook_to_a_ray_job_env_that_carries_it(monkeypatch):
    from ray.runtime_env.runtime_env import _merge_runtime_env

    job_env = {"worker_process_setup_hook": HOOK, "env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": HOOK}}
    monkeypatch.setenv(hook.JOB_CONFIG_ENV, json.dumps({"runtime_env": job_env, "metadata": {}}))
    ours = runtime_env({"env_vars": {"NCCL_DEBUG": "WARN"}})
    assert "worker_process_setup_hook" not in ours
    merged = _merge_runtime_env(job_env, ours)  # what ray.init does under `ray job submit`
    assert merged is not None and merged["worker_process_setup_hook"] == HOOK
    assert _merge_runtime_env(job_env, {**ours, "worker_process_setup_hook": HOOK}) is None  # the duplicate conflicts
    monkeypatch.setenv(hook.JOB_CONFIG_ENV, json.dumps({"runtime_env": {"worker_process_setup_hook": "other.hook"}}))
    with pytest.raises(ValueError, match="the Ray job's runtime env already sets"):
        runtime_env({})


def test_install_and_worker_hook_import_nothing_heavy_and_patch_on_import():
    code = (
        "import sys\n"
        "from gmpo_plugins.adapters.openrlhf import install, runtime_env, setup_worker\n"
        "install(); setup_worker(); runtime_env({})\n"
        "heavy = [m for m in ('openrlhf', 'deepspeed', 'ray', 'transformers', 'vllm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from openrlhf.models import PolicyLoss\n"
        "assert PolicyLoss.__dict__['__gmpo_plugins_patched__']\n"
        "assert not [m for m in sys.modules if m.startswith(('openrlhf.trainer', 'openrlhf.cli', 'ray'))]\n"
        "print('OK')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stderr[-3000:]


def test_main_reports_a_missing_openrlhf(monkeypatch):
    monkeypatch.setattr(version, "installed_version", lambda distribution: None)
    with pytest.raises(SystemExit, match=r"OpenRLHF is not installed; .* openrlhf>=0\.11\.2,<0\.12"):
        main(["--actor.policy_loss_type", "gmpo"])


def _policy_loss_with_another_signature(monkeypatch):
    """OpenRLHF's PolicyLoss with a simulated signature change (a new constructor keyword), as
    ``openrlhf.models`` exports it, after the patch met it (and refused to translate it)."""
    import openrlhf.models

    from gmpo_plugins.adapters.openrlhf.patch import patch_policy_loss, refusal

    class PolicyLoss(openrlhf.models.PolicyLoss):
        def __init__(self, *args, new_option=None, **kwargs):
            super().__init__(*args, **kwargs)

    module = type(sys)("openrlhf.models.loss")
    module.PolicyLoss = PolicyLoss
    patch_policy_loss(module)
    assert refusal(PolicyLoss) is not None
    monkeypatch.setattr(openrlhf.models, "PolicyLoss", PolicyLoss)


def test_openrlhfs_own_loss_runs_when_the_patch_does_not_apply(loss_module, monkeypatch):
    _policy_loss_with_another_signature(monkeypatch)
    for own in ("ppo", "gspo"):
        seen = record_ray_init(monkeypatch, ["--actor.policy_loss_type", own, *GROUP])
        assert seen["runtime_env"]["worker_process_setup_hook"] == HOOK


def test_a_registry_loss_is_a_usage_error_when_the_patch_does_not_apply(loss_module, monkeypatch, capsys):
    _policy_loss_with_another_signature(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main(["--actor.policy_loss_type", "gmpo", *GROUP])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "PolicyLoss.__init__ has parameters ('self', 'args', 'new_option', 'kwargs')" in err
    assert "--actor.policy_loss_type gmpo cannot run" in err


def _watch_running_at_ray_init(monkeypatch, env_value: str | None) -> bool:
    """Run ``main`` up to OpenRLHF's ``ray.init`` with GMPO_OPENRLHF_SCHEDULE_TIMEOUT=``env_value``
    (unset for None): whether the schedule watch thread was running then."""
    import threading

    if env_value is None:
        monkeypatch.delenv("GMPO_OPENRLHF_SCHEDULE_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("GMPO_OPENRLHF_SCHEDULE_TIMEOUT", env_value)
    names: list[str] = []
    import ray

    def fake_init(*args, **kwargs):
        names.extend(thread.name for thread in threading.enumerate())
        raise _RayInitCalled

    monkeypatch.setattr(ray, "init", fake_init)
    with pytest.raises(_RayInitCalled):
        main(["--actor.policy_loss_type", "gmpo", *GROUP])
    return "gmpo-openrlhf-stall-watch" in names


@pytest.mark.parametrize("env_value", [None, "", "0"])
def test_the_schedule_watch_is_off_unless_asked_for(loss_module, monkeypatch, env_value):
    assert not _watch_running_at_ray_init(monkeypatch, env_value)


def test_the_schedule_watch_runs_when_asked_for(loss_module, monkeypatch):
    assert _watch_running_at_ray_init(monkeypatch, "30")
