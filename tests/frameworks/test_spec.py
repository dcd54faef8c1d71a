"""The run spec: a valid file loads with its values; every kind of bad input is a SpecError whose
message starts with the key and says what was expected (checked before any trainer starts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gmpo_plugins.frameworks.spec import FIELDS, RunSpec, SpecError, load_spec


def error(write_spec, **values) -> str:
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(**values))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_valid_spec_loads_with_absolute_paths_and_defaults(write_spec, spec_dir):
    spec = load_spec(write_spec(loss_hparams={"eps_low": 0.3}))
    assert isinstance(spec, RunSpec)
    assert spec.model == spec_dir / "model" and spec.dataset == spec_dir / "prompts.jsonl"
    assert spec.reward == f"{spec_dir / 'reward.py'}:reward"
    assert spec.tokenizer is None and spec.tokenizer_path == spec.model
    assert (spec.rollouts_per_prompt, spec.prompts_per_step, spec.mini_batch_size, spec.micro_batch_size) == (
        2,
        2,
        4,
        2,
    )
    assert spec.responses_per_step == 4  # 2 prompts * 2 rollouts
    assert (spec.optimizer, spec.dtype, spec.kl_estimator, spec.epochs_per_batch) == ("adamw", "bfloat16", "k3", 1)
    # gmpo's registry defaults with the spec's eps_low
    assert spec.resolved_hparams()["eps_low"] == 0.3 and spec.resolved_hparams()["eps_high"] == 0.4


def test_a_module_reference_is_accepted(write_spec):
    spec = load_spec(write_spec(reward="os.path:join"))  # join(response, answer) binds two arguments
    assert spec.reward == "os.path:join"


def test_every_field_is_documented_in_the_module_docstring():
    import gmpo_plugins.frameworks.spec as module

    assert all(f"{name} = " in module.__doc__ or f"[{name}]" in module.__doc__ for name in FIELDS)


@pytest.mark.parametrize(
    ("values", "start"),
    [
        ({"learning_rat": 1e-4}, "learning_rat: unknown key (did you mean 'learning_rate'?)"),
        ({"model": "nowhere"}, "model: "),
        ({"dataset": "none.jsonl"}, "dataset: "),
        ({"dataset": "reward.py"}, "dataset: expected a .jsonl or .parquet file"),
        ({"model": "prompts.jsonl"}, "model: "),
    ],
)
def test_unknown_keys_and_missing_files(write_spec, values, start):
    assert error(write_spec, **values).startswith(start)


def test_a_missing_required_key_is_named(write_spec):
    with pytest.raises(SpecError, match=r"^reward: missing \(required keys: model, dataset, reward\)$"):
        load_spec(write_spec(drop=("reward",)))


def test_a_dataset_without_answers_is_refused(write_spec, spec_dir):
    (spec_dir / "prompts.jsonl").write_text('{"prompt": "say 1", "label": "1"}\n')
    assert error(write_spec) == "dataset: prompts.jsonl has no answer column (every row needs prompt and answer)"


@pytest.mark.parametrize(
    ("reward", "fragment"),
    [
        ("reward.py:missing", "has no function 'missing'"),
        ("reward.py:one_argument", "has the signature (response), expected reward(response: str, answer: str)"),
        ("reward.py:keyword_only", "has the signature (*, response, answer), expected"),
        ("absent.py:reward", "absent.py does not exist"),
        ("no_such_module_here:reward", "module 'no_such_module_here' failed to import: ModuleNotFoundError"),
        ("reward.py", "expected FILE.py:FUNCTION or package.module:FUNCTION"),
    ],
)
def test_a_reward_that_does_not_import_or_has_the_wrong_signature(write_spec, reward, fragment):
    message = error(write_spec, reward=reward)
    assert message.startswith("reward: ") and fragment in message


def test_a_reward_file_that_raises_on_import_is_named(write_spec, spec_dir):
    (spec_dir / "broken.py").write_text("raise RuntimeError('no reward here')\n")
    message = error(write_spec, reward="broken.py:reward")
    assert message.endswith("broken.py failed to import: RuntimeError: no reward here")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # 2 prompts * 2 rollouts = 4 responses per step; 3 does not divide 4
        (
            {"mini_batch_size": 3, "micro_batch_size": 1},
            "mini_batch_size: 3 does not divide the responses per step "
            "(prompts_per_step * rollouts_per_prompt = 2 * 2 = 4)",
        ),
        ({"micro_batch_size": 3}, "micro_batch_size: 3 does not divide mini_batch_size = 4"),
    ],
)
def test_batch_sizes_that_do_not_divide(write_spec, values, expected):
    assert error(write_spec, **values) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"rollouts_per_prompt": 1}, "rollouts_per_prompt: expected an integer >= 2 (group advantages need"),
        ({"steps": 0}, "steps: expected an integer >= 1, got 0"),
        ({"steps": 2.5}, "steps: expected an integer, got 2.5"),
        ({"seed": True}, "seed: expected an integer, got True"),
        ({"learning_rate": 0.0}, "learning_rate: expected a number > 0, got 0.0"),
        ({"weight_decay": -0.1}, "weight_decay: expected a number >= 0, got -0.1"),
        ({"kl_coef": "a lot"}, "kl_coef: expected a finite number, got 'a lot'"),
        ({"optimizer": "adam"}, "optimizer: expected one of adamw, sgd, got 'adam'"),
        ({"dtype": "float16"}, "dtype: expected one of bfloat16, float32, got 'float16'"),
        ({"advantage_std_norm": 1}, "advantage_std_norm: expected true or false, got 1"),
        ({"loss": "gmop"}, "loss: "),
        (
            {"loss_hparams": {"eps_lo": 0.4}},
            "loss_hparams.eps_lo: not a hyper-parameter of gmpo (did you mean 'eps_low'?)",
        ),
        ({"loss_hparams": {"eps_low": -1.0}}, "loss_hparams.eps_low: "),
        ({"loss_hparams": {"kl_beta": 0.1}}, "loss_hparams.kl_beta: set kl_coef instead"),
    ],
)
def test_bad_values_name_the_key(write_spec, values, expected):
    assert error(write_spec, **values).startswith(expected)


def test_an_unknown_loss_lists_close_names(write_spec):
    assert "gmpo" in error(write_spec, loss="gmop")


def test_a_file_that_is_not_toml(spec_dir):
    path = spec_dir / "bad.toml"
    path.write_text("model = \n")
    with pytest.raises(SpecError, match=r"^SPEC: bad.toml is not valid TOML"):
        load_spec(path)


def test_a_spec_that_does_not_exist(spec_dir):
    with pytest.raises(SpecError, match=r"^SPEC: .*nothing.toml does not exist"):
        load_spec(spec_dir / "nothing.toml")


def test_adam_eps_defaults_to_adamws_and_is_read(write_spec):
    assert load_spec(write_spec()).adam_eps == 1e-8
    assert load_spec(write_spec(adam_eps=100.0)).adam_eps == 100.0
    assert load_spec(write_spec(adam_eps=1)).adam_eps == 1


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"adam_eps": 1e-3, "optimizer": "sgd"}, "adam_eps: applies to optimizer = \"adamw\" only, not 'sgd'"),
        ({"adam_eps": 0.0}, "adam_eps: expected a number > 0, got 0.0"),
        ({"adam_eps": "small"}, "adam_eps: expected a finite number, got 'small'"),
    ],
)
def test_bad_adam_eps(write_spec, values, expected):
    assert error(write_spec, **values) == expected


@pytest.mark.parametrize(("mini", "micro"), [(4, 4), (2, 2), (1, 1), (12, 4), (6, 3), (10, 2), (7, 1)])
def test_micro_batch_size_left_out_is_the_largest_divisor_of_the_mini_batch_up_to_4(write_spec, mini, micro):
    spec = load_spec(
        write_spec(micro_batch_size=None, mini_batch_size=mini, prompts_per_step=mini, rollouts_per_prompt=2)
    )
    assert (spec.mini_batch_size, spec.micro_batch_size) == (mini, micro)


def test_the_example_takes_a_smaller_mini_batch_without_a_micro_batch_setting(spec_dir):
    example = Path(__file__).resolve().parents[2] / "examples" / "frameworks" / "tiny.toml"
    shutil.copy(example, spec_dir / "tiny.toml")  # the folder has the model, prompts and reward it names
    assert load_spec(spec_dir / "tiny.toml").micro_batch_size == 4
    spec = load_spec(spec_dir / "tiny.toml", {"mini_batch_size": 2})
    assert (spec.mini_batch_size, spec.micro_batch_size) == (2, 2)
