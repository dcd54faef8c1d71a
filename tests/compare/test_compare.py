"""gmpo-plugins compare: a real 2-step run on the default task and model."""

import math
import os
import sys

from gmpo_plugins.cli.main import main

from .records import read_records, without_timing

FILES = ("metrics.jsonl", "report.md", "reward.png", "heldout.png", "ratio_range.png", "entropy_kl.png")


def test_report_has_every_file(two_step_report):
    for name in FILES:
        assert (two_step_report / name).stat().st_size > 0, name
    assert (two_step_report / "model-init" / "seed-0" / "config.json").is_file()
    assert not (two_step_report / "INCOMPLETE").exists()
    for name in FILES[2:]:
        assert (two_step_report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (two_step_report / "report.md").read_text()
    for loss in ("gmpo", "grpo_clip_wider", "grpo"):  # the default --losses
        assert f"| core | {loss} | 1 |" in text
    assert "| core | grpo_clip_wider: GRPO, ratio clip e^-0.4..e^0.4" in text  # the claims' first comparator
    assert "![" in text and "How to read it" in text and "Machine: " in text
    for section in ("## Paired differences", "## The paper's claims", "## Ablation table", "Student t"):
        assert section in text
    assert "--seeds 0-0 --steps 2" in text


def test_metrics_are_finite_and_complete(two_step_report):
    records = read_records(two_step_report)
    losses = ("gmpo", "grpo_clip_wider", "grpo")
    assert [(r["loss_name"], r["step"]) for r in records] == [(loss, s) for loss in losses for s in range(3)]
    # held-out evaluation before the first step and at the last one
    evaluated = [r for r in records if "heldout_greedy" in r]
    assert [(r["loss_name"], r["step"]) for r in evaluated] == [(loss, s) for loss in losses for s in (0, 2)]
    assert evaluated[0]["heldout_greedy"] == evaluated[2]["heldout_greedy"] == evaluated[4]["heldout_greedy"]
    for r in evaluated:
        assert 0.0 <= r["heldout_greedy"] <= 1.0 and 0.0 <= r["heldout_pass"] <= 1.0
    records = [r for r in records if r["step"] > 0]
    keys = {
        "reward",
        "entropy",
        "kl_init",
        "clip_frac_low",
        "clip_frac_high",
        "log_ratio_min",
        "log_ratio_max",
        "seq_weight_min",
        "seq_weight_max",
        "policy_loss",
        "grad_norm",
    }
    for record in records:
        assert keys <= set(record)
        for key, value in record.items():
            if isinstance(value, float):
                assert math.isfinite(value), (key, value)
        assert 0.0 <= record["reward"] <= 1.0
        # several updates per rollout batch: the ratios moved off 1
        assert record["log_ratio_max"] - record["log_ratio_min"] > 1e-3
    # the first step starts from the initial policy: KL exactly 0; the default warm-up leaves
    # the success rate strictly between 0 and 1
    assert records[0]["kl_init"] == 0.0
    assert 0.0 < records[0]["reward"] < 1.0


def test_gmpo_and_grpo_see_identical_first_rollouts(two_step_report):
    records = read_records(two_step_report)
    first = {r["loss_name"]: r for r in records if r["step"] == 1}
    # the default task's response lengths vary within groups and between groups
    assert first["gmpo"]["group_len_range"] >= 1.0 and first["gmpo"]["group_len_spread"] >= 1.0
    assert (
        first["gmpo"]["rollout_digest"] == first["grpo"]["rollout_digest"] == first["grpo_clip_wider"]["rollout_digest"]
    )
    for key in ("reward", "entropy", "mixed_groups", "response_len"):
        assert first["gmpo"][key] == first["grpo"][key]
    # the losses differ, so the updates (and the next rollouts) do
    assert first["gmpo"]["policy_loss"] != first["grpo"]["policy_loss"]


def test_same_seed_identical_metrics(two_step_report, tmp_path):
    """Reproducibility: the same command on the same machine gives identical records and tables."""
    assert main(["compare", "--seeds", "1", "--steps", "2", "--out", str(tmp_path)]) == 0
    assert without_timing(read_records(tmp_path)) == without_timing(read_records(two_step_report))

    def tables(path):
        text = (path / "report.md").read_text()
        return [line for line in text.splitlines() if line.startswith("| core")]

    def untimed(lines):
        return [line.rsplit("|", 2)[0] for line in lines]  # the results table ends with wall s

    assert untimed(tables(tmp_path)) == untimed(tables(two_step_report))


def test_other_seed_other_rollouts(two_step_report, tmp_path):
    model = two_step_report / "model-init" / "seed-0"
    assert (
        main(
            [
                "compare",
                "--steps",
                "1",
                "--losses",
                "gmpo",
                "--seeds",
                "1-1",
                "--model",
                str(model),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    _, record = read_records(tmp_path)
    assert record["seed"] == 1 and record["rollout_digest"] != read_records(two_step_report)[1]["rollout_digest"]


def test_subprocess_runner_matches_in_process(two_step_report, tmp_path, monkeypatch):
    """A framework run in another interpreter (here: core forced into a subprocess of this
    Python) gives the records of the in-process run from the same model."""
    model = two_step_report / "model-init" / "seed-0"
    args = ["compare", "--seeds", "1", "--steps", "2", "--losses", "gmpo", "--model", str(model)]
    assert main([*args, "--out", str(tmp_path / "in")]) == 0
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", sys.executable)
    assert main([*args, "--out", str(tmp_path / "sub")]) == 0
    assert os.path.isfile(tmp_path / "sub" / "logs" / "core-gmpo-seed-0.log")
    in_process, subprocess_ = read_records(tmp_path / "in"), read_records(tmp_path / "sub")
    assert len(subprocess_) == 3
    assert without_timing(subprocess_) == without_timing(in_process)
    # and the model round trip is exact: the same first rollout as the default run
    assert in_process[1]["rollout_digest"] == read_records(two_step_report)[1]["rollout_digest"]


def test_model_directory_of_another_architecture(tmp_path):
    """--model: any local causal LM directory with a tokenizer (here a random Llama with
    the task's char tokenizer), used as is."""
    from gmpo_plugins.compare.experiment.task import build_char_tokenizer
    from tests.tiny_models import tiny_model

    tokenizer = build_char_tokenizer()
    model = tiny_model(
        "llama",
        len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    out = tmp_path / "out"
    assert (
        main(
            [
                "compare",
                "--seeds",
                "1",
                "--steps",
                "1",
                "--losses",
                "gmpo",
                "--model",
                str(tmp_path / "llama"),
                "--out",
                str(out),
            ]
        )  # fmt: skip
        == 0
    )
    _, record = read_records(out)
    assert record["loss_name"] == "gmpo" and math.isfinite(record["policy_loss"])
    assert "(used as is, no warm-up)" in (out / "report.md").read_text()


def test_failing_subprocess_is_reported(tmp_path, monkeypatch, capsys, two_step_report):
    fake = tmp_path / "python"
    # answers the support check, then fails the run
    fake.write_text(
        "#!/bin/sh\ncase \"$*\" in *--check-losses*) echo 'GMPO_COMPARE_UNSUPPORTED []'; exit 0;; esac\n"
        "echo 'boom: no such framework here' >&2\nexit 3\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("GMPO_PLUGINS_PYTHON_CORE", str(fake))
    out = tmp_path / "out"
    model = str(two_step_report / "model-init" / "seed-0")
    code = main(["compare", "--seeds", "1", "--steps", "1", "--model", model, "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    assert "exited with status 3" in err and "boom: no such framework here" in err
    assert "boom" in (out / "logs" / "core-gmpo-seed-0.log").read_text()
    assert (out / "INCOMPLETE").is_file() and not (out / "report.md").exists()
