"""The first update compared between frameworks (gmpo_plugins.frameworks.first_update) on hand-made
state dicts whose values are exact in float32, so that every ``rel`` is derived by hand:
the ulp of a float32 value v in [2^e, 2^(e+1)) is 2^(e-23)."""

from __future__ import annotations

import sys

import pytest
import torch

from gmpo_plugins.frameworks.first_update import (
    PROPORTIONAL,
    REAL_DIFFERENCE,
    SIGN_LIKE,
    TOLERANCE,
    FirstUpdateError,
    PairComparison,
    causes,
    clip_difference,
    compare_pair,
    compare_steps,
    comparison,
    gradient_well_above_eps,
    initial_parameters,
    load_parameters,
    overall,
    relative_difference,
    step_one_reward,
    tolerance,
)
from gmpo_plugins.frameworks.launch import Difference, Launch


def params(**values: list[float]) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(value, dtype=torch.float32) for name, value in values.items()}


THETA0 = params(w=[0.0, 1.0], b=[-2.0])
UPDATED = params(w=[0.5, 1.0], b=[-2.0])  # the largest update: 0.5 on w[0]


def test_a_difference_above_the_ulp_over_the_larger_update():
    # w[0]: 0.5 against 0.5078125 = 0.5 + 2^-7 (65/128); ulp(0.5078125) = 2^-24 (binade [0.5, 1))
    other = params(w=[0.5078125, 1.0], b=[-2.0])
    rel = relative_difference(THETA0, UPDATED, other)
    # (2^-7 - 2^-24) / (65/128): the larger update (other's 65/128) is the scale
    assert rel == (2**-7 - 2**-24) / 0.5078125 == (1 - 2**-17) / 65
    assert relative_difference(THETA0, other, UPDATED) == rel  # symmetric in the two runs


def test_one_float32_ulp_is_storage_rounding_two_are_one_ulp_over_the_update():
    one_ulp = params(w=[0.5, 1.0 + 2**-23], b=[-2.0])  # torch.nextafter(1.0) in float32
    assert one_ulp["w"][1].item() == torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)).item()
    assert relative_difference(THETA0, UPDATED, one_ulp) == 0.0
    below = params(w=[0.5, 1.0 - 2**-24], b=[-2.0])  # one ulp below 1.0 (binade [0.5, 1))
    assert relative_difference(THETA0, UPDATED, below) == 0.0
    two_ulps = params(w=[0.5, 1.0 + 2**-22], b=[-2.0])
    # |1 + 2^-22 - 1| - ulp(1 + 2^-22) = 2^-22 - 2^-23 = 2^-23, over the update 0.5
    assert relative_difference(THETA0, UPDATED, two_ulps) == 2**-23 / 0.5 == 2**-22
    assert relative_difference(THETA0, two_ulps, UPDATED) == 2**-22
    # a negative weight: the ulp of |-2 - 2^-21| is 2^-22 (binade [2, 4)), leaving 2^-22
    negative = params(w=[0.5, 1.0], b=[-2.0 - 2**-21])
    assert relative_difference(THETA0, UPDATED, negative) == 2**-22 / 0.5


def test_equal_updates_are_zero_and_a_two_dimensional_parameter_is_flattened():
    theta0 = {"m": torch.zeros(2, 2)}
    moved = {"m": torch.tensor([[0.0, 0.25], [-0.125, 0.0]])}
    assert relative_difference(theta0, moved, {"m": moved["m"].clone()}) == 0.0
    other = {"m": torch.tensor([[0.0, 0.25], [-0.125, 2**-10]])}
    # ulp(2^-10) = 2^-33; over the largest update 0.25
    assert relative_difference(theta0, moved, other) == (2**-10 - 2**-33) / 0.25


