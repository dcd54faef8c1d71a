"""Test environments: one virtualenv per framework, because their pins conflict
(verl 0.9 wants transformers < 5.11, OpenRLHF 0.11.2 pins transformers 5.15).

    nox               every session, one after the other (.ci/run, the README's test command run by
                      CI, runs them on two lanes at once)
    nox -s core       the framework-agnostic core only
    nox -s kernels    the Triton kernels and torch.compile over them, in Triton's CPU interpreter
                      (installs triton)
    nox -s trl        the TRL adapter against trl 1.16.0 (real GRPOTrainer runs on CPU)
    nox -s trl114     the same tests against trl 1.14.2 (the earlier call site the adapter serves)
    nox -s verl       the verl adapter against verl 0.9.1 (its ppo_loss, Hydra config, Ray, on CPU)
    nox -s verl08     the same tests against verl 0.8.0 (the earlier call site the adapter serves)
    nox -s verl_e2e   verl 0.9.1's default v1 trainer on CPU with our losses (examples/verl_cpu)
    nox -s verl_e2e_losses  the same trainer with gspo and dapo, the legacy trainer, a NaN input
    nox -s verl_e2e_launch  bad settings, the GPU script's overrides, `gmpo-plugins frameworks` on
                      the example spec
    nox -s openrlhf   the OpenRLHF adapter against openrlhf 0.11.2 (PolicyLoss, training_step,
                      gmpo-openrlhf, Ray, on CPU)
    nox -s skyrl      the SkyRL adapter against skyrl 0.3.0 (its PolicyLossRegistry, pre-scaling, Ray
                      registry actor, on CPU)
    nox -s skyrl04    the SkyRL adapter against skyrl 0.4.0 (the same tests; installed in two steps, as
                      it declares Python >= 3.12)
    nox -s skyrl_e2e  SkyRL 0.4.0's RayPPOTrainer.train() on CPU with our losses (examples/skyrl_cpu)
    nox -s openrlhf_e2e  gmpo-openrlhf through OpenRLHF's real train_ppo_ray loop on CPU (Ray,
                      DeepSpeed, weight sync)
    nox -s openrlhf_e2e_invariance  the same loop: one step per split, the same update
    nox -s frameworks_e2e  `gmpo-plugins frameworks` through verl's, OpenRLHF's and TRL's trainers
                      side by side: the first update compared (in the virtualenvs those sessions
                      keep: `nox -s trl verl openrlhf skyrl04 frameworks_e2e frameworks_e2e_four`)
    nox -s frameworks_e2e_four  the same through the four trainers (SkyRL's too)
    nox -s compare    the main job: `gmpo-plugins compare`, defaults, report in ./gmpo-report/<time>
    nox -s compare_tests  tests of compare/parity (transformers, no framework), then `gmpo-plugins parity`
    nox -s lint       ruff check (incl. Google docstrings), ruff format --check, mypy, mkdocs build --strict
    nox -s dist       build sdist + wheel, check them, install the wheel (not the checkout) and use it

torch is pinned to 2.13.0, whose CPU wheel is available locally on the project's
machines; an unpinned torch would pull a multi-GB CUDA build.

Each session removes its virtualenv (.nox/<session>) once it passes, because nox would
build it afresh on the next run anyway: the full suite then needs the disk of its largest
sessions, not of all of them together (about 20 GB). The end-to-end sessions install nothing and
are split so that each stays under 10 minutes: verl_e2e*, skyrl_e2e and openrlhf_e2e* run in the
virtualenv of verl, skyrl04 and openrlhf (which nox runs first: `requires`), frameworks_e2e* in those of
trl, verl, openrlhf and skyrl04 (which must have run before them, in this nox run or an earlier one); the session
that runs last in a virtualenv removes it (KEPT; about 8 GB kept at most). A failed session keeps its virtualenv
for inspection, and so does every session when nox is told to reuse virtualenvs
(`nox -r -s verl_e2e`, then `.nox/verl/bin/python ...`) or to only install
(`nox --install-only`).
"""

import functools
import glob
import os
import shutil
import time
from collections.abc import Callable

import nox
from nox.virtualenv import VirtualEnv

TORCH = "torch==2.13.0"
# compare/parity: inside verl 0.9's range (transformers >= 5.5.3, < 5.11)
TRANSFORMERS = "transformers==5.10.4"
# lint tools, pinned so that a new release does not change the verdict (same pins in .pre-commit-config.yaml)
RUFF = "ruff==0.17.6"
MYPY = "mypy==2.4.1"
DOCS = ("mkdocs==1.6.1", "mkdocs-material==9.8.2", "mkdocstrings[python]==1.0.8", "mkdocstrings-python")
# verl 0.9.1 and what importing its workers needs (its verl-core extra)
VERL_REQUIREMENTS = ("verl==0.9.1", "fastapi", "uvicorn")
# what verl's trainer needs beyond that on CPU (verl_e2e, frameworks_e2e): its rollout router and
# TransferQueue, the data system of its default (v1) trainer
VERL_TRAINER_REQUIREMENTS = ("cachetools", "transferqueue==0.1.11")

