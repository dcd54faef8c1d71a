"""The first RL step, compared between frameworks: did two trainers, given the same spec and the
same first rollout, move the weights the same way after each optimiser step k = 1..K of that
rollout batch, where from the second step on the importance ratios differ from 1 and the clip acts?

For every framework whose run left its parameters after each optimiser step of the first RL step
(the CPU stand-ins do: ``standins``), θ_f after step k, with θ_0 the spec's initial model (its
``*.safetensors``), after each step k (``compare_steps``)::

    Δ_f      = θ_f - θ_0                                          every parameter, flattened
    d_i      = max(0, |θ_a,i - θ_b,i| - ulp(max(|θ_a,i|, |θ_b,i|)))   the storage rounding removed
    rel(a,b) = max_i d_i / max(max_i |Δ_a,i|, max_i |Δ_b,i|)

``ulp`` is float32's spacing at the stored value: each trainer rounds θ_0 + Δ to float32 once,
so two equal updates can store values one ulp apart (for a weight near 1, a norm's, that is
1.2e-7, as large as a whole small update's rounding error allows).

The tolerance for one optimiser step, ``TOLERANCE = 1e-5`` of the largest update, comes from
float32 summation order. Float32's unit roundoff is u = 2^-24 = 6.0e-8. Trainers that compute
the same gradient sum its per-token terms in different orders (micro-batches, padding layouts,
ranks, old log-probs recomputed in separate passes), which moves a gradient entry by a few u of
the terms' size; verl's own micro-batch and rank splits measured 2e-7 to 9e-7 of the update (3 to
15 u). 1e-5 is about 170 u, ten times the largest split difference measured, and ten times below
what a real difference gives: a clip bound, an advantage epsilon of 1e-4 against a group std of
order 1, or a loss normalised by another count all move the update by 1e-4 of it or more.

Chained steps (``tolerance``: K optimiser steps in the first RL step). The optimiser must make a
step proportional to the gradient for differences to stay proportional: SGD, or AdamW with an
epsilon far above every gradient entry, whose k-th step is ``-(lr / eps) * m_k`` with ``m_k`` a
fixed combination of g_1 .. g_k with weights at most 1 (bias-corrected momentum). A rounding
difference δ_j in gradient j (at most ε = 1e-5 of the update, above) then reaches θ_K directly,
and through the parameters every later gradient is evaluated at: δθ moves g_k by H δθ, which the
step turns into (lr / eps) H δθ. Where one step changes the gradient by less than the gradient
itself (the example's learning rate moves the log-ratios by less than 1; its gradients change
by a fraction of themselves between steps), ``(lr / eps) |H| <= 1`` along the steps taken, so
each later step at most doubles an earlier difference:

    rel_k <= sum_{j=1..k} 2^(k - j) * ε = (2^k - 1) * ε        (k = 1: 1e-5; 2: 3e-5; 3: 7e-5)

after optimiser step k, for every k of the first RL step. The bound grows with k: from k = 4 on
(1.5e-4) it reaches the size of a real difference (``REAL_DIFFERENCE``, 1e-4 of the update,
above), so there a comparison no longer separates the two, and the step is printed without a
verdict (``PairComparison.resolves``); the steps before it keep theirs. The verdict of the first
RL step is the per-step verdicts together (``overall``). Measured on the example (K = 2, verl,
OpenRLHF, TRL): 1.1e-7 to 2.5e-7 after step 1, 1.5e-7 to 2.9e-7 after step 2; with two mini-batches
of 2 (K = 4, verl and TRL, whose mini-batches hold the same responses): 1.7e-7 to 2.5e-7 after each
of the four steps, far below each step's bound.

The clip is a discontinuity of the gradient: a token whose ratio lies within δθ's effect (about
1e-6) of the bound can be clipped in one trainer and not in the other, which changes a gradient
by that token's whole term (of order 1/tokens, 1e-2 of it here): beyond the tolerance, as a real
difference would be. Its chance is about tokens * 1e-6 / (spread of the log-ratios) (1e-4 here).

Sign-like steps (``SIGN_LIKE``: AdamW with ``adam_eps <= SIGN_LIKE_EPS``, 1e-8 being the one
setting verl, OpenRLHF, TRL and SkyRL share, SkyRL having no eps of its own). With eps far below
every gradient entry, Adam's step does not follow the gradient's size: the first is
``lr * g_1 / (|g_1| + eps)``, nearly ``lr * sign(g_1)``, the k-th ``lr * m̂_k / (sqrt(v̂_k) + eps)``,
each coordinate divided by its own gradient's scale. ``rel`` above then fails where it should not:
a coordinate whose gradient cancels to within its rounding (|g_i| of the order of δg_i) steps by
+lr in one trainer and -lr in the other, and a coordinate whose gradient is a thousandth of its
terms magnifies the terms' rounding a thousandfold. Measured on the example (K = 2, eps 1e-8,
lr 0.01, SkyRL / TRL): ``rel`` 1.2e-3 in one of 77120 coordinates, 1e-5 of the largest update
exceeded in 314. And where |g_1| is of the order of eps, the first step ``lr * g_1 / (|g_1| + eps)``
follows the gradient's size again, and its rounding error δg_1 moves it by up to
``lr * δg_1 / eps``: a gradient of 2e-8 rounded by 1e-10 moves it by 5e-3 lr. In the example 17% of
the coordinates have |g_1| < 1000 eps (embedding and output rows of tokens the batch barely
touches); after step 1 (``tiny_adam.toml``) the norm of the difference over all coordinates
(``rel2`` below, S all) is 1e-5 to 2e-5 of the update's, and 3e-8 without them. So the
sign-like comparison takes the norm over the coordinates
whose first gradient is well above eps in both runs (``gradient_well_above_eps``), read from the
first step itself, AdamW's ``θ_1 = θ_0 (1 - lr wd) - lr * g_1 / (|g_1| + eps)``::

    u_i       = (θ_0,i (1 - lr wd) - θ_1,i) / lr       = g_1,i / (|g_1,i| + eps), in both runs
    S         = {i : |u_a,i| and |u_b,i| >= C / (C + 1)}   |g_1,i| >= C eps, C = WELL_ABOVE_EPS = 1000
    rel2(a,b) = ||d_S||_2 / max(||Δ_a,S||_2, ||Δ_b,S||_2)   d as above, every step over the same S

and its tolerance is derived per coordinate, relative to the coordinate's own gradient. Over S,
sqrt(v̂_k) >= sqrt(b_1) |g_1| is at least C eps / sqrt(k) at every step k, so eps changes no step
by more than sqrt(k) / C of it, and Adam's step is homogeneous of degree 0 in each
coordinate's gradients (g_1 .. g_k scaled together leave
it unchanged), so only relative gradient errors e_j = δg_j / g_j move it, and by their
sensitivities (beta1 0.9, beta2 0.999): the first step by ``eps |g_1| / (|g_1| + eps)^2 * e_1``
(at most e_1 / C over S; e_1 / 4 at |g_1| = eps, outside it); the second, ``m̂_2 / sqrt(v̂_2)`` with
m̂_2 = (0.9 g_1 + g_2) / 1.9 and v̂_2 = (0.999 g_1^2 + g_2^2) / 1.999, by
``|∂u_2/∂log g_1| + |∂u_2/∂log g_2| <= 1.0003`` in lr (its maximum over g_2 / g_1, at
g_2 ≈ -0.98 g_1, where the update is still 0.96 lr; at g_1 = g_2 the sum is 0.05). The
parameters the second gradient is taken at differ by the first step's error, at most lr * e / 4
(lr * δg_1 / eps in the coordinates with |g_1| near eps, outside S, which move the gradients in S
through the Hessian by a fraction of that), so the chained term is of the same small size. Over
the two steps a coordinate's update (at least 0.96 lr where both steps count) moves by at most
(1/4 + 1.0003) e lr, 1.3 e of itself; with e at most ε = 1e-5 (the summation-order bound above) for
a coordinate whose gradient is not cancelled, ``rel2 <= 1.3 ε`` over those after step 2, and
``e / C``, ``rel2 <= 1e-3 ε``, after step 1: within (2^k - 1) * ε, the same tolerance as the
proportional comparison (``tolerance``; k = 1: 1e-5, k = 2: 3e-5). For any k, with m̂_k = Σ_j a_j g_j
and v̂_k = Σ_j b_j g_j^2 (a_j, b_j the bias-corrected weights of beta1 and beta2), Cauchy-Schwarz
bounds the k-th step's sensitivity: ``Σ_j |∂u_k/∂log g_j| <= 2 sqrt(Σ_j a_j^2 / b_j)``, 2.01 for
k = 3 (1.0003 exactly for k = 2, above); after step 3 a coordinate then moves by at most
(0.25 + 1.0003 + 2.01) e lr = 3.3 e lr, within 7 ε of an update of at least 0.47 lr: the tolerance
holds for k = 3 where the three steps do not cancel each other in most coordinates. The norm then
bounds how much the rare cancelled coordinates may weigh: one sign flipped among N coordinates
that each moved about lr adds 2 / sqrt(N) (7e-3 for the example's 77120), far beyond the
tolerance, as a clipped token is (above); its chance is about N * 1e-7 (1e-2 here). Measured on
the example (``tiny_adam.toml``, the six pairs of verl, OpenRLHF, TRL and SkyRL, S 83% of the
coordinates): after step 1 3.1e-8 to 3.8e-8 (tolerance 1e-5), after step 2 1.4e-6 to 2.6e-6 among
OpenRLHF, TRL and SkyRL and 6.8e-6 to 8.8e-6 for verl's pairs (tolerance 3e-5; gradients whose terms
verl sums in another order, magnified where a coordinate's gradient is small against its terms).

What it cannot see: an overall scale of the gradient (a loss normalised by another count, the
same for every coordinate), which Adam divides out; the proportional comparison catches that, so
verl, OpenRLHF and TRL keep it (``examples/frameworks/tiny.toml``, eps 100), and SkyRL, which sets
no eps, is compared with the others under this one (``examples/frameworks/tiny_adam.toml``).
What it does see: a difference of direction, as a clip bound, a group's advantages scaled apart
(an advantage epsilon of 1e-4 against a group std of order 1), or IS weights, moves the affected
coordinates' steps by 1e-4 of them or more. Between the two settings (``SIGN_LIKE_EPS < adam_eps
< PROPORTIONAL_EPS``) neither derivation holds and the comparison has no verdict.

The tolerance holds for ``dtype = "float32"`` only; in bfloat16 the rounding of every product is
2^-8 and the comparison is printed without a verdict. The update must be large against the
stored weights' ulps for the measure to resolve 1e-5: a learning rate that moves the largest
weight by 1e-3 or more.

Where two frameworks differ beyond the tolerance, ``causes`` names the behaviours of theirs that
reach the first RL step and that the spec could not align (``Difference.first_update``: the
advantage formula, the prompt order, the precision, where KL enters, the mini-batch order): those
are what to align to make the difference disappear. The step-1 mean reward, from each trainer's
own log, says whether the two first rollouts were the same: where they differ, only the behaviours
that choose the rollout (the prompt order) are named, since the updates of different rollouts
cannot agree; where they are the same, only the others. Where the rollouts agree and no named
behaviour differs, the step-1 clip fractions each trainer logged are compared: where they differ,
the clip acted differently (a bound changed in one framework's launch, or a clip applied to other
ratios), and the report says so (``clip_difference``). Where the old log-probs come from (a
separate forward pass, or TRL's training forward where an RL step is one optimiser step) is
listed among each framework's differences but never named here: in float32 a recomputed pass
moves the first ratios by rounding only, which the tolerance covers, and bfloat16 gets no verdict.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from gmpo_plugins.frameworks.launch import Launch

TOLERANCE = 1e-5
REAL_DIFFERENCE = 1e-4  # the smallest real difference: a verdict only where the tolerance stays below it
PROPORTIONAL = "proportional"  # SGD, or AdamW with eps far above every gradient entry: rel, the largest entry
SIGN_LIKE = "sign-like"  # AdamW with eps far below every gradient entry: rel2, the norm
PROPORTIONAL_EPS = 1.0
SIGN_LIKE_EPS = 1e-6
WELL_ABOVE_EPS = 1000.0  # sign-like: the coordinates whose first gradient is at least this many eps
CRITERIA = {PROPORTIONAL: "largest entry", SIGN_LIKE: "norm"}


def comparison(optimizer: str, adam_eps: float) -> str | None:
    """The comparison the optimiser's first steps allow (module docstring): ``PROPORTIONAL`` for SGD
    or AdamW with ``adam_eps >= PROPORTIONAL_EPS``, ``SIGN_LIKE`` for AdamW with ``adam_eps <=
    SIGN_LIKE_EPS``, None (no verdict) between."""
    if optimizer == "sgd" or adam_eps >= PROPORTIONAL_EPS:
        return PROPORTIONAL
    if adam_eps <= SIGN_LIKE_EPS:
        return SIGN_LIKE
    return None


def tolerance(dtype: str, optimiser_steps: int, kind: str | None = PROPORTIONAL) -> float | None:
    """The tolerance of ``rel`` (``PROPORTIONAL``) or ``rel2`` (``SIGN_LIKE``) after ``optimiser_steps``
    chained steps (module docstring): ``(2^K - 1) * TOLERANCE`` in float32, None (no verdict) in
    another dtype or for another ``kind``."""
    if dtype != "float32" or kind not in CRITERIA:
        return None
    return (2**optimiser_steps - 1) * TOLERANCE


REWARD_TOLERANCE = 1e-6
# behaviours that choose which responses the first update is computed on: where the step-1
# rewards differ, the rollouts did, and these are what to align first
ROLLOUT_TOPICS = ("prompt order",)


class FirstUpdateError(RuntimeError):
    """Parameters that cannot be compared (unreadable files, different parameter names or shapes)."""


@dataclass(frozen=True)
class PairComparison:
    """One pair of frameworks after optimiser step ``step`` of the first RL step: ``rel`` or ``rel2``
    (module docstring, by ``kind``: ``comparison``), the tolerance (None: no verdict, not float32 or
    no kind), the step-1 rewards, and the named behaviours that differ between the two."""

    first: str
    second: str
    rel: float
    tolerance: float | None
    rewards: tuple[float | None, float | None]
    causes: tuple[str, ...]
    kind: str | None = PROPORTIONAL

    step: int = 1

    @property
    def resolves(self) -> bool:
        """Whether the tolerance separates rounding from a real difference: below ``REAL_DIFFERENCE``."""
        return self.tolerance is not None and self.tolerance < REAL_DIFFERENCE

    @property
    def identical(self) -> bool | None:
        """True within the tolerance, False beyond it, None without a tolerance or where it does
        not resolve a real difference (``resolves``)."""
        return self.rel <= self.tolerance if self.resolves and self.tolerance is not None else None

    @property
    def same_rewards(self) -> bool | None:
        """Whether both first rollouts scored the same mean reward (None: one was not logged)."""
        first, second = self.rewards
        if first is None or second is None:
            return None
        return abs(first - second) <= REWARD_TOLERANCE * max(1.0, abs(first))


def initial_parameters(model: Path) -> dict[str, torch.Tensor]:
    """θ_0: every tensor of the model folder's ``*.safetensors`` files, by name."""
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise FirstUpdateError(
            "reading the initial model needs safetensors (the report extra: pip install gmpo-plugins[report])"
        ) from None
    files = sorted(model.glob("*.safetensors"))
    if not files:
        raise FirstUpdateError(f"{model}: no *.safetensors file to read the initial parameters from")
    parameters: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            parameters.update(load_file(str(path)))
        except (OSError, SafetensorError) as exc:
            raise FirstUpdateError(f"{path}: cannot be read ({exc})") from None
    return parameters


