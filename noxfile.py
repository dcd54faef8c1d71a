"""Test environments: one virtualenv per framework, because their pins conflict
(verl 0.9 wants transformers < 5.11, OpenRLHF 0.11.2 pins transformers 5.15).

    nox               every session (the README's test command, run by CI)
    nox -s core       the framework-agnostic core only
    nox -s kernels    the Triton kernels in Triton's CPU interpreter (installs triton)
    nox -s trl        the TRL adapter against trl 1.16.0 (real GRPOTrainer runs on CPU)
    nox -s verl       the verl adapter against verl 0.9.1 (its ppo_loss, Hydra config, Ray, on CPU)

torch is pinned to 2.13.0, whose CPU wheel is available locally on the project's
machines; an unpinned torch would pull a multi-GB CUDA build.
"""

import nox

TORCH = "torch==2.13.0"

nox.options.error_on_missing_interpreters = True


@nox.session
def core(session: nox.Session) -> None:
    """Losses, registry, CLI: no framework installed."""
    session.install(TORCH)
    session.install("-e", ".[test,report]")
    session.install("./tests/plugins/example_plugin")
    session.run("pytest", "tests/core", "tests/cli", *session.posargs)
    bench_json = f"{session.create_tmp()}/bench.json"
    session.run("gmpo-plugins", "bench", "--shapes", "8x64,32x256", "--dtypes", "fp32,bf16", "--repeats", "2",
                "--json", bench_json)


@nox.session
def kernels(session: nox.Session) -> None:
    """The Triton kernels of core/kernels against the eager oracle, in Triton's CPU
    interpreter (TRITON_INTERPRET=1; on a CUDA machine, run the same tests without it)."""
    session.install(TORCH)
    session.install("-e", ".[test]", "triton")
    session.run("pytest", "tests/core/test_kernels.py", *session.posargs, env={"TRITON_INTERPRET": "1"})


@nox.session
def trl(session: nox.Session) -> None:
    """TRL adapter: RegistryGRPOTrainer runs, parity with TRL's GMPOTrainer/GRPOTrainer."""
    session.install(TORCH)
    session.install("-e", ".[test]", "trl==1.16.0")
    session.run("pytest", "tests/trl", *session.posargs)


@nox.session
def verl(session: nox.Session) -> None:
    """verl adapter: entry-point registration (also in a Ray worker), config translation,
    verl's own ppo_loss vs the core, micro-batch invariance, grpo == verl's vanilla."""
    session.install(TORCH)
    session.install("-e", ".[test]", "verl==0.9.1", "fastapi", "uvicorn")
    session.install("./tests/plugins/example_plugin")
    session.run("pytest", "tests/verl", *session.posargs)
