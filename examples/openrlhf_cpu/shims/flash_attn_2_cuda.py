"""CPU stand-in (example, not shipped) for flash-attn's compiled CUDA extension `flash_attn_2_cuda`.

flash-attn 2.8.3 built with FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE installs only its
Python sources; `flash_attn/flash_attn_interface.py` still does
`import flash_attn_2_cuda as flash_attn_gpu` at module level. OpenRLHF reaches it via
`openrlhf/models/ring_attn_utils.py` -> `flash_attn.bert_padding` -> `flash_attn/__init__`.
Nothing here is ever called on CPU (Actor uses attn_implementation="sdpa").
Never ship this: it lives under examples/openrlhf_cpu/ (outside the package) and is put on
PYTHONPATH by `nox -s openrlhf` / `openrlhf_e2e`, or by a user running OpenRLHF on CPU.
"""
