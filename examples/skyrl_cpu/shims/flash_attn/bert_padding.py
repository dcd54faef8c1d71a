"""Names that skyrl's model wrapper imports; calling them means sample packing is on, which the
CPU runs do not support (see the package docstring)."""


def _unsupported(*args, **kwargs):
    raise NotImplementedError(
        "flash_attn stand-in: sample packing needs flash-attn; set trainer.use_sample_packing=false on CPU"
    )


pad_input = _unsupported
unpad_input = _unsupported