def test_parameters_that_cannot_be_compared_are_named():
    with pytest.raises(FirstUpdateError, match=r"^the two runs saved different parameters \(e\.g\. b\)$"):
        relative_difference(THETA0, UPDATED, params(w=[0.5, 1.0]))
    with pytest.raises(FirstUpdateError, match=r"^the initial model has no extra$"):
        relative_difference(THETA0, {**UPDATED, "extra": torch.ones(1)}, {**UPDATED, "extra": torch.ones(1)})
    with pytest.raises(
        FirstUpdateError, match=r"^w: shapes differ \(initial, first, second: \[\(2,\), \(2,\), \(3,\)\]\)$"
    ):
        relative_difference(THETA0, UPDATED, params(w=[0.5, 1.0, 0.0], b=[-2.0]))
    with pytest.raises(FirstUpdateError, match=r"^the two runs saved no parameters$"):
        relative_difference(THETA0, {}, {})
    with pytest.raises(FirstUpdateError, match=r"^neither run moved any parameter in its first update$"):
        relative_difference(THETA0, THETA0, {name: value.clone() for name, value in THETA0.items()})


def test_a_state_dict_and_a_wrapped_state_dict_load_the_same(tmp_path):
    torch.save(UPDATED, tmp_path / "plain.pt")
    torch.save({"syncs": 1, "state_dict": UPDATED}, tmp_path / "wrapped.pt")
    plain, wrapped = load_parameters(tmp_path / "plain.pt"), load_parameters(str(tmp_path / "wrapped.pt"))
    assert sorted(plain) == sorted(wrapped) == ["b", "w"]
    assert plain["w"].tolist() == wrapped["w"].tolist() == [0.5, 1.0]
    assert plain["b"].tolist() == wrapped["b"].tolist() == [-2.0]


def test_a_file_without_a_state_dict_is_refused(tmp_path):
    torch.save({"syncs": 1, "step": 2}, tmp_path / "numbers.pt")
    with pytest.raises(FirstUpdateError, match=r"numbers\.pt: not a state dict of tensors$"):
        load_parameters(tmp_path / "numbers.pt")
    torch.save([torch.ones(1)], tmp_path / "list.pt")
    with pytest.raises(FirstUpdateError, match=r"list\.pt: not a state dict of tensors$"):
        load_parameters(tmp_path / "list.pt")
    (tmp_path / "text.pt").write_text("not a torch.save archive\n")
    with pytest.raises(FirstUpdateError, match=r"text\.pt: cannot be read \(") as caught:
        load_parameters(tmp_path / "text.pt")
    assert "\n" not in str(caught.value)  # one line in the report
    with pytest.raises(FirstUpdateError, match=r"absent\.pt: cannot be read \("):
        load_parameters(tmp_path / "absent.pt")


def test_the_initial_parameters_are_every_safetensors_file_of_the_model(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": THETA0["w"]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": THETA0["b"]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    initial = initial_parameters(tmp_path)
    assert sorted(initial) == ["b", "w"]
    assert initial["w"].tolist() == [0.0, 1.0] and initial["b"].tolist() == [-2.0]


def test_a_model_without_safetensors_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FirstUpdateError, match=r"no \*\.safetensors file to read the initial parameters from$"):
        initial_parameters(tmp_path)
    (tmp_path / "model.safetensors").write_text("garbage")
    with pytest.raises(FirstUpdateError, match=r"model\.safetensors: cannot be read \("):
        initial_parameters(tmp_path)


def launch(framework: str, *values: tuple[str, str]) -> Launch:
    return Launch(framework, ("python3",), differences=tuple(Difference(t, "behaviour", v) for t, v in values))


def test_causes_are_the_topics_both_name_with_different_values_in_the_first_launchs_order():
    verl = launch(
        "verl",
        ("precision", "float32"),
        ("advantages", "(r - group mean) / (group std + 1e-6)"),
        ("kl", "a separate term"),  # trl: "" (does not reach the first update)
        ("prompt order", "file order"),  # the same in both
        ("loss aggregation", ""),  # trl names one, verl none
        ("rollouts", "verl's"),  # trl has no rollouts topic
    )
    trl = launch(
        "trl",
        ("advantages", "(r - group mean) / (group std + 1e-4)"),
        ("kl", ""),
        ("loss aggregation", "sequences of the step"),
        ("prompt order", "file order"),
        ("precision", "bf16 autocast"),
    )
    assert causes(verl, trl) == (
        "precision: verl float32; trl bf16 autocast",
        "advantages: verl (r - group mean) / (group std + 1e-6); trl (r - group mean) / (group std + 1e-4)",
    )
    assert causes(trl, verl) == (
        "advantages: trl (r - group mean) / (group std + 1e-4); verl (r - group mean) / (group std + 1e-6)",
        "precision: trl bf16 autocast; verl float32",
    )
    assert causes(verl, launch("skyrl")) == ()


