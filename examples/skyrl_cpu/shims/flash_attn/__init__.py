"""Stand-in for the ``flash_attn`` package (CUDA-only wheels), CPU runs only.

skyrl 0.3.0's ``backends/skyrl_train/workers/model_wrapper.py`` imports
``flash_attn.bert_padding`` at module level, so the FSDP workers cannot even be imported
without it. Only the padding helpers are named; they serve sample packing
(``trainer.use_sample_packing=true``), which the CPU runs switch off.
"""
