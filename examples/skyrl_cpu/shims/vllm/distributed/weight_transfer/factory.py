"""Stand-in for vLLM's trainer-side ``WeightTransferTrainerFactory``, CPU runs only.

skyrl 0.4.0 registers its trainer engines here (``weight_sync/register.py``; subclasses of
``nccl_engine`` / ``ipc_engine`` of this stand-in, others by module path) and builds the policy
rank's engine with ``trainer_init(init_info, client=..., source=...)``
(``weight_sync/weight_senders.py``). As in vLLM, the engine class is looked up by the init
info's ``backend`` and built with the same arguments; a class registered by module path is
imported only when built. The receive-side ``WeightTransferEngineFactory`` (vLLM workers) does
not exist here: no vLLM worker runs on CPU (SkyRL skips its registration when it is missing).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar


class WeightTransferTrainerFactory:
    """Backend name -> trainer-side engine class (or ``(module, class name)``)."""

    _registry: ClassVar[dict[str, Any]] = {}

    @classmethod
    def register_engine(cls, name: str, engine: Any, class_name: str | None = None) -> None:
        if name in cls._registry:
            raise ValueError(f"weight transfer trainer engine {name!r} is already registered")
        cls._registry[name] = engine if class_name is None else (engine, class_name)

    @classmethod
    def trainer_init(cls, init_info: Any, **kwargs: Any) -> Any:
        """Build the engine registered under ``init_info.backend``."""
        backend = init_info.backend
        if backend not in cls._registry:
            raise ValueError(f"no weight transfer trainer engine registered for {backend!r}")
        engine = cls._registry[backend]
        if isinstance(engine, tuple):
            module, class_name = engine
            engine = getattr(importlib.import_module(module), class_name)
        return engine(init_info, **kwargs)
