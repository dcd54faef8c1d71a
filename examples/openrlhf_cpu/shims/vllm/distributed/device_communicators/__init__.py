"""TEST-ONLY stand-in for `vllm.distributed.device_communicators` (see the package docstring)."""