nox.options.error_on_missing_interpreters = True
# No pip version check: one request less per install. pip keeps byte-compiling what it installs:
# where PYTHONDONTWRITEBYTECODE is set, those are the only .pyc files the many processes of a session
# (Ray workers, trainer launches) can read.
os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
# pyproject.toml makes every warning an error. verl and OpenRLHF (with Ray, DeepSpeed) and Triton's
# interpreter emit warnings of their own that change with their releases: their sessions report
# warnings instead of failing on them.
WARNINGS_REPORTED = ("-W", "default")


# the virtualenvs whose trainers frameworks_e2e and frameworks_e2e_four run side by side (framework ->
# session): their sessions keep them, frameworks_e2e_four (the last to run in them) removes them once it passes
FRAMEWORK_SESSIONS = {"verl": "verl", "openrlhf": "openrlhf", "trl": "trl", "skyrl": "skyrl04"}
# sessions whose virtualenv a later session runs in (session -> the session that removes it:
# frameworks_e2e_four runs after every other end-to-end session, skyrl_e2e among them)
KEPT = {venv: "frameworks_e2e_four" for venv in FRAMEWORK_SESSIONS.values()}


def releasing(session: nox.Session) -> bool:
    """Whether a passed session's virtualenv goes: not when nox reuses virtualenvs in this run
    (-r, -R, --reuse-venv) or only installs (--install-only: `session.run` returns None)."""
    venv = session.virtualenv
    if not isinstance(venv, VirtualEnv) or venv.reuse_existing:
        return False
    return session.run("python", "-c", "", silent=True) is not None


def release_virtualenv(session: nox.Session) -> None:
    """Remove the session's virtualenv once it passed (``releasing``), unless a later session
    runs in it (KEPT), and the virtualenvs kept for this session."""
    if not releasing(session):
        return
    root = os.path.dirname(session.virtualenv.location)
    own = [] if session.name in KEPT else [session.name]
    for name in [*own, *(kept for kept, remover in KEPT.items() if remover == session.name)]:
        if os.path.exists(os.path.join(root, name)):
            session.log(f"removing {os.path.join(root, name)} (the session passed; keep it with -r)")
            shutil.rmtree(os.path.join(root, name))


def kept_python(session: nox.Session, name: str) -> str:
    """The interpreter of session ``name``'s kept virtualenv (KEPT), which ran before this session."""
    python = os.path.join(os.path.dirname(session.virtualenv.location), name, "bin", "python")
    if not os.path.exists(python):
        session.error(f"{python} is missing: run `nox -s {name} {session.name}`")
    return python


def activated(python: str, **env: str) -> dict[str, str]:
    """``env`` with the virtualenv of ``python`` activated: its bin first on PATH (console scripts,
    DeepSpeed's ninja), VIRTUAL_ENV set."""
    bin_dir = os.path.dirname(python)
    path = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    return {**env, "PATH": path, "VIRTUAL_ENV": os.path.dirname(bin_dir)}


def isolate_pytest_temp(session: nox.Session) -> None:
    """Point pytest's temporary folders (tmp_path) of this session into its own virtualenv folder.

    pytest's default root (/tmp/pytest-of-<user>) keeps only the user's last three pytest runs: a
    session running beside another one (.ci/run's two lanes, or another checkout) would otherwise
    have its runs' files deleted mid-test. Set in os.environ, which nox passes to every command of the
    session, the external interpreters of the end-to-end sessions included.
    """
    root = os.path.join(session.virtualenv.location, "pytest-tmp")
    os.makedirs(root, exist_ok=True)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = root


def session(
    func: Callable[[nox.Session], None] | None = None, **options: object
) -> Callable[[nox.Session], None] | Callable[[Callable[[nox.Session], None]], Callable[[nox.Session], None]]:
    """``nox.session(**options)`` whose virtualenv is removed once the session passes (``release_virtualenv``)."""

    def decorate(func: Callable[[nox.Session], None]) -> Callable[[nox.Session], None]:
        @functools.wraps(func)
        def run_then_release(session: nox.Session) -> None:
            isolate_pytest_temp(session)
            func(session)
            release_virtualenv(session)

        return nox.session(run_then_release, **options)

    return decorate if func is None else decorate(func)


@session
def core(session: nox.Session) -> None:
    """Losses, registry, CLI, the run spec and its translations (gmpo-plugins frameworks): no framework installed."""
    session.install(TORCH)
    session.install("-e", ".[test,report]")
    session.install("./tests/plugins/example_plugin")
    session.run("pytest", "tests/core", "tests/cli", "tests/scripts", "tests/frameworks", *session.posargs)
    session.run("gmpo-plugins", "doctor")
    bench_json = f"{session.create_tmp()}/bench.json"
    session.run(
        "gmpo-plugins",
        "bench",
        "--shapes",
        "8x64,32x256",
        "--dtypes",
        "fp32,bf16",
        "--repeats",
        "2",
        "--json",
        bench_json,
    )


