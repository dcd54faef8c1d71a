"""Process set-up for OpenRLHF's end-to-end runs on CPU (tests/openrlhf/e2e; an example, not shipped).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``; the e2e tests (or a user running OpenRLHF on
CPU) put this directory on the ``PYTHONPATH`` of the ``gmpo-openrlhf`` process they start, which Ray passes on
to every worker it spawns (PPOTrainer, PolicyModelActor, ReferenceModelActor, RolloutRayActor). Nothing here
runs in any other process, and nothing here ships. Each patch is applied right after the module it patches is
imported (a post-import hook), so a process that never imports it is untouched:

``torch``
    OpenRLHF has no device layer and calls CUDA directly: ``torch.cuda.set_device``
    (utils/deepspeed/deepspeed.py), ``current_device`` (ppo_actor.py, launcher.py), ``synchronize``
    (distributed_util.py), ``current_stream`` (ppo_actor.py). On a machine without CUDA they raise;
    here set_device / synchronize are no-ops, current_stream returns None and current_device returns
    "cpu", so the tensors OpenRLHF places on "the current device" stay on the CPU.
``openrlhf.trainer.ppo_utils.replay_buffer``
    ``NaiveReplayBuffer.__init__`` builds ``torch.device(f"cuda:{current_device()}")`` as the device
    that micro-batches are moved to; here that device is the CPU.
``openrlhf.utils.utils`` (and the parser train_ppo_ray builds)
    fp32 training. OpenRLHF offers ``--ds.param_dtype`` bf16 or fp16 only: cli/train_ppo_ray.py declares
    it with ``choices=["bf16", "fp16"]`` and utils/utils.py ``convert_to_torch_dtype`` raises
    ``ValueError("Invalid param_dtype")`` for anything else. Past those two lines nothing needs bf16: the
    DeepSpeed configs of utils/deepspeed/deepspeed_utils.py enable DeepSpeed's ``bf16`` section only for
    "bf16" and ``fp16`` only for "fp16", and DeepSpeed trains in fp32 when neither is enabled. Here
    ``--ds.param_dtype`` also accepts ``fp32``, and ``convert_to_torch_dtype("fp32")`` is torch.float32,
    so the models load, train and save in fp32 (bf16 and fp16 are unchanged). A parse with ``fp32`` sets
    ``OPENRLHF_E2E_ENGINE_DTYPE=float32`` in the driver's environment, which the Ray workers inherit.
``vllm`` (the stand-in of tests/openrlhf/shims; only with ``OPENRLHF_E2E_ENGINE_DTYPE`` set)
    trainer/ray/vllm_engine.py asks every rollout engine for ``"dtype": "bfloat16"`` (hard-coded), and the
    weight sync requires the actor's dtype to be the engine's (vllm_worker_wrap.py: ``assert dtype ==
    self.model_config.dtype``, which the stand-in's sync keeps), so an fp32 actor cannot sync into it.
    ``AsyncEngineArgs`` takes that dtype instead (the stand-in generates in fp32 either way, from the
    same checkpoint, so the rollouts do not change).
``ray`` (only with ``OPENRLHF_E2E_RAY`` set: the driver)
    OpenRLHF's placement groups and actors ask for ``GPU`` resources, which a CPU node lacks (its
    ``ray.get(placement_group.ready())`` would wait forever). ``ray.init`` of a new local cluster gets
    the logical resources and the temp dir named in ``OPENRLHF_E2E_RAY`` (JSON: num_cpus, num_gpus,
    temp_dir); the dashboard is off.
``gmpo_plugins.adapters.openrlhf.patch`` (only with ``OPENRLHF_E2E_RECORD_DIR`` set)
    A marker: every call of the registry loss appends one JSON line to ``loss_calls.jsonl`` there (Ray
    actor class, process id, torch.distributed rank, loss type, micro-batch rows and valid tokens, the
    ``gmpo_plugins`` package file, the loss's metrics as it handed them to OpenRLHF's logger), so a
    test can count where and how often the loss ran, from which checkout, and what its logger was
    given. The loss itself is unchanged.
``deepspeed.runtime.engine`` (only with ``GMPO_CPU_STEP_PARAMS`` set: ``examples/optimiser_steps.py``)
    The actor's parameters after each optimiser step of RL step 1. OpenRLHF syncs its vLLM engines once per
    RL step, after the step's last optimiser step (``engine_weights_1.pt`` of the vLLM stand-in), so the
    steps before it are seen nowhere else, and OpenRLHF's strategy steps through ``DeepSpeedEngine.step``
    (``optimizer_step`` -> ``model.step()``). The recipe trains under ZeRO-2 (``--ds.zero_stage``' default)
    with DeepSpeed's AdamW: ``DeepSpeedZeroOptimizer.step`` steps that torch optimizer on its own flat
    float32 partition, then copies the partition into the module's parameters and all-gathers them. A
    ``register_step_post_hook`` on that inner optimizer therefore fires before the module holds the new
    values (and sees a flat partition, without names). The first point at which the module holds them is the
    return of ``DeepSpeedEngine.step``: wrapped here, it saves ``module.named_parameters()`` (under ZeRO-2
    every rank holds them whole; Hugging Face names, the actor's ``model``) after each call that applied an
    optimiser step (``global_steps`` advanced), rank 0 writing. ZeRO-3 partitions the parameters themselves
    and is refused. The engines without an optimiser (the reference model) never call ``step``.
``gmpo_plugins.adapters.openrlhf.hidden_logprobs`` (only with ``OPENRLHF_E2E_RECORD_DIR`` set)
    A marker: every hidden-state log-prob call appends one JSON line to ``head_calls.jsonl`` there (Ray actor
    class, process id, the lm_head weight's element count before the call and its full count: ``ds_numel``
    under ZeRO-3), so a test can see where the path ran. The computation is unchanged.
"""

