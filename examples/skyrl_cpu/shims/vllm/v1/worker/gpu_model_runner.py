"""Stand-in for vLLM's ``GPUModelRunner``, CPU runs only.

skyrl 0.4.0 validates its config (``SkyRLTrainConfig.__post_init__``) through its inference-server
utilities, whose import patches ``GPUModelRunner.load_model`` to record each vLLM worker's runner
(``patches/vllm/patch_model_runner_registry.py``). No vLLM worker runs on CPU (the HF engine of
``skyrl_cpu.engine`` generates): the class only has to exist with that method.
"""

from __future__ import annotations

from typing import Any


class GPUModelRunner:
    """The method skyrl 0.4.0 wraps; never called on CPU."""

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("no vLLM worker runs on CPU: skyrl_cpu.engine generates")