@session
def kernels(session: nox.Session) -> None:
    """The Triton kernels of core/kernels against the eager oracle, and torch.compile over
    their custom operators, in Triton's CPU interpreter (TRITON_INTERPRET=1; on a CUDA
    machine scripts/gpu_check.sh runs them without it)."""
    session.install(TORCH)
    session.install("-e", ".[test]", "triton")
    session.run(
        "pytest",
        "tests/core/test_kernels.py",
        "tests/core/test_compile.py",
        "tests/core/test_robustness.py",
        "tests/core/test_triton_verify.py",
        "tests/core/test_zero_advantage.py",
        "tests/core/test_nonfinite.py",
        "-k",
        "triton",
        *WARNINGS_REPORTED,
        *session.posargs,
        env={"TRITON_INTERPRET": "1"},
    )
    session.run("gmpo-plugins", "doctor", env={"TRITON_INTERPRET": "1"})


# DeepSpeed, OpenRLHF's engine, and beside TRL for the ZeRO-3 test of its hidden-state path
# (tests/trl/test_multi_process.py; on CPU it builds no op for that test)
DEEPSPEED = "deepspeed==0.19.6"


@session
def trl(session: nox.Session) -> None:
    """TRL adapter: RegistryGRPOTrainer runs, parity with TRL's GMPOTrainer/GRPOTrainer, then
    `gmpo-plugins parity` (trl adapter must match the core; TRL's GMPOTrainer is reported) and
    `gmpo-plugins audit` (TRL's and Liger-Kernel's own losses, cells to docs/audit/trl.json).
    liger-kernel: TRL's use_liger_kernel switch requires it installed (its layer kernels stay off on CPU);
    deepspeed: the ZeRO-3 engine of the two-process test."""
    session.install(TORCH)
    session.install("-e", ".[test]", "trl==1.16.0", "liger-kernel==0.8.5", DEEPSPEED)
    session.run("pytest", "tests/trl", *session.posargs)
    session.run("gmpo-plugins", "doctor")
    session.run("gmpo-plugins", "parity")
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/trl.json")


# trl 1.14.2: the call site before 1.15 (use_liger_kernel=True runs the loss through TRL's
# _forward_redirection; the log-probs from full logits or TRL's chunked path), the oldest the adapter
# serves (1.13 and older route use_liger_kernel=True around the trainer's _compute_loss); 1.14.0 and
# 1.14.1 have the same call site, but 1.14.0 does not import without requests, which it does not declare
TRL_EARLIER = "trl==1.14.2"


@session
def trl114(session: nox.Session) -> None:
    """TRL adapter against trl 1.14.2 at call-site level: the tests of the trl session, `gmpo-plugins
    parity` and `gmpo-plugins audit` of TRL's own losses (cells to docs/audit/trl-1.14.json; Liger-Kernel's are
    audited in the trl session, at the same release); no end-to-end session."""
    session.install(TORCH)
    session.install("-c", torch_constraint(session), "-e", ".[test]", TRL_EARLIER, "liger-kernel==0.8.5", DEEPSPEED)
    session.run("pytest", "tests/trl", *session.posargs)
    session.run("gmpo-plugins", "doctor")
    session.run("gmpo-plugins", "parity")
    session.run("gmpo-plugins", "audit", "--frameworks", "trl", "--json", "docs/audit/trl-1.14.json")


@session
def verl(session: nox.Session) -> None:
    """verl adapter: entry-point registration (also in a Ray worker), config translation,
    verl's own ppo_loss vs the core, micro-batch invariance, grpo == verl's vanilla; then
    `gmpo-plugins parity` (verl adapter must match the core; verl's geo_mean is reported) and
    `gmpo-plugins audit` (verl's own losses, cells to docs/audit/verl.json)."""
    session.install(TORCH)
    session.install("-e", ".[test]", *VERL_REQUIREMENTS, *VERL_TRAINER_REQUIREMENTS)
    session.install("./tests/plugins/example_plugin")
    session.run("pytest", "tests/verl", *WARNINGS_REPORTED, *session.posargs)
    session.run("gmpo-plugins", "doctor")
    session.run("gmpo-plugins", "parity")
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/verl.json")


