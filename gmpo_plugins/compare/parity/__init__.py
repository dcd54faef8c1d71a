"""``gmpo-plugins parity``: every installed loss call path against the core on hard batches.

harness.py         the fixed batches, the comparison and its tolerance
references.py      third-party implementations measured beside the adapters (TRL's
                   GMPOTrainer through ``backends.trl_gmpo``)
"""
