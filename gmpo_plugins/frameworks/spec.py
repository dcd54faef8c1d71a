"""The run spec: one GMPO (or other registry-loss) training run, written once for every framework.

A TOML file (read with ``tomllib``), flat keys plus one ``[loss_hparams]`` table; paths are
relative to the spec's folder::

    model = "model"                       # Hugging Face model directory (config.json inside)
    tokenizer = "tokenizer"               # optional, default: the model directory
    dataset = "prompts.jsonl"             # .jsonl or .parquet; every row: "prompt" and "answer" (str)
    reward = "reward.py:score"            # FILE.py:FUNCTION or package.module:FUNCTION,
                                          # called reward(response: str, answer: str) -> float
    loss = "gmpo"                         # a registry loss (gmpo-plugins list)
    rollouts_per_prompt = 4               # responses sampled per prompt (the group, >= 2)
    prompts_per_step = 8                  # prompts per rollout batch (one RL step)
    mini_batch_size = 32                  # responses per optimiser step
    micro_batch_size = 4                  # responses per forward/backward pass; default: the
                                          # largest divisor of mini_batch_size up to 4
    epochs_per_batch = 1                  # passes over each rollout batch
    optimizer = "adamw"                   # adamw | sgd
    learning_rate = 1e-6                  # constant, no warm-up
    adam_eps = 1e-8                       # AdamW's epsilon (adamw only)
    weight_decay = 0.0
    max_grad_norm = 1.0                   # gradient-norm clip
    max_prompt_length = 512               # tokens
    max_response_length = 512             # tokens generated per response
    temperature = 1.0                     # sampling temperature of the rollouts
    advantage_std_norm = true             # group advantages (r - mean) / std; false: r - mean
    kl_coef = 0.0                         # weight of a KL(policy || initial policy) term; 0: none
    kl_estimator = "k3"                   # k1 | k2 | k3 (Schulman's estimators)
    steps = 3                             # RL steps (rollout batches)
    seed = 0
    dtype = "bfloat16"                    # bfloat16 | float32: the training precision

    [loss_hparams]                        # the loss's hyper-parameters (spec defaults otherwise)
    eps_low = 0.4
    eps_high = 0.4

``load_spec`` checks everything a trainer would otherwise discover late: unknown keys (with
a close match), types and ranges, files that do not exist, a dataset without ``prompt`` /
``answer``, a reward function that does not import or cannot be called as
``reward(response, answer)``, batch sizes that do not divide, an unknown loss or
hyper-parameter. Each failure is a ``SpecError`` whose message starts with the key.
"""

from __future__ import annotations

import difflib
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from gmpo_plugins.frameworks.reward import RewardError, load_reward

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

OPTIMIZERS = ("adamw", "sgd")
DTYPES = ("bfloat16", "float32")
KL_ESTIMATORS = ("k1", "k2", "k3")
DATASET_SUFFIXES = (".jsonl", ".parquet")
DATASET_COLUMNS = ("prompt", "answer")
# KL is a run setting (kl_coef, kl_estimator): frameworks add it in different places
RUN_LEVEL_HPARAMS = {"kl_beta": "kl_coef", "kl_estimator": "kl_estimator"}
DEFAULT_MINI_BATCH_SIZE = 32
DEFAULT_MICRO_BATCH_SIZE = 4  # the most, when left out (default_micro_batch_size)


class SpecError(ValueError):
    """A run spec that cannot run; the message starts with the offending key."""


