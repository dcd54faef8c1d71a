"""``python -m gmpo_plugins.adapters.verl``: which verl ``loss_mode`` runs which registry loss."""

from __future__ import annotations

from gmpo_plugins.adapters.verl import VERL_NAMES


def table() -> str:
    """One line per registry loss: the loss_mode values that select it."""
    lines = ["registry loss     verl loss_mode"]
    for name in VERL_NAMES:
        if name.bare is not None:
            modes = f"{name.bare}  or  {name.prefixed}"
        else:
            modes = f"{name.prefixed}  ('{name.loss}' alone is {name.taken_by})"
        lines.append(f"{name.loss:<17} {modes}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
