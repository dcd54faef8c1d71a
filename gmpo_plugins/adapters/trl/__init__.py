"""TRL integration: any registry loss as the policy loss of ``trl.GRPOTrainer``.

    from trl import GRPOConfig
    from gmpo_plugins.adapters.trl import RegistryGRPOTrainer

    trainer = RegistryGRPOTrainer(
        model="path/to/model",
        reward_funcs=my_reward,
        args=GRPOConfig(output_dir="out", epsilon=0.4, beta=0.0),   # eps in log space for gmpo
        train_dataset=dataset,
        loss="gmpo",                       # any name of ``gmpo-plugins list``
        loss_hparams={"log_ratio_bound": 20.0},
    )
    trainer.train()

Modules: ``options`` (GRPOConfig fields -> loss hyper-parameters, refusals),
``normalisation`` (TRL's accumulation/processes -> ``BatchInfo``), ``metrics``
(core metrics -> TRL's metric names), ``trainer`` (the GRPOTrainer subclass; imports
trl). TRL's own GMPO loss, a parity reference, lives in ``gmpo_plugins.compare.backends.trl_gmpo``.

``RegistryGRPOTrainer`` is resolved lazily: only it imports trl.
"""

from __future__ import annotations

from typing import Any

from gmpo_plugins.adapters.trl.normalisation import trl_batch_info
from gmpo_plugins.adapters.trl.options import UnsupportedTRLOptionError, loss_hparams_from_args

__all__ = [
    "RegistryGRPOTrainer",
    "UnsupportedTRLOptionError",
    "loss_hparams_from_args",
    "trl_batch_info",
]


def __getattr__(name: str) -> Any:
    if name == "RegistryGRPOTrainer":
        from gmpo_plugins.adapters.trl.trainer import RegistryGRPOTrainer

        return RegistryGRPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