def test_where_the_first_rollouts_differ_only_the_prompt_order_is_named():
    verl = launch("verl", ("advantages", "1e-6"), ("prompt order", "file order"))
    openrlhf = launch("openrlhf", ("advantages", "1e-9"), ("prompt order", "shuffled"))
    assert causes(verl, openrlhf, rollouts_differ=True) == ("prompt order: verl file order; openrlhf shuffled",)
    assert causes(verl, openrlhf, rollouts_differ=False) == ("advantages: verl 1e-6; openrlhf 1e-9",)
    assert len(causes(verl, openrlhf, rollouts_differ=None)) == 2
    same_order = launch("trl", ("advantages", "1e-4"), ("prompt order", "file order"))
    assert causes(verl, same_order, rollouts_differ=True) == ()  # unexplained: the report says so


def pair(rel: float, tolerance: float | None = TOLERANCE, rewards=(0.5, 0.5)) -> PairComparison:
    return PairComparison("verl", "trl", rel, tolerance, rewards, ())


def test_identical_within_the_tolerance_and_none_without_one():
    assert TOLERANCE == 1e-5
    assert pair(1e-5).identical is True  # the edge is identical
    assert pair(0.0).identical is True
    assert pair(1.0000001e-5).identical is False
    assert pair(0.0, tolerance=None).identical is None
    # a tolerance that reaches the size of a real difference (1e-4) gives no verdict
    assert REAL_DIFFERENCE == 1e-4
    assert pair(0.0, tolerance=7e-5).identical is True and pair(0.0, tolerance=7e-5).resolves
    assert pair(0.0, tolerance=1.5e-4).identical is None and not pair(0.0, tolerance=1.5e-4).resolves
    assert pair(1.0, tolerance=1e-4).identical is None


def test_same_rewards_within_a_millionth_and_none_when_one_is_missing():
    assert pair(0.0, rewards=(0.5, 0.5)).same_rewards is True
    assert pair(0.0, rewards=(0.5, 0.5 + 2e-6)).same_rewards is False  # 1e-6 absolute below |r| = 1
    assert pair(0.0, rewards=(2.0, 2.0 + 1.5e-6)).same_rewards is True  # 1e-6 * 2 above it
    assert pair(0.0, rewards=(2.0, 2.0 + 3e-6)).same_rewards is False
    assert pair(0.0, rewards=(0.5, 0.25)).same_rewards is False
    assert pair(0.0, rewards=(None, 0.25)).same_rewards is None
    assert pair(0.0, rewards=(0.5, None)).same_rewards is None


def test_step_one_reward_is_the_reward_logged_for_step_one():
    assert step_one_reward([{"step": 2, "reward": 0.75}, {"step": 1.0, "reward": 0.25}]) == 0.25
    assert step_one_reward([{"step": 1, "entropy": 3.0}, {"step": 2, "reward": 0.75}]) is None
    assert step_one_reward([]) is None


@pytest.mark.parametrize(("dtype", "tolerance", "identical"), [("float32", 1e-5, False), ("bfloat16", None, None)])
def test_compare_pair_reads_both_files(tmp_path, dtype, tolerance, identical):
    torch.save({"syncs": 1, "state_dict": UPDATED}, tmp_path / "verl.pt")
    torch.save(params(w=[0.5078125, 1.0], b=[-2.0]), tmp_path / "trl.pt")
    runs = {
        "verl": (str(tmp_path / "verl.pt"), [{"step": 1, "reward": 0.5}]),
        "trl": (str(tmp_path / "trl.pt"), [{"step": 1, "entropy": 2.0}]),
    }
    launches = {"verl": launch("verl", ("advantages", "A")), "trl": launch("trl", ("advantages", "B"))}
    result = compare_pair(THETA0, runs, launches, "verl", "trl", dtype)
    assert (result.first, result.second) == ("verl", "trl")
    assert result.rel == (1 - 2**-17) / 65
    assert (result.tolerance, result.identical) == (tolerance, identical)
    assert result.rewards == (0.5, None) and result.same_rewards is None
    assert result.causes == ("advantages: verl A; trl B",)


