"""``gmpo-plugins bench``: forward+backward time and peak extra memory of the registry
losses, side by side with their eager oracle, verl's built-in ``geo_mean`` (when verl
is importable) and the memory-traffic floor. ``run_bench`` returns plain dicts; the CLI
(``gmpo_plugins.cli.bench_cmd``) prints them and writes JSON.
"""

from gmpo_plugins.bench.runner import BenchConfig, run_bench

__all__ = ["BenchConfig", "run_bench"]
