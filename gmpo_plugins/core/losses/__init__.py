"""The built-in losses, registered as the ``builtin`` plugin of the distribution
gmpo-plugins (entry point group ``gmpo_plugins``). One line per loss family below."""

from __future__ import annotations

from gmpo_plugins.core.hookspecs import hookimpl
from gmpo_plugins.core.losses.cispo import CISPO
from gmpo_plugins.core.losses.covariance import CLIP_COV, KL_COV
from gmpo_plugins.core.losses.decoupled_ppo import DECOUPLED_PPO, M2PO
from gmpo_plugins.core.losses.dppo import DPPO_KL, DPPO_TV
from gmpo_plugins.core.losses.dro import DRO
from gmpo_plugins.core.losses.fipo import FIPO
from gmpo_plugins.core.losses.gmpo import GMPO, GMPO_NOCLIP, GMPO_NONORM, GMPO_SEQCLIP
from gmpo_plugins.core.losses.gpg import GPG
from gmpo_plugins.core.losses.gspo import GSPO
from gmpo_plugins.core.losses.importance_sampling import IMPORTANCE_SAMPLING
from gmpo_plugins.core.losses.luspo import LUSPO
from gmpo_plugins.core.losses.ppo_clip import DAPO, DR_GRPO, GRPO
from gmpo_plugins.core.losses.prime_rl import PRIME_IPO, PRIME_RL
from gmpo_plugins.core.losses.real import REAL
from gmpo_plugins.core.losses.rollout_is import ROLLOUT_IS
from gmpo_plugins.core.losses.sapo import SAPO
from gmpo_plugins.core.losses.topr import TOPR
from gmpo_plugins.core.losses.vespo import VESPO
from gmpo_plugins.core.spec import LossSpec

BUILTIN_LOSSES: tuple[LossSpec, ...] = (
    *(GMPO, GMPO_NOCLIP, GMPO_SEQCLIP, GMPO_NONORM),
    *(GRPO, DAPO, DR_GRPO),
    GSPO,
    CISPO,
    SAPO,
    GPG,
    DRO,
    *(DPPO_TV, DPPO_KL),
    *(CLIP_COV, KL_COV),
    LUSPO,
    VESPO,
    ROLLOUT_IS,
    IMPORTANCE_SAMPLING,
    TOPR,
    *(DECOUPLED_PPO, M2PO),
    *(PRIME_RL, PRIME_IPO),
    *(FIPO, REAL),
)

NOT_REGISTERED: dict[str, str] = {
    "bnpo": "TRL's and Liger's bnpo divide by the active tokens of the local micro-batch, so its gradient "
    "depends on the micro-batch split; use 'dapo' (token-mean over the global token count), which is "
    "what bnpo approximates",
    "cross_entropy": "an SFT loss (no advantage, no ratio): out of scope of a policy-loss registry",
}
"""Names the frameworks use that the registry refuses, each with the reason (``get_loss``
names it in its error)."""


@hookimpl
def gmpo_plugins_losses() -> tuple[LossSpec, ...]:
    """The losses shipped with gmpo-plugins."""
    return BUILTIN_LOSSES