from __future__ import annotations

import functools
import importlib.abc
import json
import os
import sys

_HOOKS = {}
_ENGINE_DTYPE_ENV = "OPENRLHF_E2E_ENGINE_DTYPE"


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, patch):
        self._inner, self._patch = inner, patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _HOOKS.pop(fullname, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def after_import(name, patch):
    """Run ``patch(module)`` once, right after ``name`` is first imported."""
    _HOOKS[name] = patch


def _patch_torch_cuda(torch):
    cuda = torch.cuda
    cuda.set_device = lambda device=None: None
    cuda.synchronize = lambda device=None: None
    cuda.current_stream = lambda device=None: None
    cuda.current_device = lambda: "cpu"


def _patch_replay_buffer(module):
    import torch

    original = module.NaiveReplayBuffer.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        current_device = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # for the "cuda:{index}" it formats
        try:
            original(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = current_device
        self.target_device = torch.device("cpu")

    module.NaiveReplayBuffer.__init__ = __init__


def _patch_param_dtype(module):
    import argparse

    import torch

    convert = module.convert_to_torch_dtype

    @functools.wraps(convert)
    def convert_to_torch_dtype(param_dtype):
        return torch.float32 if param_dtype == "fp32" else convert(param_dtype)

    module.convert_to_torch_dtype = convert_to_torch_dtype
    parse_args = argparse.ArgumentParser.parse_args

    @functools.wraps(parse_args)
    def parse_args_with_fp32(self, args=None, namespace=None):
        for action in self._actions:
            if action.dest == "ds.param_dtype" and action.choices is not None and "fp32" not in action.choices:
                action.choices = [*action.choices, "fp32"]
        parsed = parse_args(self, args, namespace)
        if getattr(parsed, "ds.param_dtype", None) == "fp32":
            os.environ[_ENGINE_DTYPE_ENV] = "float32"
        return parsed

    argparse.ArgumentParser.parse_args = parse_args_with_fp32


def _patch_engine_dtype(vllm):
    engine_args = vllm.AsyncEngineArgs

    class AsyncEngineArgs(engine_args):
        __doc__ = engine_args.__doc__

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "dtype": os.environ[_ENGINE_DTYPE_ENV]})

    vllm.AsyncEngineArgs = AsyncEngineArgs


def _patch_ray_init(ray):
    settings = json.loads(os.environ["OPENRLHF_E2E_RAY"])
    original = ray.init

    @functools.wraps(original)
    def init(*args, **kwargs):
        if not args and kwargs.get("address") is None:
            kwargs.setdefault("num_cpus", settings["num_cpus"])
            kwargs.setdefault("num_gpus", settings["num_gpus"])
            kwargs.setdefault("include_dashboard", False)
            kwargs.setdefault("_temp_dir", settings["temp_dir"])
        return original(*args, **kwargs)

    ray.init = init


