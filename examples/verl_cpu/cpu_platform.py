"""CPU as a verl platform (stand-in for the CUDA platform verl assumes).

verl asks a platform object (``verl.plugin.platform.get_platform()``) for its device name,
device module, collective backend and Ray resource name. 0.9.1 ships CUDA, ROCm and NPU
platforms only; this class answers for the CPU through verl's extension point
``PlatformRegistry.register(platform="cpu")`` and is selected with ``VERL_PLATFORM=cpu``.

What it answers, and why:
    device_name "cpu", current_device() "cpu"   tensors stay on the CPU (an int would mean cuda:N)
    communication_backend_name() "gloo"          the only CPU collective backend in torch
    ray_resource_name() "GPU"                    verl's resource pool counts GPUs (or NPUs) only:
                                                 the driver gives Ray logical GPUs
                                                 (``ray_init.num_gpus``); nothing runs on them
    visible_devices_envvar() CUDA_VISIBLE_DEVICES  Ray sets it for "GPU" actors; ignored on CPU
Everything else (seeding the device RNG, caches, memory statistics, profiler ranges) is a
no-op: the CPU RNG is torch's global one, which verl seeds separately.
"""

from __future__ import annotations

import contextlib
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

NAME = "cpu"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _device_module() -> ModuleType:
    """``torch.cpu`` plus the torch.cuda functions verl calls through ``get_torch_device()``."""
    module = SimpleNamespace(**{name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("_")})
    no_ops = (
        "empty_cache",
        "manual_seed",
        "manual_seed_all",
        "reset_peak_memory_stats",
        "ipc_collect",
        "set_device",
        "set_per_process_memory_fraction",
    )
    for name in no_ops:
        setattr(module, name, _noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, _zero)
    module.mem_get_info = lambda *args, **kwargs: (0, 0)
    module.current_device = lambda: NAME
    module.get_device_name = lambda *args: NAME  # verl's FLOPs counter looks its peak FLOPs up by name
    module.device_count = lambda: 1
    module.get_rng_state = torch.get_rng_state
    module.set_rng_state = torch.set_rng_state
    module.is_available = lambda: True
    return module  # type: ignore[return-value]


@PlatformRegistry.register(platform=NAME)
class CPUPlatform(PlatformBase):
    """verl platform for the CPU (see the module docstring)."""

    _module: ModuleType | None = None

    @property
    def device_name(self) -> str:
        return NAME

    @property
    def vendor_name(self) -> str:
        return NAME

    @property
    def device_module(self) -> ModuleType:
        if CPUPlatform._module is None:
            CPUPlatform._module = _device_module()
        return CPUPlatform._module

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:  # type: ignore[override]
        return NAME

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        return None

    def manual_seed_all(self, seed: int) -> None:
        return None

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
