"""The translators without any framework installed: the exact settings each framework is given,
the refusals (framework and setting named, never dropped) and the listed semantic differences.
The same translations are checked against the installed frameworks in their own sessions
(tests/trl, tests/skyrl, tests/openrlhf, tests/verl: test_frameworks_translation.py)."""

from __future__ import annotations

import ast
import json
import shlex

import pytest

from gmpo_plugins.adapters.hparam_sources import OVERRIDE_ENV
from gmpo_plugins.frameworks.launch import OUT, UnsupportedSettingError
from gmpo_plugins.frameworks.render import shell_lines
from gmpo_plugins.frameworks.spec import load_spec
from gmpo_plugins.frameworks.translate import FRAMEWORKS, translate
from gmpo_plugins.frameworks.translate import openrlhf as openrlhf_translator
from gmpo_plugins.frameworks.translate import skyrl as skyrl_translator
from gmpo_plugins.frameworks.translate import trl as trl_translator
from gmpo_plugins.frameworks.translate import verl as verl_translator


def overrides(launch) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in launch.argv if "=" in arg)


def flags(launch) -> dict[str, list[str]]:
    """``--flag v1 v2`` -> {"--flag": ["v1", "v2"]} (a switch maps to [])."""
    found: dict[str, list[str]] = {}
    current = None
    for arg in launch.argv[1:]:
        if arg.startswith("--"):
            current = arg
            found[current] = []
        else:
            found[current].append(arg)
    return found


def refusal(spec, translator) -> UnsupportedSettingError:
    with pytest.raises(UnsupportedSettingError) as caught:
        translator(spec)
    return caught.value


def test_every_framework_translates_the_base_spec(write_spec):
    launches = translate(load_spec(write_spec()))
    assert [launch.framework for launch in launches] == list(FRAMEWORKS) == ["verl", "openrlhf", "trl", "skyrl"]
    for launch in launches:
        topics = {difference.topic for difference in launch.differences}
        assert {"advantages", "kl", "loss aggregation"} <= topics


def test_verl_counts_mini_batches_in_prompts(write_spec, spec_dir):
    spec = load_spec(write_spec(loss_hparams={"eps_low": 0.3, "eps_high": 0.5}))
    launch = verl_translator.translate(spec)
    got = overrides(launch)
    actor = "actor_rollout_ref.actor"
    assert launch.argv[:3] == ("python3", "-m", "verl.trainer.main_ppo")
    assert got[f"{actor}.ppo_mini_batch_size"] == "2"  # 4 responses / 2 rollouts per prompt
    assert got[f"{actor}.ppo_micro_batch_size_per_gpu"] == "2"
    assert got["data.train_batch_size"] == "2" and got["actor_rollout_ref.rollout.n"] == "2"
    assert got[f"{actor}.policy_loss.loss_mode"] == "gmpo_plugins.gmpo"
    assert (got[f"{actor}.clip_ratio_low"], got[f"{actor}.clip_ratio_high"]) == ("0.3", "0.5")
    assert got[f"{actor}.loss_agg_mode"] == "seq-mean-token-mean"
    assert got[f"{actor}.optim.optimizer"] == "AdamW" and got[f"{actor}.optim.lr"] == "0.0001"
    assert got[f"{actor}.use_kl_loss"] == "false" and f"{actor}.kl_loss_coef" not in got
    assert got["trainer.total_training_steps"] == "3"
    assert got["reward.custom_reward_function.path"] == f"{OUT}/reward.py"
    assert f"{spec_dir / 'reward.py'}" in launch.files["reward.py"]
    assert launch.prepare[0][-3:] == ("verl", str(spec.dataset), f"{OUT}/train.parquet")


