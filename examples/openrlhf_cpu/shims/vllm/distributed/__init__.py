"""CPU stand-in (example, not shipped) for `vllm.distributed` (see the package docstring)."""
