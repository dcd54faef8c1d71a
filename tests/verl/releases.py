"""The installed verl release (``gmpo_plugins.adapters.verl_releases``) and the skip marks of the
tests that need what verl 0.8 does not have."""

from __future__ import annotations

import pytest

from gmpo_plugins.adapters.verl_releases import installed

RELEASE = installed()

needs_entry_points = pytest.mark.skipif(
    not RELEASE.entry_points,
    reason=f"verl {RELEASE.minor} does not import the verl.plugins entry points at `import verl` (0.9 does): "
    "this test loads the adapter through them",
)
needs_token_sum = pytest.mark.skipif(
    not RELEASE.token_sum,
    reason=f"verl {RELEASE.minor}'s actor config refuses loss_agg_mode=token-sum (0.9 accepts it)",
)
