"""report.md and steps.png from hand-made runs: one table per metric, one line per framework; the
first-update section from hand-made parameter files (values exact in float32, as in
test_first_update.py) and the translators' named behaviours."""

from __future__ import annotations

import json

import pytest
import torch

from gmpo_plugins.frameworks.launch import Launch
from gmpo_plugins.frameworks.plots import plotted_metrics
from gmpo_plugins.frameworks.report import write_report
from gmpo_plugins.frameworks.runner import FrameworkRun
from gmpo_plugins.frameworks.spec import load_spec
from gmpo_plugins.frameworks.translate import trl as trl_translator
from gmpo_plugins.frameworks.translate import verl as verl_translator

pytest.importorskip("matplotlib")

VERL = FrameworkRun(
    "verl",
    True,
    12.0,
    records=[{"step": 1, "reward": 0.5, "grad_norm": 2.0}, {"step": 2, "reward": 0.75, "grad_norm": float("nan")}],
    standins="examples/verl_cpu (CPU platform)",
)
TRL = FrameworkRun("trl", True, 3.0, records=[{"step": 1, "reward": 0.25, "entropy": 3.0}])
LAUNCHES = [Launch("verl", ("python3",)), Launch("trl", ("python3",))]
NONE_SAVED = "(fewer than two complete runs left their parameters after the first RL step (the CPU stand-ins do))"


def test_the_report_has_a_plot_and_a_table_per_metric(tmp_path, write_spec):
    assert write_report(tmp_path, "spec.toml", load_spec(write_spec()), [VERL, TRL], LAUNCHES) is True
    report = (tmp_path / "report.md").read_text()
    assert "![one line per framework per metric](steps.png)" in report
    assert (tmp_path / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # panels: the metrics some framework logged, in vocabulary order
    assert plotted_metrics([VERL, TRL]) == ["reward", "entropy", "grad_norm"]
    assert "### reward\n\n| step | verl | trl |\n|---|---|---|\n| 1 | 0.5 | 0.25 |\n| 2 | 0.75 |  |" in report
    assert "| verl | complete | 12.0 | 2 | examples/verl_cpu (CPU platform) |" in report
    assert "| trl | complete | 3.0 | 1 | none |" in report
    assert f"## First RL step\n\n{NONE_SAVED}\n" in report  # neither run left its parameters
    records = json.loads((tmp_path / "records.json").read_text())
    assert sorted(records) == ["first_update", "first_update_identical", "runs"]
    assert records["first_update"] == [] and records["first_update_identical"] is None
    assert sorted(records["runs"]) == ["trl", "verl"]
    assert records["runs"]["verl"]["standins"] == VERL.standins
    assert records["runs"]["trl"] == {"complete": True, "standins": "", "records": TRL.records}


def test_no_metrics_no_plot(tmp_path, write_spec):
    failed = FrameworkRun("verl", False, 1.0, failure="python3 ... exit status 1\nboom")
    assert write_report(tmp_path, "spec.toml", load_spec(write_spec()), [failed], LAUNCHES[:1]) is False
    assert "(no plot: no metrics)" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "steps.png").exists()


THETA0 = {"w": torch.tensor([0.0, 1.0]), "b": torch.tensor([-2.0])}
UPDATED = {"w": torch.tensor([0.5, 1.0]), "b": torch.tensor([-2.0])}  # the largest update: 0.5
FURTHER = {"w": torch.tensor([0.5078125, 1.0]), "b": torch.tensor([-2.0])}  # 0.5 + 2^-7 on w[0]
# (2^-7 - ulp(0.5078125) = 2^-24) / 0.5078125 = (1 - 2^-17) / 65 = 1.5384498e-02
FURTHER_REL = "1.54e-02"
ADVANTAGES = "advantages: verl (r - group mean) / (group std + 1e-6); trl (r - group mean) / (group std + 1e-4)"
HEADER = (
    "| frameworks | comparison | rel. difference | tolerance | verdict | step-1 reward | named behaviours that differ |"
)


