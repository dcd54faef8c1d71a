"""``gmpo-plugins parity``: every installed loss call path against the core on hard batches.

    harness.py         the fixed batches, the comparison and its tolerance
    references.py      third-party implementations measured beside the adapters
    references_trl.py  TRL's GMPOTrainer loss driven with tensors (no model, no generation)
"""