# verl 0.8.0: the release before 0.9, whose ppo_loss (the call site) and global_batch_info counts are
# 0.9.1's; served at call-site level (its trainer differs: no v1 trainer, no plugin platform). It
# requires numpy < 2; datasets and pyarrow are held at the releases the session runs with beside it.
# cachetools: importing verl 0.8's main_ppo needs it (tests/verl/test_driver_check.py); einops:
# flash-attn's bert_padding imports it (below)
VERL_EARLIER = "verl==0.8.0"
VERL_EARLIER_HOLDS = ("numpy<2", "datasets<4", "pyarrow<20")
VERL_EARLIER_REQUIREMENTS = (VERL_EARLIER, *VERL_EARLIER_HOLDS, "fastapi", "uvicorn", "cachetools", "einops")
# verl 0.8.0 does not load the verl.plugins entry point (0.9 does): the processes its tests start
# (Ray workers, fresh interpreters) register the losses as its users must, through verl's
# VERL_USE_EXTERNAL_MODULES
VERL_EARLIER_MODULES = {"VERL_USE_EXTERNAL_MODULES": "gmpo_plugins.adapters.verl"}


@session
def verl08(session: nox.Session) -> None:
    """verl adapter against verl 0.8.0 at call-site level: the tests of the verl session (those that
    need 0.9 are skipped naming the difference), `gmpo-plugins doctor`, `gmpo-plugins parity` and
    `gmpo-plugins audit` (cells to docs/audit/verl-0.8.json); no end-to-end session.

    verl 0.8's padding helpers (verl.utils.attention_utils, which tests/verl/engine.py reaches through
    left_right_2_no_padding) import flash_attn.bert_padding when called, with no CPU fallback (0.9 has
    one): flash-attn's Python sources are installed as in the openrlhf session, and
    examples/openrlhf_cpu/shims (on PYTHONPATH here only) stands in for its CUDA extension, which
    flash_attn/__init__ imports and nothing here calls.
    """
    session.install(TORCH)
    constraints = torch_constraint(session)
    session.install("-c", constraints, *VERL_EARLIER_REQUIREMENTS)
    _install_flash_attn_sources(session)
    session.install("-c", constraints, "-e", ".[test]", "./tests/plugins/example_plugin", *VERL_EARLIER_HOLDS)
    env = {"PYTHONPATH": OPENRLHF_SHIMS, **VERL_EARLIER_MODULES}
    session.run("pytest", "tests/verl", *WARNINGS_REPORTED, *session.posargs, env=env)
    session.run("gmpo-plugins", "doctor", env=env)
    session.run("gmpo-plugins", "parity", env=env)
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/verl-0.8.json", env=env)


VERL_E2E = "tests/verl_e2e"
# the test files of each session that makes trainer runs (the others run the rest of the folder)
VERL_E2E_RUNS = {
    "verl_e2e": ("test_trainer.py", "test_rollout_correction.py"),
    "verl_e2e_losses": ("test_other_runs.py",),
}


def run_verl_e2e(session: nox.Session, *argv: str) -> None:
    """pytest ``argv`` in the verl session's virtualenv (nothing installed)."""
    python = kept_python(session, "verl")
    argv = (*argv, "--durations=0", *session.posargs)
    session.run(python, "-m", "pytest", *argv, env=activated(python), external=True)


@session(requires=["verl"])
def verl_e2e(session: nox.Session) -> None:
    """verl's default v1 trainer on CPU (PPOTrainerSync.fit with TransferQueue, engine workers,
    FSDP2 on gloo) with loss_mode=gmpo, the runs its tests read (tests/verl_e2e/conftest.py) done in
    one driver: 2 steps, invariance over micro-batches and ranks (and a split-dependent loss that
    fails it), rollout correction (decoupled, bypass). Stand-ins for the GPU parts:
    examples/verl_cpu. Runs in the verl session's virtualenv (nothing installed here)."""
    run_verl_e2e(session, *(os.path.join(VERL_E2E, name) for name in VERL_E2E_RUNS["verl_e2e"]))


@session(requires=["verl"])
def verl_e2e_losses(session: nox.Session) -> None:
    """verl's trainer on CPU with other losses and its other trainer: a gspo and a dapo step, one run
    of the deprecated legacy trainer (decoupled rollout correction), and a NaN input (verl skips the
    step). Runs in the verl session's virtualenv."""
    run_verl_e2e(session, *(os.path.join(VERL_E2E, name) for name in VERL_E2E_RUNS["verl_e2e_losses"]))


@session(requires=["verl"])
def verl_e2e_launch(session: nox.Session) -> None:
    """verl launched as users launch it, on CPU: bad settings refused with a message, the GPU script's
    overrides against verl's config, `gmpo-plugins frameworks` on the example spec (TRL's side only
    where a TRL virtualenv is found: TRL and verl 0.9.1 cannot share one). Runs in the verl session's
    virtualenv."""
    files = [name for names in VERL_E2E_RUNS.values() for name in names]
    run_verl_e2e(session, VERL_E2E, *(arg for name in files for arg in ("--ignore", os.path.join(VERL_E2E, name))))