def test_the_tolerance_of_chained_steps_doubles_each_earlier_steps_share():
    # (2^K - 1) * 1e-5: K = 1 the single-step tolerance, K = 2 three times it, K = 3 seven times
    assert [tolerance("float32", k) for k in (1, 2, 3)] == pytest.approx([1e-5, 3e-5, 7e-5], rel=1e-12)
    assert tolerance("bfloat16", 2) is None


def test_differing_clip_fractions_are_named_where_nothing_else_explains_a_difference(tmp_path):
    first = [{"step": 1, "reward": 0.5, "clip_frac_low": 0.078125, "clip_frac_high": 0.0625}]
    same = [{"step": 1, "reward": 0.5, "clip_frac_low": 0.078125, "clip_frac_high": 0.0625}]
    higher = [{"step": 1, "reward": 0.5, "clip_frac_low": 0.078125, "clip_frac_high": 0.125}]
    assert clip_difference(first, same) == ""
    assert clip_difference(first, [{"step": 1, "reward": 0.5}]) == ""  # not logged: nothing observed
    observed = "clip (observed): the step-1 clip fractions differ (clip_frac_high 0.0625 / 0.125)"
    assert clip_difference(first, higher) == observed
    torch.save(UPDATED, tmp_path / "verl.pt")
    torch.save(params(w=[0.5078125, 1.0], b=[-2.0]), tmp_path / "trl.pt")
    runs = {"verl": (str(tmp_path / "verl.pt"), first), "trl": (str(tmp_path / "trl.pt"), higher)}
    launches = {"verl": launch("verl", ("advantages", "A")), "trl": launch("trl", ("advantages", "A"))}
    result = compare_pair(THETA0, runs, launches, "verl", "trl", "float32", 2)
    assert (result.tolerance, result.identical, result.causes) == (pytest.approx(3e-5), False, (observed,))
    # a named behaviour that differs is what the report gives; the observation only stands in for none
    launches["trl"] = launch("trl", ("advantages", "B"))
    assert compare_pair(THETA0, runs, launches, "verl", "trl", "float32", 2).causes == ("advantages: verl A; trl B",)


def test_without_safetensors_the_initial_model_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors raises ImportError
    with pytest.raises(
        FirstUpdateError, match=r"needs safetensors \(the report extra: pip install gmpo-plugins\[report\]\)$"
    ):
        initial_parameters(tmp_path)


def test_the_comparison_follows_the_optimisers_step():
    assert comparison("sgd", 1e-8) == PROPORTIONAL  # SGD's step is lr * g whatever the eps
    assert comparison("adamw", 100.0) == comparison("adamw", 1.0) == PROPORTIONAL  # (lr / eps) * m
    assert comparison("adamw", 1e-8) == comparison("adamw", 1e-6) == SIGN_LIKE  # lr * m / sqrt(v)
    assert comparison("adamw", 1e-3) is None  # between: neither derivation holds
    # the same (2^K - 1) * 1e-5 for both kinds (sign-like: 1.3 e per coordinate over two steps <= 3 e)
    assert tolerance("float32", 2, SIGN_LIKE) == tolerance("float32", 2, PROPORTIONAL) == pytest.approx(3e-5)
    assert tolerance("float32", 2, None) is None and tolerance("bfloat16", 2, SIGN_LIKE) is None


# both move w[0] by 0.5 (to 0.5) and b by 0.5 (to -1.5); the second moves w[0] 2^-7 further
BOTH = params(w=[0.5, 1.0], b=[-1.5])
BOTH_FURTHER = params(w=[0.5078125, 1.0], b=[-1.5])


def test_the_sign_like_comparison_is_the_norm_of_the_difference_over_the_norm_of_the_update():
    # gap: 2^-7 - ulp(0.5078125) = 2^-7 - 2^-24 on w[0], 0 elsewhere
    gap = 2**-7 - 2**-24
    # largest entry: gap / 0.5078125; norm: gap / sqrt(0.5078125^2 + 0.5^2) = 0.00781244 / 0.712652 = 1.09625e-2
    assert relative_difference(THETA0, BOTH, BOTH_FURTHER) == pytest.approx(gap / 0.5078125, rel=1e-12)
    rel2 = relative_difference(THETA0, BOTH, BOTH_FURTHER, norm=2.0)
    assert rel2 == pytest.approx(gap / (0.5078125**2 + 0.25) ** 0.5, rel=1e-12)
    assert rel2 == pytest.approx(1.096248e-2, rel=1e-6)