def load_parameters(path: str | Path) -> dict[str, torch.Tensor]:
    """Parameters saved by a stand-in: a state dict, or ``{"state_dict": ...}``."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        # a file that is no torch.save archive fails in the unpickler; its message spans lines
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FirstUpdateError(f"{path}: cannot be read ({first_line})") from None
    state = saved.get("state_dict", saved) if isinstance(saved, Mapping) else None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise FirstUpdateError(f"{path}: not a state dict of tensors")
    return dict(state)


def _flat(parameters: Mapping[str, torch.Tensor], names: Sequence[str]) -> torch.Tensor:
    return torch.cat([parameters[name].detach().reshape(-1).to(torch.float64) for name in names])


def _checked_names(
    initial: Mapping[str, torch.Tensor], first: Mapping[str, torch.Tensor], second: Mapping[str, torch.Tensor]
) -> list[str]:
    """The parameter names ``first`` and ``second`` share with ``initial``, sorted; FirstUpdateError
    when the two name different parameters (or none), or a parameter's shape differs between the three."""
    if set(first) != set(second):
        only = sorted(set(first) ^ set(second))[:3]
        raise FirstUpdateError(f"the two runs saved different parameters (e.g. {', '.join(only)})")
    if not first:
        raise FirstUpdateError("the two runs saved no parameters")
    missing = sorted(set(first) - set(initial))
    if missing:
        raise FirstUpdateError(f"the initial model has no {', '.join(missing[:3])}")
    names = sorted(first)
    for name in names:
        shapes = [tuple(p[name].shape) for p in (initial, first, second)]
        if len(set(shapes)) > 1:
            raise FirstUpdateError(f"{name}: shapes differ (initial, first, second: {shapes})")
    return names


