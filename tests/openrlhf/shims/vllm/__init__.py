"""TEST-ONLY stand-in for the `vllm` package (CUDA-only; not installable on a CPU box).

OpenRLHF 0.11.2 imports vllm at module level in:
  openrlhf/trainer/ray/vllm_engine.py      : `import vllm`, `from vllm.inputs import TokensPrompt`,
                                             `from vllm.utils import random_uuid`
  openrlhf/trainer/ppo_utils/samples_generator.py : `from vllm import SamplingParams`
Those modules are pulled in by `import openrlhf.trainer.ray` (and so by ppo_actor and
cli/train_ppo_ray). Only names are needed at import time; anything that actually tries
to generate raises. Never ship this: it lives under tests/ and is put on PYTHONPATH by
`nox -s openrlhf` (and by tests/openrlhf/conftest.py) for the OpenRLHF tests only.
"""

# The version OpenRLHF 0.11.2 pins in its "vllm" extra, so version checks in OpenRLHF
# (ppo_actor.py:505-510, vllm_engine.py:91-95) take their current-vLLM branch.
__version__ = "0.29.0"


class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("vllm is a test-only shim here; generation is unavailable on CPU")


class SamplingParams(_Unavailable):
    pass


class AsyncEngineArgs(_Unavailable):
    pass


class AsyncLLMEngine(_Unavailable):
    @classmethod
    def from_engine_args(cls, *args, **kwargs):
        raise RuntimeError("vllm is a test-only shim here")