def test_verl_kl_sgd_and_fp32(write_spec):
    spec = load_spec(write_spec(kl_coef=0.05, kl_estimator="k2", optimizer="sgd", dtype="float32"))
    got = overrides(verl_translator.translate(spec))
    actor = "actor_rollout_ref.actor"
    assert (got[f"{actor}.use_kl_loss"], got[f"{actor}.kl_loss_coef"], got[f"{actor}.kl_loss_type"]) == (
        "true",
        "0.05",
        "mse",  # verl's name for k2
    )
    assert got[f"{actor}.optim.optimizer"] == "SGD"
    assert got[f"++{actor}.fsdp_config.mixed_precision"] == "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"


def test_verl_and_skyrl_refuse_a_mini_batch_that_splits_a_group(write_spec):
    spec = load_spec(write_spec(rollouts_per_prompt=4, prompts_per_step=2, mini_batch_size=2, micro_batch_size=2))
    for translator, framework in ((verl_translator, "verl"), (skyrl_translator, "skyrl")):
        error = refusal(spec, translator.translate)
        assert (error.framework, error.setting) == (framework, "mini_batch_size=2")
        assert str(error).startswith(f"{framework} cannot express mini_batch_size=2: ")


def test_openrlhf_arguments(write_spec):
    launch = openrlhf_translator.translate(load_spec(write_spec(advantage_std_norm=False, kl_coef=0.01)))
    got = flags(launch)
    assert launch.argv[0] == "gmpo-openrlhf"
    assert got["--actor.policy_loss_type"] == ["gmpo_plugins.gmpo"]
    assert got["--actor.eps_clip_low_high"] == ["0.4", "0.4"]  # gmpo's registry defaults
    assert got["--actor.loss_agg_mode"] == ["seq-mean-token-mean"]
    assert got["--train.batch_size"] == ["4"] and got["--rollout.batch_size"] == ["2"]
    assert got["--data.max_samples"] == ["6"]  # 3 steps * 2 prompts
    assert got["--data.max_len"] == ["1024"]  # 512 prompt + 512 response tokens (the defaults)
    assert got["--algo.advantage.estimator"] == ["dr_grpo"]  # r - mean, no std
    assert got["--algo.kl.use_loss"] == [] and got["--algo.kl.init_coef"] == ["0.01"]
    assert got["--algo.kl.estimator"] == ["k3"]
    assert got["--actor.adam.betas"] == ["0.9", "0.999"] and got["--ds.param_dtype"] == ["bf16"]
    (precision,) = [d for d in launch.differences if d.topic == "precision"]
    assert precision.first_update == "bf16 weights, float32 master weights"


def test_openrlhf_reward_bridge_strips_the_decoded_prompt_with_the_models_tokenizer(write_spec, spec_dir):
    bridge = openrlhf_translator.translate(load_spec(write_spec())).files["reward.py"]
    assert f"AutoTokenizer.from_pretrained({str(spec_dir / 'model')!r})" in bridge
    assert f"{spec_dir / 'reward.py'}" in bridge
    ast.parse(bridge)  # the file OpenRLHF loads is Python


def test_openrlhf_fp32_is_the_cpu_standins_precision(write_spec):
    launch = openrlhf_translator.translate(load_spec(write_spec(dtype="float32")))
    assert flags(launch)["--ds.param_dtype"] == ["fp32"]
    precision = [d.behaviour for d in launch.differences if d.topic == "precision"]
    assert len(precision) == 1 and "bf16 or fp16 only" in precision[0]
    assert "examples/openrlhf_cpu/standins" in precision[0]


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"optimizer": "sgd"}, "optimizer='sgd'"),
        ({"loss": "dr_grpo"}, "loss=dr_grpo"),  # its seq-mean-token-sum-norm has no OpenRLHF flag
    ],
)
def test_openrlhf_refusals(write_spec, values, setting):
    error = refusal(load_spec(write_spec(**values)), openrlhf_translator.translate)
    assert (error.framework, error.setting) == ("openrlhf", setting)