def relative_difference(
    initial: Mapping[str, torch.Tensor],
    first: Mapping[str, torch.Tensor],
    second: Mapping[str, torch.Tensor],
    norm: float = math.inf,
    coordinates: torch.Tensor | None = None,
) -> float:
    """``rel`` (``norm`` inf) or ``rel2`` (``norm`` 2) of the module docstring over the parameters
    ``first`` and ``second`` share with ``initial`` (flattened in name order), over the
    ``coordinates`` (a boolean mask; all where None).

    Raises FirstUpdateError when the two name different parameters (or none), when a parameter's
    shape differs between the three, or when neither moved.
    """
    names = _checked_names(initial, first, second)
    theta0, theta_a, theta_b = (_flat(p, names) for p in (initial, first, second))
    if coordinates is not None:
        theta0, theta_a, theta_b = theta0[coordinates], theta_a[coordinates], theta_b[coordinates]
    stored = torch.maximum(theta_a.abs(), theta_b.abs()).float()
    ulp = torch.nextafter(stored, torch.tensor(math.inf)).double() - stored.double()
    gap = ((theta_a - theta_b).abs() - ulp).clamp_min(0.0)
    scale = max(float(torch.linalg.vector_norm(theta - theta0, norm)) for theta in (theta_a, theta_b))
    if scale == 0.0:
        raise FirstUpdateError("neither run moved any parameter in its first update")
    return float(torch.linalg.vector_norm(gap, norm)) / scale