def first_update_rows(
    tmp_path, write_spec, spec_dir, dtype, trl_update, trl_reward=0.5, trl_saves=True, adam_eps=100.0
):
    """The first-update table's rows of a report of verl and trl (their translators' named
    behaviours), each with a first-update file, over the initial model THETA0."""
    from safetensors.torch import save_file

    save_file(THETA0, str(spec_dir / "model" / "model.safetensors"))
    spec = load_spec(write_spec(dtype=dtype, adam_eps=adam_eps))
    launches = [
        Launch("verl", ("python3",), differences=verl_translator.differences(spec)),
        Launch("trl", ("python3",), differences=trl_translator.differences(spec)),
    ]
    torch.save({"syncs": 1, "state_dict": UPDATED}, tmp_path / "verl.pt")  # verl's stand-in's layout
    torch.save(trl_update, tmp_path / "trl.pt")  # TRL's callback: a plain state dict
    runs = [
        FrameworkRun("verl", True, 1.0, [{"step": 1, "reward": 0.5}], step_params=(str(tmp_path / "verl.pt"),)),
        FrameworkRun(
            "trl",
            True,
            1.0,
            [{"step": 2, "reward": 1.0}, {"step": 1, "reward": trl_reward}],
            step_params=(str(tmp_path / "trl.pt"),) if trl_saves else (),
        ),
    ]
    out = tmp_path / "out"
    out.mkdir()
    assert write_report(out, "run.toml", spec, runs, launches) is True
    report = (out / "report.md").read_text()
    section = report[report.index("## First RL step") : report.index("## Per step")].strip().splitlines()
    if section[2].startswith("("):
        return section[2:], json.loads((out / "records.json").read_text())["first_update"]
    assert section[4].startswith("- proportional: " if adam_eps >= 1 else "- sign-like: ")
    assert section[6].startswith("Overall: ")
    assert section[8:12] == ["### Optimiser step 1 of 1", "", HEADER, "|---|---|---|---|---|---|---|"]
    return section[12:], json.loads((out / "records.json").read_text())["first_update"]


def test_equal_first_updates_are_identical(tmp_path, write_spec, spec_dir):
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "float32", UPDATED)
    assert rows == ["| verl / trl | proportional | 0.00e+00 | 1e-05 | identical | 0.5 |  |"]
    assert records == [
        {
            "optimiser_step": 1,
            "frameworks": ["verl", "trl"],
            "comparison": "proportional",
            "rel": 0.0,
            "tolerance": 1e-05,
            "identical": True,
            "step_one_rewards": [0.5, 0.5],
            "causes": [ADVANTAGES],  # recorded whatever the verdict; the report names them for a difference
        }
    ]


def test_a_difference_above_the_tolerance_names_the_advantages(tmp_path, write_spec, spec_dir):
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "float32", FURTHER)
    assert rows == [f"| verl / trl | proportional | {FURTHER_REL} | 1e-05 | DIFFERENT | 0.5 | {ADVANTAGES} |"]
    assert records[0]["rel"] == (1 - 2**-17) / 65 and records[0]["identical"] is False


def test_different_first_rollouts_name_only_what_chooses_the_rollout(tmp_path, write_spec, spec_dir):
    """verl and TRL both take the prompts in file order: rollouts that differ are unexplained."""
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "float32", FURTHER, trl_reward=0.25)
    unexplained = "the first rollouts differ (step-1 rewards), and no named behaviour explains it"
    row = f"| verl / trl | proportional | {FURTHER_REL} | 1e-05 | DIFFERENT | differ: 0.5 / 0.25 | {unexplained} |"
    assert rows == [row]
    assert records[0]["step_one_rewards"] == [0.5, 0.25] and records[0]["causes"] == []


def test_adamw_with_eps_1e_8_is_compared_sign_like_by_the_norm(tmp_path, write_spec, spec_dir):
    # one coordinate of three moves: the norm equals the largest entry here (FURTHER_REL)
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "float32", FURTHER, adam_eps=1e-8)
    assert rows == [f"| verl / trl | sign-like | {FURTHER_REL} | 1e-05 | DIFFERENT | 0.5 | {ADVANTAGES} |"]
    assert records[0]["comparison"] == "sign-like"


def test_bfloat16_has_no_verdict(tmp_path, write_spec, spec_dir):
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "bfloat16", FURTHER)
    no_verdict = "no verdict (the tolerance holds for float32)"
    assert rows == [f"| verl / trl | proportional | {FURTHER_REL} |  | {no_verdict} | 0.5 |  |"]
    assert (records[0]["tolerance"], records[0]["identical"]) == (None, None)


def test_a_difference_without_a_named_cause_is_unexplained(tmp_path, write_spec, spec_dir):
    # advantage_std_norm = false: both compute r - group mean, and nothing else named differs
    from safetensors.torch import save_file

    save_file(THETA0, str(spec_dir / "model" / "model.safetensors"))
    spec = load_spec(write_spec(dtype="float32", advantage_std_norm=False, adam_eps=100.0))
    launches = [
        Launch(name, ("python3",), differences=translator.differences(spec))
        for name, translator in (("verl", verl_translator), ("trl", trl_translator))
    ]
    torch.save(UPDATED, tmp_path / "verl.pt")
    torch.save(FURTHER, tmp_path / "trl.pt")
    runs = [FrameworkRun(name, True, 1.0, [], step_params=(str(tmp_path / f"{name}.pt"),)) for name in ("verl", "trl")]
    write_report(tmp_path, "run.toml", spec, runs, launches)
    row = f"| verl / trl | proportional | {FURTHER_REL} | 1e-05 | DIFFERENT | not logged | "
    assert row + "none of the named behaviours differs: unexplained |" in (tmp_path / "report.md").read_text()