# openrlhf 0.11.2's Requires-Dist, without torch (pinned above), flash-attn (its CUDA build
# fails on CPU: installed below from its Python sources only) and the vllm/liger/ring extras
OPENRLHF = "openrlhf==0.11.2"
OPENRLHF_REQUIREMENTS = (
    "accelerate",
    "aiohttp",
    "bitsandbytes",
    "datasets",
    DEEPSPEED,
    "einops",
    "grpcio>=1.74.0",
    "huggingface-hub>=1.0.0",
    "isort",
    "jsonlines",
    "loralib",
    "optimum",
    "optree>=0.15.0",
    "packaging",
    "peft",
    "pylatexenc",
    "pynvml>=12.0.0",
    "ray[default]==2.55.0",
    "sympy",
    "tensorboard",
    "torchdata",
    "torchmetrics",
    "tqdm",
    "transformers==5.15.0",
    "transformers-stream-generator",
    "wandb",
    "wheel",
)


def torch_constraint(session: nox.Session) -> str:
    """A pip constraints file holding torch at TORCH, next to the session's virtualenv.

    Not in session.create_tmp(): that points TMPDIR into the virtualenv, where Ray refuses its temp_dir.
    """
    constraints = os.path.join(os.path.dirname(session.bin), "torch-constraint.txt")
    with open(constraints, "w") as handle:
        handle.write(TORCH + "\n")
    return constraints


def _install_openrlhf(session: nox.Session) -> None:
    """CPU install of openrlhf 0.11.2: openrlhf without its dependencies, then those with torch
    held at TORCH, then flash-attn's Python sources only (no CUDA build), then this project.
    Never install triton here (OpenRLHF would take its Triton cross-entropy path)."""
    session.install(TORCH)
    session.install("--no-deps", OPENRLHF)
    constraints = torch_constraint(session)
    session.install("-c", constraints, *OPENRLHF_REQUIREMENTS)
    _install_flash_attn_sources(session)
    session.install("-c", constraints, "-e", ".[test]")


def _install_flash_attn_sources(session: nox.Session) -> None:
    """flash-attn 2.8.3's Python sources only (no CUDA build; its compiled extension is
    examples/openrlhf_cpu/shims/flash_attn_2_cuda.py on PYTHONPATH). Built without build isolation:
    its setup.py imports torch, packaging and wheel from the virtualenv."""
    session.install("packaging", "wheel")
    session.install(
        "--no-build-isolation",
        "--no-deps",
        "flash-attn==2.8.3",
        env={"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"},
    )


DEEPSPEED_CPU_OPS = (
    "from deepspeed.accelerator import get_accelerator\n"
    "for name in ('FusedAdamBuilder', 'ShareMemCommBuilder'):\n"
    "    get_accelerator().create_op_builder(name).load()\n"
)
OPENRLHF_SHIMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "openrlhf_cpu", "shims")


@session
def openrlhf(session: nox.Session) -> None:
    """OpenRLHF adapter against openrlhf 0.11.2 on CPU: PolicyLoss vs the core, ppo/gspo
    byte-identical, ActorPPOTrainer.training_step, invariance, gmpo-openrlhf, a Ray worker;
    then `gmpo-plugins parity` (the adapter must match the core; OpenRLHF's own ppo/gspo
    are reported) and `gmpo-plugins audit` (cells to docs/audit/openrlhf.json).

    examples/openrlhf_cpu/shims (on PYTHONPATH for the tests only) stands in for the CUDA-only
    flash_attn_2_cuda and vllm. The end-to-end runs are the openrlhf_e2e session.
    """
    _install_openrlhf(session)
    env = {"PYTHONPATH": OPENRLHF_SHIMS, "TORCHDYNAMO_DISABLE": "1"}
    # DeepSpeed's CPU ops, JIT-built here once into the virtualenv that the end-to-end sessions reuse
    extensions = os.path.join(session.virtualenv.location, "torch_extensions")
    session.run("python", "-c", DEEPSPEED_CPU_OPS, env={**env, "TORCH_EXTENSIONS_DIR": extensions})
    session.run(
        "pytest", "tests/openrlhf", "--ignore", "tests/openrlhf/e2e", *WARNINGS_REPORTED, *session.posargs, env=env
    )
    session.run("gmpo-plugins", "doctor", env=env)
    session.run("gmpo-plugins", "parity", env=env)
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/openrlhf.json", env=env)


# skyrl 0.3.0 (requires transformers <= 5.8.0), with the part of its skyrl-train extra that
# the policy-loss path imports; the rest of that extra (flash-attn, vllm-router, nixl, ...)
# serves GPU training and rollout. cloudpickle: SkyRL's registry actor falls back to pickle
# without it, which cannot pickle SkyRL's own (decorated) built-in losses. aiohttp: parsing a
# SkyRLTrainConfig from overrides imports SkyRL's inference-server utilities (tests/skyrl's
# check of the `gmpo-plugins frameworks` translation)
SKYRL = "skyrl==0.3.0"
SKYRL_REQUIREMENTS = (
    "skyrl-gym==0.4.0",
    "ray==2.56.0",
    "hydra-core==1.3.2",
    "omegaconf",
    "loguru",
    "jaxtyping",
    "pydantic",
    "fsspec",
    "cloudpickle",
    "aiohttp",
)


