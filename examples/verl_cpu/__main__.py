"""``python -m verl_cpu [hydra overrides]`` (with examples/ on PYTHONPATH): see ``launch``."""

import sys

from verl_cpu.launch import main  # type: ignore[import-not-found]

sys.exit(main())
