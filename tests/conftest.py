"""Settings for the whole test suite.

Adapters check input values only on the first call of each loss in a process
(GMPO_PLUGINS_VALIDATE=first, the default); tests call losses many times with bad input
on purpose, so they check values on every call. Subprocesses and Ray workers started by
tests inherit the setting. tests/core/test_validation.py tests the default policy itself.
"""

import os

os.environ.setdefault("GMPO_PLUGINS_VALIDATE", "always")
