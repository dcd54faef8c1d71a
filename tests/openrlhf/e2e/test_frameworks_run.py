"""``gmpo-plugins frameworks SPEC --frameworks openrlhf``: OpenRLHF's own trainer (gmpo-openrlhf, with the
CPU stand-ins of examples/openrlhf_cpu where there is no GPU) trains the example spec in fp32 in a
subprocess; OpenRLHF's TensorBoard metrics come back per RL step in the run's vocabulary, the reward
being the spec's reward over the completions the rollout engine generated; OpenRLHF's own logger shows
the registry loss's metrics as ``train/gmpo/<key>``, token-weighted means of the micro-batches'
values and exact extrema, and the report reads them from there; the actor's weights after
the first optimiser step are one Adam step away from the initial model; a run that fails leaves an
incomplete report and no process of its Ray instance behind."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from gmpo_plugins.cli import main
from gmpo_plugins.frameworks import runner
from gmpo_plugins.frameworks.translate import TRANSLATORS
from tests.example_runs import example_in, processes_naming

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

# every vocabulary metric OpenRLHF logs for the example (train/kl is left out: kl_coef is 0)
# (not train/actor_grad_norm: OpenRLHF logs its last optimiser step's, and an RL step here has two)
LOGGED = ("reward", "policy_loss", "step_time")  # OpenRLHF's TensorBoard scalars
# the registry loss's own metrics, which the adapter adds to OpenRLHF's log as train/gmpo/<key>
LOSS_LOGGED = ("clip_frac_low", "clip_frac_high", "log_ratio_min", "log_ratio_max")
RESPONSES_PER_STEP = 4  # the example: 2 prompts x 2 responses, two epochs over them per RL step
LEARNING_RATE = 100.0  # the example's, with adam_eps = 100: each step moves a weight by less than lr


@dataclasses.dataclass
class Ran:
    status: int
    out: Path
    folder: Path  # the spec's folder: model, prompts, reward
    ray_dirs: list
    runs: list  # the FrameworkRun of each launch


def run_example(folder: Path, translate=None) -> Ran:
    """``gmpo-plugins frameworks`` on the example in ``folder`` with OpenRLHF's interpreter (this one),
    recording the Ray folder each launch was given and each FrameworkRun; ``translate`` replaces
    OpenRLHF's translator."""
    ray_dirs, runs = [], []
    place, run_launch = runner.local_launch, runner.run_launch

    def placing(launch, python, folder, *args):
        local = place(launch, python, folder, *args)
        ray_dirs.append(local.ray_dir)
        return local

    def running(*args, **kwargs):
        runs.append(run_launch(*args, **kwargs))
        return runs[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GMPO_PLUGINS_PYTHON_OPENRLHF", sys.executable)
        patch.setattr(runner, "local_launch", placing)
        patch.setattr(runner, "run_launch", running)
        if translate is not None:
            patch.setitem(TRANSLATORS, "openrlhf", translate)
        out = folder / "run"
        argv = ["frameworks", str(example_in(folder)), "--frameworks", "openrlhf", "--out", str(out)]
        status = main([*argv, "--timeout", "500"])
    return Ran(status, out, folder, ray_dirs, runs)


def leftovers(ran: Ran) -> list[int]:
    """Processes whose command line names the run's folder or its Ray folder; that folder must be gone."""
    assert len(ran.ray_dirs) == 1 and not Path(ran.ray_dirs[0]).exists()
    return processes_naming(str(ran.out), ran.ray_dirs[0])


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Ran:
    return run_example(tmp_path_factory.mktemp("openrlhf-frameworks"))


def test_the_example_trains_in_openrlhf_and_its_metrics_come_back_per_step(ran):
    assert ran.status == 0, (ran.out / "openrlhf" / "output.log").read_text()[-6000:]
    result = json.loads((ran.out / "records.json").read_text())["runs"]["openrlhf"]
    assert result["complete"] is True and result["standins"].startswith("examples/openrlhf_cpu")
    # the spec's 3 steps, one record per OpenRLHF global step
    assert [record["step"] for record in result["records"]] == [1, 2, 3]
    for record in result["records"]:
        assert set(record) == {"step", *LOGGED, *LOSS_LOGGED}
        assert all(math.isfinite(record[name]) for name in (*LOGGED, *LOSS_LOGGED))
        assert record["step_time"] > 0
        assert 0 <= record["clip_frac_low"] <= 1 and 0 <= record["clip_frac_high"] <= 1
        assert record["log_ratio_min"] < record["log_ratio_max"]  # the second epoch is off-policy
    report = (ran.out / "report.md").read_text()
    assert "Status: complete" in report and "| openrlhf | complete |" in report and "### step_time" in report
    assert "### grad_norm" not in report
    assert "- precision: stock OpenRLHF accepts --ds.param_dtype bf16 or fp16 only" in report
    # OpenRLHF's own arguments, as run: our loss in fp32 on the stand-ins, one engine
    command = (ran.out / "openrlhf" / "output.log").read_text().split("\n$ ")[-1].splitlines()[0]
    assert "--ds.param_dtype fp32" in command and "--vllm.num_engines 1" in command
    calls = [
        json.loads(line) for line in (ran.out / "openrlhf" / "record" / "loss_calls.jsonl").read_text().splitlines()
    ]
    # 3 steps x 2 epochs x 1 micro-batch of 4 responses, every one in PolicyModelActor
    assert [(call["actor_class"], call["rows"]) for call in calls] == [("PolicyModelActor", 4)] * 6
    assert {call["policy_loss_type"] for call in calls} == {"gmpo_plugins.gmpo"}


def test_openrlhfs_logger_shows_the_loss_metrics_over_the_rl_step_and_the_report_reads_them(ran):
    from gmpo_plugins.frameworks.scalars import scalars

    logged = scalars(ran.out / "openrlhf" / "tensorboard")
    calls = (ran.out / "openrlhf" / "record" / "loss_calls.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in calls if line.strip()]
    assert len(entries) == 6  # 3 RL steps x 2 epochs x 1 micro-batch, one rank
    records = json.loads((ran.out / "records.json").read_text())["runs"]["openrlhf"]["records"]
    for step, record in enumerate(records, start=1):
        first, second = entries[2 * step - 2 : 2 * step]  # the two epochs over the step's 4 responses
        assert first["tokens"] == second["tokens"] > 0 and first["rows"] == second["rows"] == 4
        value = {key: dict(map(tuple, logged[f"train/gmpo/{key}"]))[step] for key in (*LOSS_LOGGED, "seq_weight_mean")}
        tokens = first["tokens"] + second["tokens"]
        for key in ("clip_frac_low", "clip_frac_high"):  # OpenRLHF's token weights: t_1 v_1 + t_2 v_2 over t_1 + t_2
            expected = (first["tokens"] * first["metrics"][key] + second["tokens"] * second["metrics"][key]) / tokens
            assert value[key] == pytest.approx(expected, rel=1e-5, abs=1e-6), (step, key)
        assert value["seq_weight_mean"] == pytest.approx(
            (first["metrics"]["seq_weight_mean"] + second["metrics"]["seq_weight_mean"]) / 2, rel=1e-5, abs=1e-6
        )
        # the extrema are the step's, not OpenRLHF's weighted mean of the epochs' extrema (which differ:
        # the first epoch is on-policy, the second is not)
        minima = (first["metrics"]["log_ratio_min"], second["metrics"]["log_ratio_min"])
        maxima = (first["metrics"]["log_ratio_max"], second["metrics"]["log_ratio_max"])
        assert value["log_ratio_min"] == pytest.approx(min(minima), rel=1e-6)
        assert value["log_ratio_max"] == pytest.approx(max(maxima), rel=1e-6)
        assert value["log_ratio_min"] < sum(minima) / 2 and sum(maxima) / 2 < value["log_ratio_max"]
        # the report's record is OpenRLHF's logged value
        assert {key: record[key] for key in LOSS_LOGGED} == pytest.approx({key: value[key] for key in LOSS_LOGGED})
    assert sum(point[1] for point in logged["train/gmpo/clip_frac_high"]) > 0  # the clip acted
    assert logged["train/gmpo/clip_frac"] == logged["train/ppo_clip_ratio"]  # OpenRLHF's own, the same reduction
    assert "train/gmpo/policy_loss" not in logged and "train/policy_loss" in logged


def spec_rewards(ran: Ran) -> list[float]:
    """The spec's reward(response, answer) of every completion the engine recorded, in generation order
    (a step's completions all come before the next step's): the response decoded without special
    tokens, the answer that of the prompt row whose chat-template tokens the engine was given."""
    tokenizer = AutoTokenizer.from_pretrained(ran.folder / "model")
    module_spec = importlib.util.spec_from_file_location("example_reward", ran.folder / "reward.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    answers = {}
    for line in (ran.folder / "prompts.jsonl").read_text().splitlines():
        row = json.loads(line)
        chat = [{"role": "user", "content": row["prompt"]}]
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        answers[tuple(tokenizer(text, add_special_tokens=False)["input_ids"])] = row["answer"]
    rewards = []
    for line in (ran.out / "openrlhf" / "record" / "completions.jsonl").read_text().splitlines():
        completion = json.loads(line)
        response = tokenizer.decode(completion["completion"], skip_special_tokens=True)
        rewards.append(module.reward(response, answers[tuple(completion["prompt"])]))
    return rewards


def test_the_reward_is_the_specs_reward_over_the_engines_completions(ran):
    records = json.loads((ran.out / "records.json").read_text())["runs"]["openrlhf"]["records"]
    rewards = spec_rewards(ran)
    assert len(rewards) == 3 * RESPONSES_PER_STEP
    for step, record in enumerate(records):
        batch = rewards[step * RESPONSES_PER_STEP : (step + 1) * RESPONSES_PER_STEP]
        assert record["reward"] == pytest.approx(sum(batch) / len(batch), rel=1e-6), (step + 1, batch)


def test_the_first_update_is_one_adam_step_from_the_initial_model(ran):
    assert ran.runs[0].first_update == str(ran.out / "openrlhf" / "record" / "engine_weights_1.pt")
    first = torch.load(ran.runs[0].first_update)
    assert first["syncs"] == 1
    initial = load_file(ran.folder / "model" / "model.safetensors")
    assert set(first["state_dict"]) == set(initial)
    for name, before in initial.items():
        after = first["state_dict"][name]
        assert after.dtype == torch.float32 and not torch.equal(after, before), name
        # Adam's first step moves a weight by lr * |g| / (|g| + eps), less than lr
        assert 0 < (after - before).abs().max().item() < LEARNING_RATE, name
    last = torch.load(ran.out / "openrlhf" / "record" / "engine_weights.pt")
    assert last["syncs"] == 3 and not torch.equal(
        last["state_dict"]["lm_head.weight"], first["state_dict"]["lm_head.weight"]
    )


def test_the_parameters_after_each_optimiser_step_of_the_first_rl_step_are_saved(ran):
    # one mini-batch, two epochs: two optimiser steps in RL step 1, and none saved after it
    folder = ran.out / "openrlhf" / "optimiser_steps"
    assert ran.runs[0].step_params == (str(folder / "step_1.pt"), str(folder / "step_2.pt"))
    assert sorted(path.name for path in folder.iterdir()) == ["step_1.pt", "step_2.pt"]
    one, two = (torch.load(name) for name in ran.runs[0].step_params)
    # the return of DeepSpeed's engine step sees what the first sync hands the engine, to the bit
    synced = torch.load(ran.runs[0].first_update)["state_dict"]
    assert sorted(two) == sorted(synced) and all(torch.equal(two[name], synced[name]) for name in two)
    assert not torch.equal(one["lm_head.weight"], two["lm_head.weight"])


def test_the_run_leaves_no_process_and_removes_its_ray_folder(ran):
    assert leftovers(ran) == []


def test_an_openrlhf_run_that_fails_is_incomplete_and_leaves_no_process(tmp_path):
    translate = TRANSLATORS["openrlhf"]

    def with_a_missing_model(spec):
        # argparse keeps the last value: OpenRLHF starts Ray, then its actor fails to load the model
        launch = translate(spec)
        missing = str(tmp_path / "no-such-model")
        return dataclasses.replace(launch, argv=(*launch.argv, "--actor.model_name_or_path", missing))

    ran = run_example(tmp_path, with_a_missing_model)
    assert ran.status == 1 and ran.runs[0].first_update == ""
    report = (ran.out / "report.md").read_text()
    assert "Status: INCOMPLETE" in report and "| openrlhf | incomplete: python3 ... exit status" in report
    assert "no-such-model" in report  # the end of OpenRLHF's output names the path
    assert json.loads((ran.out / "records.json").read_text())["runs"]["openrlhf"]["records"] == []
    assert leftovers(ran) == []