def test_compare_pair_takes_the_norm_for_sign_like_steps(tmp_path):
    torch.save(BOTH, tmp_path / "skyrl.pt")
    torch.save(BOTH_FURTHER, tmp_path / "trl.pt")
    runs = {"skyrl": (str(tmp_path / "skyrl.pt"), []), "trl": (str(tmp_path / "trl.pt"), [])}
    launches = {"skyrl": launch("skyrl"), "trl": launch("trl")}
    result = compare_pair(THETA0, runs, launches, "skyrl", "trl", "float32", 2, SIGN_LIKE)
    assert result.kind == SIGN_LIKE and result.rel == pytest.approx(1.096248e-2, rel=1e-6)
    assert (result.tolerance, result.identical) == (pytest.approx(3e-5), False)
    none = compare_pair(THETA0, runs, launches, "skyrl", "trl", "float32", 2, None)
    assert none.kind is None and none.rel == pytest.approx((2**-7 - 2**-24) / 0.5078125) and none.identical is None


def moved(w0: float) -> dict[str, torch.Tensor]:
    return params(w=[w0, 1.0], b=[-2.0])


# after optimiser step k of 4: verl at w[0] = 0.5, trl 2^-e further (e = -, 17, 15, 14); the gap is
# 2^-e - ulp(0.5 + 2^-e) = 2^-e - 2^-24 over the larger update 0.5 + 2^-e:
#   k = 2: 127 * 2^-24 / (2^-17 * 65537) = 127 / (128 * 65537) = 1.5139e-5  <= 3e-5 (above 1e-5)
#   k = 3: 511 * 2^-24 / (2^-15 * 16385) = 511 / (512 * 16385) = 6.0912e-5  <= 7e-5
#   k = 4: 1023 * 2^-24 / (2^-14 * 8193) = 1023 / (1024 * 8193) = 1.2194e-4, tolerance 1.5e-4: no verdict
TRL_STEPS = (0.5, 0.5 + 2**-17, 0.5 + 2**-15, 0.5 + 2**-14)
STEP_RELS = (0.0, 127 / (128 * 65537), 511 / (512 * 16385), 1023 / (1024 * 8193))


def four_steps(tmp_path, trl_steps=TRL_STEPS):
    files = {"verl": [], "trl": []}
    for k, trl_w0 in enumerate(trl_steps, start=1):
        for name, w0 in (("verl", 0.5), ("trl", trl_w0)):
            torch.save(moved(w0), tmp_path / f"{name}_{k}.pt")
            files[name].append(str(tmp_path / f"{name}_{k}.pt"))
    runs = {name: (names, [{"step": 1, "reward": 0.5}]) for name, names in files.items()}
    launches = {"verl": launch("verl", ("advantages", "A")), "trl": launch("trl", ("advantages", "A"))}
    return compare_steps(THETA0, runs, launches, "float32")


def test_every_optimiser_step_is_compared_with_the_tolerance_of_its_chained_steps(tmp_path):
    pairs = four_steps(tmp_path)
    assert [(p.step, p.first, p.second) for p in pairs] == [(k, "verl", "trl") for k in (1, 2, 3, 4)]
    assert [p.rel for p in pairs] == pytest.approx(STEP_RELS, rel=1e-12, abs=0.0)
    assert [p.tolerance for p in pairs] == pytest.approx([1e-5, 3e-5, 7e-5, 1.5e-4], rel=1e-12)
    # step 2 is above one step's 1e-5 and within two chained steps' 3e-5; step 4 has no verdict
    assert [p.identical for p in pairs] == [True, True, True, None]
    assert overall(pairs) is True


