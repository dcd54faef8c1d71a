"""TEST-ONLY stand-in for `vllm.distributed` (see the package docstring)."""