def test_one_saved_first_update_is_not_compared(tmp_path, write_spec, spec_dir):
    rows, records = first_update_rows(tmp_path, write_spec, spec_dir, "float32", UPDATED, trl_saves=False)
    assert rows == [NONE_SAVED] and records == []


def test_unreadable_parameters_are_not_compared(tmp_path, write_spec, spec_dir):
    # no *.safetensors in the model folder: the section says why, the rest of the report is written
    spec = load_spec(write_spec(dtype="float32"))
    torch.save(UPDATED, tmp_path / "verl.pt")
    (tmp_path / "trl.pt").write_text("not a torch.save archive\n")
    runs = [FrameworkRun(name, True, 1.0, [], step_params=(str(tmp_path / f"{name}.pt"),)) for name in ("verl", "trl")]
    write_report(tmp_path, "run.toml", spec, runs, LAUNCHES)
    report = (tmp_path / "report.md").read_text()
    model = spec_dir / "model"
    assert f"(not compared: {model}: no *.safetensors file to read the initial parameters from)" in report
    from safetensors.torch import save_file

    save_file(THETA0, str(model / "model.safetensors"))
    write_report(tmp_path, "run.toml", spec, runs, LAUNCHES)
    report = (tmp_path / "report.md").read_text()
    assert f"(not compared: {tmp_path / 'trl.pt'}: cannot be read (" in report


def test_every_optimiser_step_has_its_table_and_the_overall_verdict_is_theirs(tmp_path, write_spec, spec_dir):
    """Four optimiser steps, verl at w[0] = 0.5 after each, trl 2^-e further (e = -, 17, 15, 14):
    rel 0, 127 / (128 * 65537), 511 / (512 * 16385), 1023 / (1024 * 8193) (tests/frameworks/
    test_first_update.py), against (2^k - 1) * 1e-5; step 4's 1.5e-4 reaches a real difference."""
    from safetensors.torch import save_file

    save_file(THETA0, str(spec_dir / "model" / "model.safetensors"))
    spec = load_spec(write_spec(dtype="float32", advantage_std_norm=False, adam_eps=100.0))
    launches = [
        Launch(name, ("python3",), differences=translator.differences(spec))
        for name, translator in (("verl", verl_translator), ("trl", trl_translator))
    ]
    files: dict[str, list[str]] = {"verl": [], "trl": []}
    for k, further in enumerate((0.0, 2**-17, 2**-15, 2**-14), start=1):
        for name, w0 in (("verl", 0.5), ("trl", 0.5 + further)):
            torch.save({"w": torch.tensor([w0, 1.0]), "b": torch.tensor([-2.0])}, tmp_path / f"{name}_{k}.pt")
            files[name].append(str(tmp_path / f"{name}_{k}.pt"))
    runs = [
        FrameworkRun(name, True, 1.0, [{"step": 1, "reward": 0.5}], step_params=tuple(files[name]))
        for name in ("verl", "trl")
    ]
    out = tmp_path / "out"
    out.mkdir()
    write_report(out, "run.toml", spec, runs, launches)
    report = (out / "report.md").read_text()
    assert "Overall: identical (every optimiser step with a verdict)" in report
    rows = [
        "| verl / trl | proportional | 0.00e+00 | 1e-05 | identical | 0.5 |  |",
        "| verl / trl | proportional | 1.51e-05 | 3e-05 | identical | 0.5 |  |",
        "| verl / trl | proportional | 6.09e-05 | 7e-05 | identical | 0.5 |  |",
        "| verl / trl | proportional | 1.22e-04 | 0.00015 | no verdict (the tolerance reaches a real difference, "
        "0.0001) | 0.5 |  |",
    ]
    for k, row in enumerate(rows, start=1):
        table = f"### Optimiser step {k} of 4\n\n{HEADER}\n|---|---|---|---|---|---|---|\n{row}\n"
        assert table in report
    records = json.loads((out / "records.json").read_text())
    assert [(r["optimiser_step"], r["identical"]) for r in records["first_update"]] == [
        (1, True),
        (2, True),
        (3, True),
        (4, None),
    ]
    assert records["first_update_identical"] is True