def test_trl_config_counts(write_spec):
    spec = load_spec(write_spec(prompts_per_step=4, mini_batch_size=4, micro_batch_size=2, epochs_per_batch=2))
    config = trl_translator.grpo_config(spec)
    # 4 prompts * 2 rollouts = 8 responses per step, 2 optimiser steps of 4 responses, each 2 micro-batches of 2
    assert (config["per_device_train_batch_size"], config["gradient_accumulation_steps"]) == (2, 2)
    assert config["steps_per_generation"] == 4  # 8 responses / 2 per micro-batch
    assert config["max_steps"] == 3 * 2 * 2  # steps * optimiser steps per step * epochs
    assert (config["num_generations"], config["num_iterations"]) == (2, 2)
    assert (config["epsilon"], config["epsilon_high"], config["beta"]) == (0.4, 0.4, 0.0)
    assert config["scale_rewards"] == "group" and config["bf16"] is True
    launch = trl_translator.translate(spec)
    script = launch.files["train_trl.py"]
    constants = {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(script).body
        if isinstance(node, ast.Assign) and node.targets[0].id.isupper()
    }
    assert constants["CONFIG"] == {**config, "output_dir": OUT}
    assert (constants["LOSS"], constants["MAX_PROMPT_LENGTH"]) == ("gmpo", 512)
    assert "RegistryGRPOTrainer(" in script and "loss_hparams" not in script
    assert launch.env == {}  # every hyper-parameter is a GRPOConfig field or the loss's default


def test_trl_passes_the_kl_estimator_and_untranslated_hparams_in_the_environment(write_spec):
    spec = load_spec(write_spec(kl_coef=0.1, kl_estimator="k1", loss_hparams={"log_ratio_bound": 10.0}))
    assert trl_translator.grpo_config(spec)["beta"] == 0.1
    launch = trl_translator.translate(spec)
    assert json.loads(launch.env[OVERRIDE_ENV]) == {"kl_estimator": "k1", "log_ratio_bound": 10.0}


def test_trl_refuses_a_constant_length_other_than_the_response_length(write_spec):
    spec = load_spec(write_spec(loss="dr_grpo", loss_hparams={"norm_length": 64}, max_response_length=8))
    error = refusal(spec, trl_translator.translate)
    assert (error.framework, error.setting) == ("trl", "loss_hparams.norm_length=64")
    assert "max_completion_length" in str(error)


def test_every_framework_carries_an_untranslated_hparam_in_the_environment(write_spec):
    # no framework has a setting for the log-ratio bound: GMPO_PLUGINS_LOSS_HPARAMS carries it to each
    spec = load_spec(write_spec(loss_hparams={"log_ratio_bound": 10.0}))
    for launch in translate(spec):
        assert json.loads(launch.env[OVERRIDE_ENV]) == {"log_ratio_bound": 10.0}, launch.framework


def test_skyrl_overrides(write_spec):
    launch = skyrl_translator.translate(load_spec(write_spec(kl_coef=0.02)))
    got = overrides(launch)
    algorithm = "trainer.algorithm"
    assert launch.argv[:2] == ("python3", f"{OUT}/skyrl_main.py")
    assert got[f"{algorithm}.policy_loss_type"] == "gmpo_plugins.gmpo"
    assert got[f"{algorithm}.loss_reduction"] == "sequence_mean"
    assert (got[f"{algorithm}.use_kl_loss"], got[f"{algorithm}.kl_loss_coef"]) == ("true", "0.02")
    assert got["trainer.policy_mini_batch_size"] == "2" and got["trainer.train_batch_size"] == "2"
    compile(launch.files["skyrl_main.py"], "skyrl_main.py", "exec")


def test_with_out_fills_every_placeholder(write_spec):
    for launch in translate(load_spec(write_spec())):
        filled = launch.with_out("/runs/x")
        text = " ".join([*filled.argv, *filled.env.values(), *filled.files.values(), *map(" ".join, filled.prepare)])
        assert OUT not in text
        words = shlex.split(filled.command())  # VAR=value ... then the command
        assert words == [f"{key}={value}" for key, value in filled.env.items()] + list(filled.argv)
        # the dry run's and launch.sh's one-argument-a-line form is the same command
        assert shlex.split(shell_lines(filled.argv).replace("\\\n", " ")) == list(filled.argv)


