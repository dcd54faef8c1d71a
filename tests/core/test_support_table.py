"""docs/losses.md shows ``python -m gmpo_plugins.adapters.support`` as it prints now, and the
table follows the specs: a loss a framework ships is selected by its prefixed name there, a
loss not linear in the advantages is refused through SkyRL."""

from __future__ import annotations

from pathlib import Path

from gmpo_plugins.adapters.support import cell, support_table
from gmpo_plugins.core.registry import get_loss

DOCS = Path(__file__).resolve().parents[2] / "docs" / "losses.md"


def test_the_docs_show_the_table():
    assert support_table() in DOCS.read_text()


def test_cells_follow_the_specs():
    assert cell(get_loss("cispo"), "verl") == "native: cispo; `loss_mode=gmpo_plugins.cispo`"
    assert cell(get_loss("cispo"), "openrlhf") == "`cispo`"
    assert cell(get_loss("gspo"), "openrlhf") == "native: gspo; `gmpo_plugins.gspo`"
    assert cell(get_loss("dro"), "skyrl") == "refused: not linear in the advantages, which SkyRL pre-scales"
    assert "reduction=seq-mean-token-sum-norm" in cell(get_loss("dr_grpo"), "openrlhf")


def test_a_loss_needing_an_input_no_adapter_passes_is_refused_with_the_reason():
    """topr reads rewards, m2po rollout log-probs (``LossSpec.requires``): every cell refuses
    them with ``adapters.inputs.refusal``'s reason, the adapter's own message."""
    assert (
        cell(get_loss("topr"), "verl")
        == "refused: topr needs per-sequence rewards, which the verl adapter does not pass yet"
    )
    assert cell(get_loss("m2po"), "openrlhf") == (  # OpenRLHF passes them (adapters.inputs.SUPPLIED)
        "`m2po` with `--algo.advantage.is_correction_level token --algo.advantage.is_correction_mode clip "
        "--algo.advantage.is_correction_threshold 1 1`"
    )
    assert cell(get_loss("m2po"), "verl").endswith(
        "refused: m2po needs the rollout engine's log-probs, which the verl adapter does not pass yet"
    )
    assert cell(get_loss("m2po"), "skyrl") == "`policy_loss_type=m2po` with `generator.sampling_params.logprobs=1`"


def test_the_doctor_lists_the_losses_refused_for_a_missing_input():
    from gmpo_plugins.adapters.visibility import refused_inputs

    line = refused_inputs("SkyRL")
    assert line.startswith("; refuses ")
    assert "topr (topr needs per-sequence rewards, which the SkyRL adapter does not pass yet)" in line
    assert "grpo" not in line
    assert "topr" not in refused_inputs("OpenRLHF")  # it passes each sample's reward
