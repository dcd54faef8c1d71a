"""``python -m skyrl_cpu``: see ``skyrl_cpu.launch``."""

import sys

from skyrl_cpu.launch import main

if __name__ == "__main__":
    sys.exit(main())