# what SkyRL's trainer imports beyond the policy-loss path (part of its skyrl-train extra):
# the HTTP inference client module (aiohttp), the dataloader (torchdata), the batch (tensordict)
SKYRL_TRAINER_REQUIREMENTS = ("aiohttp", "torchdata", "tensordict")


@session
def skyrl(session: nox.Session) -> None:
    """SkyRL adapter against skyrl 0.3.0 on CPU: registration (also through SkyRL's Ray registry
    actor), loss and gradient vs the core through SkyRL's advantage pre-scaling for every
    reduction, micro-batches and ranks, refusals; then `gmpo-plugins parity` (the adapter
    must match the core; SkyRL's own regular/gspo are reported) and `gmpo-plugins audit`
    (cells to docs/audit/skyrl.json).

    tests/skyrl/shims (on PYTHONPATH for the tests and parity only) lets skyrl 0.3.0 import
    on Python 3.11 (its pydantic models use typing.TypedDict, accepted from Python 3.12).
    """
    session.install(TORCH)
    constraints = torch_constraint(session)
    session.install("-c", constraints, SKYRL, *SKYRL_REQUIREMENTS, *SKYRL_TRAINER_REQUIREMENTS)
    session.install("-c", constraints, "-e", ".[test]")
    shims = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "skyrl", "shims")
    env = {"PYTHONPATH": shims}
    session.run("pytest", "tests/skyrl", *session.posargs, env=env)
    session.run("gmpo-plugins", "doctor", env=env)
    session.run("gmpo-plugins", "parity", env=env)
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/skyrl.json", env=env)


# skyrl 0.4.0 declares Requires-Python >= 3.12, and its code runs on Python 3.11 (with the
# shims of the skyrl session): it is installed in two steps. First its requirements by hand: its
# base requirements and, from its skyrl-train extra, what the policy-loss path and the trainer
# import (ray, hydra-core, skyrl-gym, orjson and pybase64 for its inference client), not that
# extra itself (flash-attn, vllm-router, nixl serve GPU training and rollout). Then skyrl 0.4.0
# alone: `--ignore-requires-python` on that one package only (on the whole install, pip would
# build numpy from source).
SKYRL04 = "skyrl==0.4.0"
SKYRL04_REQUIREMENTS = (
    "datasets>=4.0.0",
    "pillow>=11.3.0",
    "rich>=14.1.0",
    "safetensors>=0.6.2",
    "tokenizers>=0.23.1",
    "transformers>=5.6.1,<=5.16.1",
    "typer>=0.17.4",
    "peft==0.18.1",
    "hf_transfer",
    "cloudpathlib>=0.23.0",
    "zstandard>=0.23.0",
    "xxhash>=3.0.0",
    "skyrl-gym==0.4.0",
    "ray==2.57.0",
    "hydra-core==1.3.4",
    "orjson>=3.11.9",
    "pybase64>=1.4.2",
    "omegaconf",
    "loguru",
    "jaxtyping",
    "pydantic",
    "fsspec",
    "cloudpickle",
)


@session
def skyrl04(session: nox.Session) -> None:
    """SkyRL adapter against skyrl 0.4.0 on CPU, the tests of the skyrl session (the adapter reads
    0.4's field names and defaults from its release table); then `gmpo-plugins parity` and
    `gmpo-plugins audit` (cells to docs/audit/skyrl-0.4.json).

    skyrl 0.4.0 declares Python >= 3.12: installed in two steps (SKYRL04_REQUIREMENTS, then
    `pip install --no-deps --ignore-requires-python skyrl==0.4.0`); tests/skyrl/shims as in the
    skyrl session.
    """
    session.install(TORCH)
    constraints = torch_constraint(session)
    session.install("-c", constraints, *SKYRL04_REQUIREMENTS, *SKYRL_TRAINER_REQUIREMENTS)
    session.install("--no-deps", "--ignore-requires-python", SKYRL04)
    session.install("-c", constraints, "-e", ".[test]")
    shims = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "skyrl", "shims")
    env = {"PYTHONPATH": shims}
    session.run("pytest", "tests/skyrl", *session.posargs, env=env)
    session.run("gmpo-plugins", "doctor", env=env)
    session.run("gmpo-plugins", "parity", env=env)
    session.run("gmpo-plugins", "audit", "--json", "docs/audit/skyrl-0.4.json", env=env)