def test_adam_eps_per_framework(write_spec):
    spec = load_spec(write_spec(adam_eps=100.0))
    override = "++actor_rollout_ref.actor.optim.override_optimizer_config"
    assert overrides(verl_translator.translate(spec))[override] == "{eps:100.0}"  # AdamW's keyword
    assert flags(openrlhf_translator.translate(spec))["--actor.adam.eps"] == ["100.0"]
    assert trl_translator.grpo_config(spec)["adam_epsilon"] == 100.0
    error = refusal(spec, skyrl_translator.translate)
    assert (error.framework, error.setting) == ("skyrl", "adam_eps=100.0")
    assert str(error) == (
        "skyrl cannot express adam_eps=100.0: trainer.policy.optimizer_config has no epsilon (AdamW's 1e-8)"
    )


def test_adam_eps_default_and_sgd(write_spec):
    spec = load_spec(write_spec())  # adam_eps = 1e-8, what SkyRL's AdamW uses
    override = "++actor_rollout_ref.actor.optim.override_optimizer_config"
    assert overrides(verl_translator.translate(spec))[override] == "{eps:1e-08}"
    assert flags(openrlhf_translator.translate(spec))["--actor.adam.eps"] == ["1e-08"]
    assert trl_translator.grpo_config(spec)["adam_epsilon"] == 1e-8
    # 1e-8 given explicitly is SkyRL's AdamW's own: not refused
    assert skyrl_translator.translate(load_spec(write_spec(adam_eps=1e-8))).framework == "skyrl"
    sgd = load_spec(write_spec(optimizer="sgd"))
    assert not any("override_optimizer_config" in arg for arg in verl_translator.translate(sgd).argv)
    assert (trl_translator.grpo_config(sgd)["optim"], trl_translator.grpo_config(sgd)["adam_epsilon"]) == ("sgd", 1e-8)


def test_trl_keeps_the_prompts_in_file_order(write_spec):
    assert trl_translator.grpo_config(load_spec(write_spec()))["shuffle_dataset"] is False


TRANSLATORS = {
    "verl": verl_translator,
    "openrlhf": openrlhf_translator,
    "trl": trl_translator,
    "skyrl": skyrl_translator,
}


def first_update(spec, framework: str) -> dict[str, str]:
    """``differences(spec)``'s first-update values by topic ("" values left out)."""
    return {d.topic: d.first_update for d in TRANSLATORS[framework].differences(spec) if d.first_update}


def test_the_first_update_advantages_follow_advantage_std_norm(write_spec):
    normed, plain = load_spec(write_spec()), load_spec(write_spec(advantage_std_norm=False))
    epsilons = {"verl": "1e-6", "openrlhf": "1e-9", "trl": "1e-4", "skyrl": "1e-6"}
    for framework, epsilon in epsilons.items():
        assert first_update(normed, framework)["advantages"] == f"(r - group mean) / (group std + {epsilon})"
        assert first_update(plain, framework)["advantages"] == "r - group mean"


def test_the_first_update_precision_follows_dtype(write_spec):
    bf16, fp32 = load_spec(write_spec()), load_spec(write_spec(dtype="float32"))
    described = {
        "verl": "bf16 compute, float32 master weights",
        "openrlhf": "bf16 weights, float32 master weights",
        "trl": "bf16 autocast, float32 weights",
        "skyrl": "bf16 compute, float32 master weights",  # FSDP2 mixed precision, as verl's
    }
    for framework, bfloat16 in described.items():
        assert first_update(bf16, framework)["precision"] == bfloat16
        assert first_update(fp32, framework)["precision"] == "float32"


