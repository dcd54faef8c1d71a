"""Which OpenRLHF versions the adapter translates for, checked without importing OpenRLHF.

``SUPPORTED`` is the range whose ``PolicyLoss`` has the signature and 5-tuple return that
``patch`` translates (0.11.0 and 0.11.1 have another constructor and return 4 values).
OpenRLHF has no ``__version__``; the version comes from the installed distribution.
"""

from __future__ import annotations

import importlib.metadata

SUPPORTED = ">=0.11.2,<0.12"


class UnsupportedOpenRLHFVersionError(RuntimeError):
    """The installed OpenRLHF is outside ``SUPPORTED`` (or absent, or has another PolicyLoss)."""


def installed_version() -> str | None:
    """The installed ``openrlhf`` distribution's version, None when it is not installed."""
    try:
        return importlib.metadata.version("openrlhf")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(version: str | None = None) -> str:
    """Return ``version`` (default: the installed one) if it is in ``SUPPORTED``, else raise
    UnsupportedOpenRLHFVersionError naming the supported range."""
    version = installed_version() if version is None else version
    if version is None:
        raise UnsupportedOpenRLHFVersionError(
            f"gmpo_plugins: OpenRLHF is not installed; the OpenRLHF adapter supports openrlhf{SUPPORTED} "
            f"(pip install 'openrlhf{SUPPORTED}')"
        )
    from packaging.specifiers import SpecifierSet  # an OpenRLHF dependency

    if version not in SpecifierSet(SUPPORTED):
        raise UnsupportedOpenRLHFVersionError(
            f"gmpo_plugins: OpenRLHF {version} is not supported by the OpenRLHF adapter; supported: "
            f"openrlhf{SUPPORTED} (pip install 'openrlhf{SUPPORTED}')"
        )
    return version