def gradient_well_above_eps(
    initial: Mapping[str, torch.Tensor],
    first: Mapping[str, torch.Tensor],
    second: Mapping[str, torch.Tensor],
    learning_rate: float,
    weight_decay: float = 0.0,
) -> torch.Tensor:
    """The coordinates ``S`` of the sign-like comparison (module docstring): those whose first AdamW
    step, ``u = (θ_0 * (1 - lr * wd) - θ_1) / lr = g_1 / (|g_1| + eps)``, reaches
    ``WELL_ABOVE_EPS / (WELL_ABOVE_EPS + 1)`` in both runs (``first``, ``second``: the parameters
    after step 1), i.e. |g_1| >= WELL_ABOVE_EPS * eps; a boolean mask over the flattened parameters.

    Raises FirstUpdateError as ``relative_difference``, and when no coordinate qualifies (a learning
    rate at step 1 other than ``learning_rate``, or no gradient above eps).
    """
    names = _checked_names(initial, first, second)
    theta0 = _flat(initial, names)
    decayed = theta0 * (1.0 - learning_rate * weight_decay)
    bound = WELL_ABOVE_EPS / (WELL_ABOVE_EPS + 1.0)
    kept = torch.ones_like(theta0, dtype=torch.bool)
    for theta in (_flat(first, names), _flat(second, names)):
        kept &= ((decayed - theta) / learning_rate).abs() >= bound
    if not bool(kept.any()):
        raise FirstUpdateError(
            f"no parameter's first step reaches {bound:.6g} of the learning rate {learning_rate:g} in both runs "
            f"(its gradient {WELL_ABOVE_EPS:g} times eps): the sign-like comparison has nothing to compare"
        )
    return kept


