"""Run summaries, the claims table and the paired differences on constructed inputs."""

import pytest

from gmpo_plugins.compare.report.claims import CLAIMS, COMPARATORS, claim_rows, claim_summary, paired_rows, paper_value
from gmpo_plugins.compare.report.summary import METRICS, over_seeds, summarise_run


def record(step, **values):
    return {"framework": "core", "loss_name": "gmpo", "seed": 0, "step": step, **values}


def test_summarise_run_hand_values():
    records = [record(0, heldout_greedy=0.5, heldout_pass=0.25)]
    for step in range(1, 7):
        records.append(
            record(
                step,
                reward=step / 10,
                entropy=1.0 * step,
                kl_init=0.1 * step,
                post_log_ratio_q01=-0.1 * step,
                post_log_ratio_q99=0.1 * step,
                log_ratio_min=-step,
                log_ratio_max=0.5,
                clip_frac_low=0.0,
                clip_frac_high=0.2,
                elapsed_s=float(step),
            )
        )
    records[3].update(heldout_greedy=0.75, heldout_pass=0.5)  # step 3: the best
    records[6].update(heldout_greedy=0.25, heldout_pass=0.125)  # the last step
    summary = summarise_run(records)
    assert summary["reward_final"] == pytest.approx((0.2 + 0.3 + 0.4 + 0.5 + 0.6) / 5)  # last 5 steps
    assert summary["entropy"] == pytest.approx(4.0) and summary["kl_init"] == pytest.approx(0.4)
    assert (summary["heldout_greedy"], summary["heldout_pass"]) == (0.25, 0.125)
    assert (summary["heldout_best"], summary["heldout_drop"]) == (0.75, 0.5)
    assert summary["ratio_width"] == pytest.approx(0.2 * 3.5)  # width 0.2 * step, mean over steps 1..6
    assert summary["max_abs_log_ratio"] == 6
    assert (summary["clip_low"], summary["clip_high"], summary["wall_s"]) == (0.0, pytest.approx(0.2), 6.0)
    assert set(summary) == set(METRICS)


def runs_of(gmpo, grpo):
    """{(framework, loss): {seed: summary}} from per-metric lists of per-seed values."""

    def seeds(values):
        keys = {key for key in values}
        count = len(next(iter(values.values())))
        return {s: {key: (values[key][s] if key in keys else None) for key in METRICS} for s in range(count)}

    return {("core", "gmpo"): seeds(gmpo), ("core", "grpo"): seeds(grpo)}


def test_claim_verdicts_on_constructed_runs():
    runs = runs_of(
        gmpo={"ratio_width": [1.0, 1.1, 0.9], "max_abs_log_ratio": [3.0, 9.0, 2.0], "entropy": [0.1, 0.2, 0.15],
              "kl_init": [0.5, 0.6, 0.7], "heldout_drop": [0.0, 0.0, 0.0]},
        grpo={"ratio_width": [2.0, 2.2, 1.9], "max_abs_log_ratio": [4.0, 1.0, 3.0], "entropy": [0.3, 0.4, 0.35],
              "kl_init": [0.1, 0.15, 0.2], "heldout_drop": [0.0, 0.0, 0.0]},
    )  # fmt: skip
    rows = {row.metric: claim_summary(row) for row in claim_rows(runs)}
    assert [row["metric"] for row in rows.values()] == [metric for _, metric, _, _ in CLAIMS]
    # width: d = [-1.0, -1.1, -1.0], all below 0, claimed lower: supported
    assert rows["ratio_width"]["verdict"] == "supported"
    assert rows["ratio_width"]["difference"] == pytest.approx(-3.1 / 3)
    # max |log ratio|: d = [-1, 8, -1], the interval crosses 0
    assert rows["max_abs_log_ratio"]["verdict"] == "inconclusive"
    # entropy: d = -0.2 on every seed (zero spread), claimed higher: contradicted
    assert rows["entropy"]["verdict"] == "contradicted" and rows["entropy"]["half_width"] == pytest.approx(0)
    # KL: d = [0.4, 0.45, 0.5] > 0, claimed lower: contradicted
    assert rows["kl_init"]["verdict"] == "contradicted"
    # no collapse on either side: d = 0 exactly, inconclusive
    assert rows["heldout_drop"]["verdict"] == "inconclusive"


def test_claims_need_gmpo_and_grpo_and_pairs_use_the_first_loss():
    runs = runs_of(gmpo={"heldout_greedy": [0.5, 0.6]}, grpo={"heldout_greedy": [0.4, 0.7]})
    assert claim_rows({key: value for key, value in runs.items() if key[1] == "gmpo"}) == []
    (row,) = [r for r in paired_rows(runs, ["grpo", "gmpo"]) if r.metric == "heldout_greedy"]
    assert (row.a, row.b) == ("grpo", "gmpo")
    assert row.difference.estimate.mean == pytest.approx(0.0) and row.difference.signs("grpo", "gmpo") == (
        "grpo > gmpo on 1/2 seeds"
    )
    assert over_seeds(runs[("core", "gmpo")])["heldout_greedy"].mean == pytest.approx(0.55)
    assert over_seeds(runs[("core", "gmpo")])["entropy"] is None


def test_paper_numbers():
    assert paper_value("gmpo") == ("GMPO (token-level clip)", 52.7)
    assert paper_value("gmpo_nonorm")[1] == 52.0 and paper_value("grpo")[1] == 51.2
    assert paper_value("gspo") == ("gspo", None)


def test_claims_are_made_against_each_comparator_that_ran_wide_clip_first():
    # ratio_width per seed: gmpo [1.0, 1.2, 1.1], grpo_clip_wider [1.5, 1.6, 1.55], grpo
    # [0.8, 0.9, 0.85]. Against the wide clip d = [-0.5, -0.4, -0.45]: mean -0.45, sd 0.05,
    # half-width 4.303 * 0.05 / sqrt(3) = 0.124, all below 0: supported; against the standard
    # clip d = [0.2, 0.3, 0.25] > 0: contradicted (the narrower band is GRPO's there)
    runs = runs_of(gmpo={"ratio_width": [1.0, 1.2, 1.1]}, grpo={"ratio_width": [0.8, 0.9, 0.85]})
    wide = runs_of(gmpo={"ratio_width": [1.0, 1.2, 1.1]}, grpo={"ratio_width": [1.5, 1.6, 1.55]})[("core", "grpo")]
    runs[("core", "grpo_clip_wider")] = wide
    rows = [claim_summary(row) for row in claim_rows(runs) if row.metric == "ratio_width"]
    assert [(row["comparator"], row["verdict"]) for row in rows] == [
        ("grpo_clip_wider", "supported"),
        ("grpo", "contradicted"),
    ]
    assert rows[0]["difference"] == pytest.approx(-0.45) and rows[1]["difference"] == pytest.approx(0.25)
    assert [c for c, _ in COMPARATORS] == ["grpo_clip_wider", "grpo"]