@session(requires=["skyrl04"])
def skyrl_e2e(session: nox.Session) -> None:
    """SkyRL 0.4.0's own RayPPOTrainer.train() on CPU (FSDP2 on gloo, Ray, weight sync) with
    policy_loss_type=gmpo: a 2-step run, parameter invariance over micro-batches and ranks (and a
    split-dependent loss that must fail it; SkyRL's gspo reported), bad configurations.

    Runs in the skyrl04 session's virtualenv (which has SKYRL_TRAINER_REQUIREMENTS); examples/skyrl_cpu
    stands in for CUDA, vLLM and flash-attn in the processes the tests start (see its docstrings; it
    serves SkyRL 0.3.0 too: `nox -s skyrl` keeps that virtualenv with -r).
    """
    python = kept_python(session, "skyrl04")
    shims = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "skyrl", "shims")
    argv = ["tests/skyrl_e2e", "--durations=0", *WARNINGS_REPORTED, *session.posargs]
    session.run(python, "-m", "pytest", *argv, env=activated(python, PYTHONPATH=shims), external=True)


OPENRLHF_E2E = "tests/openrlhf/e2e"
# one step per run: the invariance runs and the NaN steps (bf16, fp32)
OPENRLHF_E2E_INVARIANCE = (
    os.path.join(OPENRLHF_E2E, "test_invariance.py"),
    os.path.join(OPENRLHF_E2E, "test_nonfinite.py"),
)


def run_openrlhf_e2e(session: nox.Session, *argv: str) -> None:
    """pytest ``argv`` in the openrlhf session's virtualenv. DeepSpeed's CPU ops (fused_adam, shm
    comm), which the openrlhf session JIT-built into it, are loaded first (built here only if they
    are missing), so that the runs do not build them."""
    python = kept_python(session, "openrlhf")
    extensions = os.path.join(os.path.dirname(os.path.dirname(python)), "torch_extensions")
    env = activated(python, PYTHONPATH=OPENRLHF_SHIMS, TORCHDYNAMO_DISABLE="1", TORCH_EXTENSIONS_DIR=extensions)
    session.run(python, "-c", DEEPSPEED_CPU_OPS, env=env, external=True)
    argv = [*argv, "--durations=0", *WARNINGS_REPORTED, *session.posargs]
    session.run(python, "-m", "pytest", *argv, env=env, external=True)


@session(requires=["openrlhf"])
def openrlhf_e2e(session: nox.Session) -> None:
    """`gmpo-openrlhf ... --actor.policy_loss_type gmpo` through OpenRLHF's real train_ppo_ray
    loop on CPU (Ray, PolicyModelActor under DeepSpeed on gloo, weight sync to the rollout
    engine): a 2-step run, hidden rollout log-probs, bad input, the GPU example's arguments,
    `gmpo-plugins frameworks` on the example spec.

    Runs in the openrlhf session's virtualenv. examples/openrlhf_cpu (standins, shims) stands in
    for CUDA and vLLM in the processes the tests start (see their docstrings).
    """
    run_openrlhf_e2e(session, OPENRLHF_E2E, *(f"--ignore={test}" for test in OPENRLHF_E2E_INVARIANCE))


@session(requires=["openrlhf"])
def openrlhf_e2e_invariance(session: nox.Session) -> None:
    """OpenRLHF's real train_ppo_ray loop on CPU, one fp32 step per split: the same update over
    micro-batches and 2 actor ranks against 1, both loss_agg_modes, ZeRO 3 against ZeRO 2, sapo's
    splits; a step with a NaN advantage in bf16 (DeepSpeed skips it) and in fp32 (it does not). Runs in
    the openrlhf session's virtualenv, as openrlhf_e2e."""
    run_openrlhf_e2e(session, *OPENRLHF_E2E_INVARIANCE)


FRAMEWORKS_E2E = "tests/frameworks_e2e"


def run_frameworks_e2e(session: nox.Session, *argv: str) -> None:
    """pytest ``argv`` with TRL's interpreter, each framework's interpreter named for
    `gmpo-plugins frameworks` (GMPO_PLUGINS_PYTHON_<FRAMEWORK>): the virtualenvs of the verl,
    openrlhf, trl and skyrl sessions, run before it (`nox` runs the sessions in the order of this
    file; `nox -s verl openrlhf trl skyrl04 frameworks_e2e` alone; .ci/run on its second lane)."""
    pythons = {name: kept_python(session, venv) for name, venv in FRAMEWORK_SESSIONS.items()}
    env = activated(pythons["trl"], **{f"GMPO_PLUGINS_PYTHON_{name.upper()}": py for name, py in pythons.items()})
    session.run(pythons["trl"], "-m", "pytest", *argv, "--durations=0", *session.posargs, env=env, external=True)


@session
def frameworks_e2e(session: nox.Session) -> None:
    """`gmpo-plugins frameworks` through verl's, OpenRLHF's and TRL's own trainers side by side (the
    CPU stand-ins of examples/): the first RL step (two optimiser steps, the clip acting), compared
    after each optimiser step, identical for gmpo across verl, OpenRLHF and TRL under the large-eps
    AdamW; TRL's advantage epsilon and the mini-batch order named, a clip bound and grpo's dual clip
    flipped in one framework named by their clip fractions (tests/frameworks_e2e/test_first_update.py).
    Nothing is installed here."""
    run_frameworks_e2e(session, os.path.join(FRAMEWORKS_E2E, "test_first_update.py"))