def causes(first: Launch, second: Launch, rollouts_differ: bool | None = None) -> tuple[str, ...]:
    """The behaviours that reach the first update and differ between the two launches, in the
    first launch's order: where the first rollouts differ (``rollouts_differ``: the step-1
    rewards), only those that choose the rollout (``ROLLOUT_TOPICS``); where they are the same,
    only the others; where it is not known (None), all."""
    named = {d.topic: d.first_update for d in second.differences if d.first_update}
    found = []
    for difference in first.differences:
        other = named.get(difference.topic)
        if not difference.first_update or other is None or other == difference.first_update:
            continue
        if rollouts_differ is not None and (difference.topic in ROLLOUT_TOPICS) != rollouts_differ:
            continue
        found.append(f"{difference.topic}: {first.framework} {difference.first_update}; {second.framework} {other}")
    return tuple(found)


def step_one_reward(records: Sequence[Mapping[str, float]]) -> float | None:
    """The mean reward a trainer logged for RL step 1 (None when it logged none)."""
    for record in records:
        if int(record["step"]) == 1 and "reward" in record:
            return float(record["reward"])
    return None


CLIP_METRICS = ("clip_frac_low", "clip_frac_high", "clip_frac_dual")  # dual: losses with a dual clip


def clip_difference(records_a: Sequence[Mapping[str, float]], records_b: Sequence[Mapping[str, float]]) -> str:
    """The observation that the step-1 clip fractions (``CLIP_METRICS``) differ, naming them.

    For a pair whose rollouts and named behaviours agree it says the clip acted differently (its
    bound, or what it is applied to). Empty when both logged the same fractions (within
    ``REWARD_TOLERANCE``) or one logged none.
    """
    steps = [next((r for r in records if int(r["step"]) == 1), {}) for records in (records_a, records_b)]
    differing = [
        f"{name} {steps[0][name]:.4g} / {steps[1][name]:.4g}"
        for name in CLIP_METRICS
        if name in steps[0]
        and name in steps[1]
        and abs(steps[0][name] - steps[1][name]) > REWARD_TOLERANCE * max(1.0, abs(steps[0][name]))
    ]
    return f"clip (observed): the step-1 clip fractions differ ({'; '.join(differing)})" if differing else ""


