"""``python -m tests.skyrl_e2e.driver <python -m skyrl_cpu arguments>``: the example's launcher
with the test-only ``split_dependent_gmpo`` and ``nonfinite_gmpo`` losses registered first."""

import sys

from skyrl_cpu.launch import main

from tests.skyrl_e2e import nonfinite_loss, split_dependent_loss

if __name__ == "__main__":
    split_dependent_loss.register()
    nonfinite_loss.register()
    sys.exit(main())