@session
def frameworks_e2e_four(session: nox.Session) -> None:
    """`gmpo-plugins frameworks` through the four trainers (verl, OpenRLHF, TRL, SkyRL) under AdamW
    eps 1e-8: the first RL step identical for gmpo, for grpo with its dual clip acting, and for dapo
    with its asymmetric clip and token mean acting. Nothing is installed here; the four virtualenvs
    are removed once it passes (KEPT)."""
    run_frameworks_e2e(session, FRAMEWORKS_E2E, "--ignore", os.path.join(FRAMEWORKS_E2E, "test_first_update.py"))


@session
def compare(session: nox.Session) -> None:
    """The README's main job: GMPO vs GRPO through the core on the toy task over several seeds,
    report in a new folder ./gmpo-report/<UTC time> (so no earlier report is touched);
    arguments after `--` go to the command (`nox -s compare -- --seeds 1 --steps 10`)."""
    session.install(TORCH)
    session.install("-e", ".[compare]", TRANSFORMERS)
    out = os.path.join("gmpo-report", time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    session.run("gmpo-plugins", "compare", "--out", out, *session.posargs)


@session
def compare_tests(session: nox.Session) -> None:
    """tests/compare (tasks, statistics, rollout, 2-step runs, report folder, subprocess runner,
    parity, bad input),
    then `gmpo-plugins parity` on what is installed here (the core)."""
    session.install(TORCH)
    session.install("-e", ".[compare,test]", TRANSFORMERS)
    session.run("pytest", "tests/compare", *session.posargs)
    session.run("gmpo-plugins", "parity")


@session
def lint(session: nox.Session) -> None:
    """Static checks, no test run: ruff (E,F,W,I,B,UP,BLE and Google-style docstrings, D),
    `ruff format --check`, mypy (strict for gmpo_plugins.core), and the docs site with
    `mkdocs build --strict` (adapters' docstrings rendered by mkdocstrings)."""
    session.install(TORCH)
    session.install("-e", ".", RUFF, MYPY, *DOCS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", f"{session.create_tmp()}/site", env={"NO_MKDOCS_2_WARNING": "1"}
    )


@session
def dist(session: nox.Session) -> None:
    """The artefacts users install, checked as built and as installed from the wheel:

    1. CITATION.cff against its schema (cffconvert);
    2. `python -m build`: the sdist, then the wheel built from the unpacked sdist; a
       deprecation or Python warning in its output fails the session;
    3. `twine check --strict`, and tests/packaging/check_artefacts.py (contents, metadata,
       entry points, one version, the extras the docs name);
    4. the wheel, not the checkout, in a fresh virtualenv, where tests/packaging/check_install.py
       runs `core` (`gmpo-plugins list --json`, get_loss("gmpo")), `extras` (every extra
       resolves with `pip install --dry-run`) and, once the wheel's [verl] extra is installed
       at VERL_REQUIREMENTS, `verl` (a plain `import verl` resolves loss_mode=gmpo).
    """
    session.install("build", "twine", "cffconvert", "tomli; python_version < '3.11'")
    session.run("cffconvert", "--validate", "--infile", "CITATION.cff")
    tmp = session.create_tmp()
    dist_dir = os.path.join(tmp, "dist")
    shutil.rmtree(dist_dir, ignore_errors=True)
    output = session.run("python", "-m", "build", "--outdir", dist_dir, silent=True)
    if output is None:  # nox --install-only: nothing was built
        return
    build_log = os.path.join(tmp, "build.log")
    with open(build_log, "w") as log:
        log.write(output)
    artefacts = sorted(glob.glob(os.path.join(dist_dir, "*")))
    session.run("twine", "check", "--strict", *artefacts)
    session.run("python", "tests/packaging/check_artefacts.py", dist_dir, "--build-log", build_log)

    (wheel,) = glob.glob(os.path.join(dist_dir, "*.whl"))
    venv = os.path.join(tmp, "wheel-venv")
    session.run("python", "-m", "venv", "--clear", venv)
    python = os.path.join(venv, "bin", "python")
    constraints = torch_constraint(session)
    pip_install = (python, "-m", "pip", "install", "--quiet", "-c", constraints)
    session.run(*pip_install, wheel, external=True)
    session.run(python, "tests/packaging/check_install.py", "core", external=True)
    session.run(python, "tests/packaging/check_install.py", "extras", wheel, constraints, external=True)
    session.run(*pip_install, f"{wheel}[verl]", *VERL_REQUIREMENTS, external=True)
    session.run(python, "tests/packaging/check_install.py", "verl", external=True)
