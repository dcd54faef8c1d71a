"""Stand-in for the one vLLM module skyrl's FSDP policy worker uses for weight sync, CPU runs only.

skyrl 0.3.0 sends the policy's weights to the inference engines through vLLM's
``NCCLWeightTransferEngine`` (``weight_sync/broadcast_strategy.py``); vLLM and NCCL need a GPU.
``vllm.distributed.weight_transfer.nccl_engine`` here keeps that interface and carries the
tensors to the CPU engine (``skyrl_cpu.engine``) through Ray instead. Nothing else of vLLM exists.
"""