def test_one_step_beyond_its_tolerance_makes_the_first_rl_step_different(tmp_path):
    # step 3 2^-13 further: 2047 * 2^-24 / (2^-13 * 4097) = 2047 / (2048 * 4097) = 2.4396e-4 > 7e-5
    pairs = four_steps(tmp_path, (*TRL_STEPS[:2], 0.5 + 2**-13, TRL_STEPS[3]))
    assert pairs[2].rel == pytest.approx(2047 / (2048 * 4097), rel=1e-12)
    assert [p.identical for p in pairs] == [True, True, False, None]
    assert overall(pairs) is False
    assert overall([pairs[3]]) is None  # no verdict at any step


def test_runs_that_saved_different_numbers_of_steps_are_not_compared(tmp_path):
    torch.save(UPDATED, tmp_path / "a.pt")
    runs = {"verl": ([str(tmp_path / "a.pt")] * 2, []), "trl": ([str(tmp_path / "a.pt")], [])}
    with pytest.raises(FirstUpdateError, match=r"^the runs saved different numbers of optimiser steps \(\[1, 2\]\)$"):
        compare_steps(THETA0, runs, {"verl": launch("verl"), "trl": launch("trl")}, "float32")


def test_the_sign_like_coordinates_are_those_whose_first_adamw_step_reaches_0_999_lr():
    # lr 0.5, no weight decay: u = (θ_0 - θ_1) / lr; w[0] 0 -> -0.5: |u| = 1 (|g| >> eps), kept;
    # w[1] unmoved: u = 0 (no gradient); b -2 -> -1.75: |u| = 0.5 (|g| = eps), dropped
    first = params(w=[-0.5, 1.0], b=[-1.75])
    kept = gradient_well_above_eps(THETA0, first, first, 0.5)
    assert kept.tolist() == [False, True, False]  # flattened in name order: b, w[0], w[1]
    # 1000 / 1001 = 0.999000999 of lr is the edge: b at 0.9990 lr is dropped, 0.9991 lr kept
    assert gradient_well_above_eps(THETA0, first, params(w=[-0.5, 1.0], b=[-2.0 + 0.4995]), 0.5).sum() == 1
    both = params(w=[-0.5, 1.0], b=[-2.0 + 0.49955])
    assert gradient_well_above_eps(THETA0, both, both, 0.5).tolist() == [True, True, False]
    # AdamW's decoupled decay first: θ_1 = θ_0 (1 - lr wd) - lr u; wd 0.1 at lr 0.5 scales w[1] = 1 by 0.95
    decayed = params(w=[-0.5, 0.95], b=[-2.0 * 0.95 + 0.5])  # b: u = -1, w[1]: u = 0
    assert gradient_well_above_eps(THETA0, decayed, decayed, 0.5, 0.1).tolist() == [True, True, False]
    with pytest.raises(FirstUpdateError, match=r"^no parameter's first step reaches 0\.999001 of the learning rate 5"):
        gradient_well_above_eps(THETA0, first, first, 5.0)  # another learning rate: nothing reaches it


def test_the_sign_like_comparison_of_every_step_is_over_the_step_one_coordinates(tmp_path):
    # step 1 (lr 0.5): both move w[0] by -0.5 (kept) and b by 0.25 (|u| = 0.5: dropped)
    # step 2: w[0] at -1.0 and -1.0078125, b at -1.5 and -1.0 (a large difference, outside S)
    # rel2 over {w[0]}: (2^-7 - ulp(1.0078125) = 2^-23) / 1.0078125
    steps = {
        "verl": (params(w=[-0.5, 1.0], b=[-1.75]), params(w=[-1.0, 1.0], b=[-1.5])),
        "trl": (params(w=[-0.5, 1.0], b=[-1.75]), params(w=[-1.0078125, 1.0], b=[-1.0])),
    }
    runs = {}
    for name, saved in steps.items():
        for k, state in enumerate(saved, start=1):
            torch.save(state, tmp_path / f"{name}_{k}.pt")
        runs[name] = ([str(tmp_path / f"{name}_{k}.pt") for k in (1, 2)], [])
    launches = {"verl": launch("verl"), "trl": launch("trl")}
    first, second = compare_steps(THETA0, runs, launches, "float32", SIGN_LIKE, 0.5)
    assert (first.step, first.rel, first.identical) == (1, 0.0, True)
    assert second.rel == pytest.approx((2**-7 - 2**-23) / 1.0078125, rel=1e-12) and second.identical is False