@dataclass(frozen=True)
class RunSpec:
    """One training run for every framework (module docstring: meaning and units of each field).

    Paths are absolute after ``load_spec``. Batch sizes count responses, except
    ``prompts_per_step`` (prompts).
    """

    model: Path
    dataset: Path
    reward: str
    tokenizer: Path | None = None
    loss: str = "gmpo"
    loss_hparams: Mapping[str, Any] = field(default_factory=dict)
    rollouts_per_prompt: int = 4
    prompts_per_step: int = 8
    mini_batch_size: int = DEFAULT_MINI_BATCH_SIZE
    micro_batch_size: int = DEFAULT_MICRO_BATCH_SIZE
    epochs_per_batch: int = 1
    optimizer: str = "adamw"
    learning_rate: float = 1e-6
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_prompt_length: int = 512
    max_response_length: int = 512
    temperature: float = 1.0
    advantage_std_norm: bool = True
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    steps: int = 1
    seed: int = 0
    dtype: str = "bfloat16"

    @property
    def responses_per_step(self) -> int:
        """Responses in one rollout batch: ``prompts_per_step * rollouts_per_prompt``."""
        return self.prompts_per_step * self.rollouts_per_prompt

    @property
    def optimiser_steps_per_rl_step(self) -> int:
        """Optimiser steps on one rollout batch: its mini-batches times ``epochs_per_batch``."""
        return self.responses_per_step // self.mini_batch_size * self.epochs_per_batch

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer directory (the model's when ``tokenizer`` is not given)."""
        return self.model if self.tokenizer is None else self.tokenizer

    def resolved_hparams(self) -> dict[str, Any]:
        """The loss's hyper-parameters: its registry defaults updated with ``loss_hparams``."""
        from gmpo_plugins.core.registry import get_loss

        return get_loss(self.loss).resolve(self.loss_hparams)


FIELDS = {f.name: f for f in fields(RunSpec)}
REQUIRED = [name for name, f in FIELDS.items() if f.default is MISSING and f.default_factory is MISSING]
INTS = {
    "rollouts_per_prompt": 2,
    "prompts_per_step": 1,
    "mini_batch_size": 1,
    "micro_batch_size": 1,
    "epochs_per_batch": 1,
    "max_prompt_length": 1,
    "max_response_length": 1,
    "steps": 1,
    "seed": 0,
}  # name -> smallest value
POSITIVE_FLOATS = ("learning_rate", "adam_eps", "max_grad_norm", "temperature")
NON_NEGATIVE_FLOATS = ("weight_decay", "kl_coef")
CHOICES = {"optimizer": OPTIMIZERS, "dtype": DTYPES, "kl_estimator": KL_ESTIMATORS}


def _unknown_key(key: str) -> SpecError:
    close = difflib.get_close_matches(key, list(FIELDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SpecError(f"{key}: unknown key{hint}; valid keys: {', '.join(FIELDS)}")


def _check_types(raw: Mapping[str, Any]) -> None:
    for key, value in raw.items():
        if key in INTS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SpecError(f"{key}: expected an integer, got {value!r}")
            if value < INTS[key]:
                why = (
                    " (group advantages need at least two responses per prompt)" if key == "rollouts_per_prompt" else ""
                )
                raise SpecError(f"{key}: expected an integer >= {INTS[key]}{why}, got {value}")
        elif key in POSITIVE_FLOATS or key in NON_NEGATIVE_FLOATS:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise SpecError(f"{key}: expected a finite number, got {value!r}")
            if key in POSITIVE_FLOATS and value <= 0:
                raise SpecError(f"{key}: expected a number > 0, got {value}")
            if value < 0:
                raise SpecError(f"{key}: expected a number >= 0, got {value}")
        elif key in CHOICES:
            if value not in CHOICES[key]:
                raise SpecError(f"{key}: expected one of {', '.join(CHOICES[key])}, got {value!r}")
        elif key == "advantage_std_norm":
            if not isinstance(value, bool):
                raise SpecError(f"{key}: expected true or false, got {value!r}")
        elif key == "loss_hparams":
            if not isinstance(value, Mapping):
                raise SpecError(f"{key}: expected a table ([loss_hparams]), got {value!r}")
        elif not isinstance(value, str) or not value:
            raise SpecError(f"{key}: expected a non-empty string, got {value!r}")


def _path(key: str, value: str, base: Path, *, folder: bool) -> Path:
    path = (base / value).resolve()
    if not path.exists():
        raise SpecError(f"{key}: {path} does not exist")
    if folder and not path.is_dir():
        raise SpecError(f"{key}: {path} is not a directory")
    if not folder and not path.is_file():
        raise SpecError(f"{key}: {path} is not a file")
    return path


def _dataset_columns(path: Path) -> list[str]:
    """Column names of the dataset (the first row's keys for jsonl, the schema for parquet)."""
    if path.suffix == ".jsonl":
        with path.open() as handle:
            first = handle.readline()
        try:
            row = json.loads(first)
        except json.JSONDecodeError as exc:
            raise SpecError(f"dataset: the first line of {path} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise SpecError(f"dataset: the first line of {path} is not a JSON object")
        return list(row)
    try:
        import pyarrow.parquet as pq
    except ImportError:  # the columns are checked by the framework that reads it
        return list(DATASET_COLUMNS)
    return list(pq.read_schema(path).names)


def _check_dataset(path: Path) -> None:
    if path.suffix not in DATASET_SUFFIXES:
        raise SpecError(f"dataset: expected a {' or '.join(DATASET_SUFFIXES)} file, got {path.name}")
    missing = [column for column in DATASET_COLUMNS if column not in _dataset_columns(path)]
    if missing:
        raise SpecError(f"dataset: {path.name} has no {' / '.join(missing)} column (every row needs prompt and answer)")


def default_micro_batch_size(mini_batch_size: int) -> int:
    """``micro_batch_size`` when the spec leaves it out: the largest divisor of
    ``mini_batch_size`` that is at most ``DEFAULT_MICRO_BATCH_SIZE`` (4), so a spec that sets only
    ``mini_batch_size`` (``--set mini_batch_size=2``) stays valid."""
    return max(d for d in range(1, min(DEFAULT_MICRO_BATCH_SIZE, mini_batch_size) + 1) if mini_batch_size % d == 0)


def _check_batches(spec: RunSpec) -> None:
    per_step = spec.responses_per_step
    if per_step % spec.mini_batch_size:
        raise SpecError(
            f"mini_batch_size: {spec.mini_batch_size} does not divide the responses per step "
            f"(prompts_per_step * rollouts_per_prompt = {spec.prompts_per_step} * {spec.rollouts_per_prompt} "
            f"= {per_step})"
        )
    if spec.mini_batch_size % spec.micro_batch_size:
        raise SpecError(
            f"micro_batch_size: {spec.micro_batch_size} does not divide mini_batch_size = {spec.mini_batch_size}"
        )


def _check_loss(spec: RunSpec) -> None:
    from gmpo_plugins.core.registry import UnknownLossError, get_loss

    try:
        loss = get_loss(spec.loss)
    except UnknownLossError as exc:
        raise SpecError(f"loss: {exc}") from None
    for key, setting in RUN_LEVEL_HPARAMS.items():
        if key in spec.loss_hparams:
            raise SpecError(
                f"loss_hparams.{key}: set {setting} instead (each framework adds the KL term in its own place)"
            )
    for key in spec.loss_hparams:
        if key not in loss.defaults:
            close = difflib.get_close_matches(key, list(loss.defaults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(
                f"loss_hparams.{key}: not a hyper-parameter of {spec.loss}{hint}; valid: {', '.join(loss.defaults)}"
            )
    try:
        loss.resolve(spec.loss_hparams)
    except (TypeError, ValueError) as exc:
        key = next(iter(spec.loss_hparams), "")
        raise SpecError(f"loss_hparams{'.' + key if len(spec.loss_hparams) == 1 else ''}: {exc}") from None


def spec_from_mapping(raw: Mapping[str, Any], base: Path) -> RunSpec:
    """A checked ``RunSpec`` from parsed TOML ``raw``; relative paths are taken from ``base``."""
    for key in raw:
        if key not in FIELDS:
            raise _unknown_key(key)
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise SpecError(f"{missing[0]}: missing (required keys: {', '.join(REQUIRED)})")
    _check_types(raw)
    if "adam_eps" in raw and raw.get("optimizer", "adamw") != "adamw":
        raise SpecError(f'adam_eps: applies to optimizer = "adamw" only, not {raw["optimizer"]!r}')
    values = dict(raw)
    values["model"] = _path("model", raw["model"], base, folder=True)
    if "tokenizer" in raw:
        values["tokenizer"] = _path("tokenizer", raw["tokenizer"], base, folder=True)
    values["dataset"] = _path("dataset", raw["dataset"], base, folder=False)
    _check_dataset(values["dataset"])
    try:
        values["reward"] = load_reward(raw["reward"], base).reference
    except RewardError as exc:
        raise SpecError(f"reward: {exc}") from None
    for key in POSITIVE_FLOATS + NON_NEGATIVE_FLOATS:
        if key in values:
            values[key] = float(values[key])
    values["loss_hparams"] = dict(raw.get("loss_hparams", {}))
    if "micro_batch_size" not in raw:
        values["micro_batch_size"] = default_micro_batch_size(values.get("mini_batch_size", DEFAULT_MINI_BATCH_SIZE))
    spec = RunSpec(**values)
    _check_batches(spec)
    _check_loss(spec)
    return spec


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (VALUE in TOML: ``steps=1``, ``dtype="float32"``, ``advantage_std_norm=false``;
    ``loss_hparams.eps_low=0.3`` for a loss hyper-parameter) as ``(KEY, value)``; SpecError otherwise."""
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise SpecError(f"--set {text}: expected KEY=VALUE")
    try:
        parsed = tomllib.loads(f"value = {value.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        raise SpecError(f"--set {text}: {value.strip()!r} is not a TOML value (a string needs quotes)") from None
    return key, parsed


def load_spec(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunSpec:
    """Read and check the TOML run spec at ``path`` (module docstring), with ``overrides``
    (``parse_override``) replacing its values; raises SpecError."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"SPEC: {path} does not exist or is not a file")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"SPEC: {path.name} is not valid TOML ({exc})") from None
    for key, value in (overrides or {}).items():
        table, dot, name = key.partition(".")
        if dot and table == "loss_hparams":
            raw["loss_hparams"] = {**raw.get("loss_hparams", {}), name: value}
        else:
            raw[key] = value
    return spec_from_mapping(raw, path.resolve().parent)