def compare_pair(
    initial: Mapping[str, torch.Tensor],
    runs: Mapping[str, tuple[str, Sequence[Mapping[str, float]]]],
    launches: Mapping[str, Launch],
    first: str,
    second: str,
    dtype: str,
    optimiser_steps: int = 1,
    kind: str | None = PROPORTIONAL,
    coordinates: torch.Tensor | None = None,
) -> PairComparison:
    """Compare ``first`` and ``second`` after ``optimiser_steps`` optimiser steps of the first RL step
    by ``kind`` (``comparison``; None: ``rel``, no verdict) over the ``coordinates`` (all where None;
    sign-like: ``gradient_well_above_eps``); ``runs`` maps a framework to the file of its parameters
    after those steps and its per-step records."""
    (path_a, records_a), (path_b, records_b) = runs[first], runs[second]
    norm = 2.0 if kind == SIGN_LIKE else math.inf
    rel = relative_difference(initial, load_parameters(path_a), load_parameters(path_b), norm, coordinates)
    rewards = (step_one_reward(records_a), step_one_reward(records_b))
    bound = tolerance(dtype, optimiser_steps, kind)
    pair = PairComparison(first, second, rel, bound, rewards, (), kind, optimiser_steps)
    differ = None if pair.same_rewards is None else not pair.same_rewards
    named = causes(launches[first], launches[second], differ)
    if not named and pair.same_rewards and pair.identical is False:
        named = tuple(filter(None, [clip_difference(records_a, records_b)]))
    return dataclasses.replace(pair, causes=named)


def compare_steps(
    initial: Mapping[str, torch.Tensor],
    runs: Mapping[str, tuple[Sequence[str], Sequence[Mapping[str, float]]]],
    launches: Mapping[str, Launch],
    dtype: str,
    kind: str | None = PROPORTIONAL,
    learning_rate: float = 0.0,
    weight_decay: float = 0.0,
) -> list[PairComparison]:
    """Every pair of ``runs`` (in their order) after each optimiser step k of the first RL step, by
    step: ``runs`` maps a framework to the files of its parameters after steps 1..K (the same K
    for all) and its per-step records; after step k the tolerance is that of k chained steps. A
    sign-like comparison takes each pair's coordinates from its step-1 parameters and AdamW's
    ``learning_rate`` and ``weight_decay`` (``gradient_well_above_eps``)."""
    names = list(runs)
    counts = {len(files) for files, _ in runs.values()}
    if len(counts) != 1 or 0 in counts:
        raise FirstUpdateError(f"the runs saved different numbers of optimiser steps ({sorted(counts)})")
    (steps,) = counts
    pairs = [(first, second) for i, first in enumerate(names) for second in names[i + 1 :]]
    kept: dict[tuple[str, str], torch.Tensor | None] = dict.fromkeys(pairs)
    if kind == SIGN_LIKE:
        for first, second in pairs:
            one_a, one_b = (load_parameters(runs[name][0][0]) for name in (first, second))
            kept[first, second] = gradient_well_above_eps(initial, one_a, one_b, learning_rate, weight_decay)
    compared = []
    for k in range(1, steps + 1):
        at_k = {name: (files[k - 1], records) for name, (files, records) in runs.items()}
        compared += [
            compare_pair(initial, at_k, launches, first, second, dtype, k, kind, kept[first, second])
            for first, second in pairs
        ]
    return compared


def overall(pairs: Sequence[PairComparison]) -> bool | None:
    """The per-step verdicts together: False where one pair differs, True where every verdict given
    is identical, None where no step has a verdict."""
    verdicts = [pair.identical for pair in pairs if pair.identical is not None]
    return None if not verdicts else all(verdicts)
