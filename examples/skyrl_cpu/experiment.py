"""SkyRL's experiment (``BasePPOExp``) wired to the CPU stand-ins through its own hooks.

``CPUExp`` overrides only hooks of ``BasePPOExp``: ``get_train_dataset`` (SkyRL's
``PromptDataset`` tokenised in this process: SkyRL's hook starts 8 ``datasets`` processes,
half a minute on 2 cores for a few prompts), ``get_inference_client``
(``engine.CPUInferenceClient``), ``get_generator`` (``engine.SeededGenerator``, scored by a run
spec's reward when one is given) and
``get_trainer`` (SkyRL's ``RayPPOTrainer``, building the CPU worker classes of ``workers`` in
``build_models`` and with a ``TrainingCallback`` that records every logged payload). The rest
of the run (``BasePPOExp.run`` -> ``RayPPOTrainer.train``: dataset, GRPO advantages, the
policy's forward and ``forward_backward`` with the configured ``policy_loss_type``, optimizer
step, weight sync) is SkyRL's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ray
import torch
from skyrl.train.dataset import PromptDataset
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.callbacks import TrainingCallback

from skyrl_cpu.engine import CPUInferenceClient, SeededGenerator
from skyrl_cpu.workers import ray_worker_classes


class CPUTrainer(RayPPOTrainer):
    """SkyRL's trainer with the CPU policy and reference workers (``workers``)."""

    def build_models(self, PolicyWorker: Any, CriticWorker: Any, RefWorker: Any) -> None:  # noqa: N803 - SkyRL's names
        policy, ref = ray_worker_classes()
        super().build_models(policy, CriticWorker, ref)


class RecordLogs(TrainingCallback):
    """Keeps every ``on_log`` payload (``logs``: step -> metrics); with ``params_dir`` set, also
    saves the engine's weights after each step (they arrived through SkyRL's weight sync, so
    they are the policy's parameters after that step) as ``params_dir/params_step<N>.pt``."""

    def __init__(self, engine: Any, params_dir: str | None) -> None:
        self.engine = engine
        self.params_dir = params_dir
        self.logs: dict[int, dict[str, Any]] = {}

    def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
        step = int(callback_input.global_step)
        self.logs[step] = dict(callback_input.logs or {})
        if self.params_dir is not None:
            weights = ray.get(self.engine.state_dict.remote())
            torch.save(weights, os.path.join(self.params_dir, f"params_step{step}.pt"))


class CPUExp(BasePPOExp):
    """``BasePPOExp`` with the CPU inference engine, generator and workers (module docstring)."""

    def __init__(
        self, cfg: Any, engine: Any, params_dir: str | None = None, reward: Callable[[str, str], float] | None = None
    ) -> None:
        self.engine = engine
        self.reward = reward
        self.recorder = RecordLogs(engine, params_dir)
        super().__init__(cfg)

    def get_train_dataset(self) -> PromptDataset:
        return PromptDataset(
            datasets=self.cfg.data.train_data,
            tokenizer=self.tokenizer,
            max_prompt_length=self.cfg.trainer.max_prompt_length,
            num_workers=1,
        )

    def get_inference_client(self) -> CPUInferenceClient:
        return CPUInferenceClient(self.engine, self.cfg.trainer.policy.model.path)

    def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> SeededGenerator:
        return SeededGenerator(cfg.generator, tokenizer, inference_engine_client, self.reward)

    def get_trainer(
        self,
        cfg: Any,
        tracker: Any,
        tokenizer: Any,
        train_dataset: Any,
        eval_dataset: Any,
        inference_engine_client: Any,
        generator: Any,
        colocate_pg: Any,
    ) -> CPUTrainer:
        trainer = CPUTrainer(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )
        trainer.add_callback(self.recorder)
        return trainer
