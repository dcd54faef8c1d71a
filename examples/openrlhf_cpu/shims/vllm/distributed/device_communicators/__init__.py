"""CPU stand-in (example, not shipped) for `vllm.distributed.device_communicators` (see the package docstring)."""