def test_the_first_update_kl_follows_kl_coef(write_spec):
    without, with_kl = load_spec(write_spec()), load_spec(write_spec(kl_coef=0.05))
    placed = {
        "verl": "a separate term, aggregated with loss_agg_mode",
        "openrlhf": "a separate term, a token mean",
        "trl": "inside the registry loss",
        "skyrl": "a separate term, added by the worker",
    }
    for framework, where in placed.items():
        assert first_update(without, framework)["kl"] == "no KL term (kl_coef = 0)"
        assert first_update(with_kl, framework)["kl"] == where


def test_the_first_update_prompt_order(write_spec):
    one, three = load_spec(write_spec(steps=1)), load_spec(write_spec(steps=3))
    file_order = "the first prompts_per_step rows of the dataset"
    for framework in ("verl", "trl"):
        assert first_update(one, framework)["prompt order"] == first_update(three, framework)["prompt order"]
        assert first_update(three, framework)["prompt order"] == file_order
    # OpenRLHF shuffles the first steps * prompts_per_step rows: with one step, those are the step's own
    assert first_update(one, "openrlhf")["prompt order"] == file_order
    assert first_update(three, "openrlhf")["prompt order"] == "a shuffle of the first steps * prompts_per_step rows"
    # SkyRL shuffles every row of the dataset, whatever the steps
    assert first_update(one, "skyrl")["prompt order"] == "a seeded shuffle of every row of the dataset"
    assert first_update(three, "skyrl")["prompt order"] == "a seeded shuffle of every row of the dataset"


def test_the_loss_aggregation_does_not_reach_the_first_update_comparison(write_spec):
    # every framework normalises the first step's loss the core's way: nothing to name
    spec = load_spec(write_spec())
    for framework in TRANSLATORS:
        assert "loss aggregation" not in first_update(spec, framework)


def test_the_mini_batch_order_is_named_only_where_an_epoch_has_several_mini_batches(write_spec):
    # 2 prompts x 2 rollouts = 4 responses per RL step: 2 mini-batches of 2, or 1 of 4 twice
    several = load_spec(write_spec(mini_batch_size=2, micro_batch_size=2))
    one = load_spec(write_spec(mini_batch_size=4, micro_batch_size=2, epochs_per_batch=2))
    orders = {
        "verl": "rollout order",
        "openrlhf": "a shuffle by OpenRLHF's replay-buffer DataLoader, new every epoch",
        "trl": "a shuffle by TRL's seeded generator",
        "skyrl": "rollout order",
    }
    for framework, order in orders.items():
        assert first_update(several, framework)["mini-batch order"] == order
        # one mini-batch per epoch: its order inside changes the summation order only
        assert "mini-batch order" not in first_update(one, framework)


def test_the_old_log_probs_are_a_listed_difference_that_does_not_reach_the_first_update(write_spec):
    # verl, OpenRLHF and SkyRL recompute the old log-probs in a separate pass; TRL does only where an
    # RL step has several optimiser steps (gradient_accumulation_steps not a multiple of
    # steps_per_generation * num_iterations), else it takes its training forward's own. In float32 a
    # recomputed pass moves the first ratios by rounding only, which the tolerance covers, and in
    # bfloat16 there is no verdict: listed for the user, never named as a cause
    on_policy = load_spec(write_spec(mini_batch_size=4, micro_batch_size=2, epochs_per_batch=1))
    config = trl_translator.grpo_config(on_policy)
    assert config["gradient_accumulation_steps"] % (config["steps_per_generation"] * config["num_iterations"]) == 0
    two_epochs = load_spec(write_spec(mini_batch_size=4, micro_batch_size=2, epochs_per_batch=2))
    config = trl_translator.grpo_config(two_epochs)
    assert config["gradient_accumulation_steps"] % (config["steps_per_generation"] * config["num_iterations"]) != 0
    for spec in (on_policy, two_epochs):
        for framework, translator in TRANSLATORS.items():
            (old,) = [d for d in translator.differences(spec) if d.topic == "old log-probs"]
            assert "forward" in old.behaviour and old.first_update == "", framework
