"""``python -m tests.skyrl_e2e.driver <python -m skyrl_cpu arguments>``: the example's launcher
with the test-only ``split_dependent_gmpo`` loss registered first."""

import sys

from skyrl_cpu.launch import main

from tests.skyrl_e2e.split_dependent_loss import register

if __name__ == "__main__":
    register()
    sys.exit(main())