def _actor_class():
    try:
        import ray

        actor = ray.get_runtime_context().current_actor
        return actor._ray_actor_creation_function_descriptor.class_name
    except Exception:  # noqa: BLE001 - not inside a Ray actor
        return None


def _patch_loss_marker(module):
    os.makedirs(os.environ["OPENRLHF_E2E_RECORD_DIR"], exist_ok=True)
    path = os.path.join(os.environ["OPENRLHF_E2E_RECORD_DIR"], "loss_calls.jsonl")
    original = module.registry_forward
    original_keep = module.keep
    kept = []

    def keep(metrics):
        kept.append({key: float(value) for key, value in metrics.items()})
        original_keep(metrics)

    @functools.wraps(original)
    def registry_forward(plan, log_probs, old_log_probs, advantages, action_mask, *args, **kwargs):
        import torch.distributed as dist

        kept.clear()
        result = original(plan, log_probs, old_log_probs, advantages, action_mask, *args, **kwargs)
        record = {
            "actor_class": _actor_class(),
            "pid": os.getpid(),
            "rank": dist.get_rank() if dist.is_initialized() else None,
            "policy_loss_type": plan.policy_loss_type,
            "rows": int(log_probs.shape[0]),
            "tokens": int(action_mask.sum()) if action_mask is not None else int(log_probs.numel()),
            "gmpo_plugins": sys.modules["gmpo_plugins"].__file__,
            "metrics": kept[-1] if kept else None,
        }
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return result

    module.registry_forward = registry_forward
    module.keep = keep


def _patch_head_marker(module):
    path = os.path.join(os.environ["OPENRLHF_E2E_RECORD_DIR"], "head_calls.jsonl")
    original = module._head_call

    @functools.wraps(original)
    def _head_call(head, *args, **kwargs):
        weight = head.weight
        record = {
            "actor_class": _actor_class(),
            "pid": os.getpid(),
            "weight_numel": weight.numel(),
            "full_numel": getattr(weight, "ds_numel", weight.numel()),
        }
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return original(head, *args, **kwargs)

    module._head_call = _head_call


def _optimiser_steps():
    """``examples/optimiser_steps.py``, the saving every CPU stand-in shares (loaded from its path, as the
    vLLM stand-in loads ``seeded_generation``: the examples folder is not on this process's path)."""
    import importlib.util
    from pathlib import Path

    if "optimiser_steps" not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "optimiser_steps.py"
        spec = importlib.util.spec_from_file_location("optimiser_steps", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["optimiser_steps"] = module
    return sys.modules["optimiser_steps"]


def _patch_engine_step(module):
    engine = module.DeepSpeedEngine
    original = engine.step

    @functools.wraps(original)
    def step(self, *args, **kwargs):
        before = self.global_steps
        result = original(self, *args, **kwargs)
        if self.global_steps > before:
            if self.zero_optimization_stage() == 3:
                raise RuntimeError(
                    "GMPO_CPU_STEP_PARAMS: the parameters after each optimiser step are read under ZeRO-0/1/2 "
                    "only (ZeRO-3 partitions them); set --ds.zero_stage 2 or unset GMPO_CPU_STEP_PARAMS"
                )
            saving = _optimiser_steps()
            write = self.global_rank == 0
            saving.save(self.module.named_parameters(), self.global_steps, write=write)
        return result

    engine.step = step


after_import("torch", _patch_torch_cuda)
after_import("openrlhf.trainer.ppo_utils.replay_buffer", _patch_replay_buffer)
after_import("openrlhf.utils.utils", _patch_param_dtype)
if os.environ.get(_ENGINE_DTYPE_ENV):
    after_import("vllm", _patch_engine_dtype)
if os.environ.get("OPENRLHF_E2E_RAY"):
    after_import("ray", _patch_ray_init)
if os.environ.get("OPENRLHF_E2E_RECORD_DIR"):
    after_import("gmpo_plugins.adapters.openrlhf.patch", _patch_loss_marker)
    after_import("gmpo_plugins.adapters.openrlhf.hidden_logprobs", _patch_head_marker)
if os.environ.get("GMPO_CPU_STEP_PARAMS"):
    after_import("deepspeed.runtime.engine", _patch_engine_step)
sys.meta_path.insert(0, _PostImportFinder())
