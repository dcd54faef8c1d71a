"""Stand-in for vLLM's packed-tensor helpers, CPU runs only: skyrl 0.4.0's
``weight_sync/weight_senders.py`` imports the default packed buffer size at module level (it
sizes the NCCL/IPC buffers, which the Ray transfer of ``nccl_engine`` here does not use)."""

DEFAULT_PACKED_BUFFER_SIZE_BYTES = 1024**3
