"""Which OpenRLHF versions the adapter is tested with, checked without importing OpenRLHF.

``SUPPORTED`` is OpenRLHF's tested range (``upstream.TESTED``). A version outside it gives
one ``UntestedFrameworkWarning``; what the adapter refuses is another ``PolicyLoss``
signature (``patch``: 0.11.0 and 0.11.1 have another constructor and return 4 values), and
only for runs that ask for a registry loss. OpenRLHF has no ``__version__``; the version
comes from the installed distribution.
"""

from __future__ import annotations

from gmpo_plugins.adapters.upstream import TESTED, installed_version, warn_if_untested

SUPPORTED = TESTED["openrlhf"].specifier


class UnsupportedOpenRLHFVersionError(RuntimeError):
    """OpenRLHF is absent, or its PolicyLoss has a signature the patch does not translate."""


def check_version(version: str | None = None) -> str:
    """Return ``version`` (default: the installed one), warning once when it is outside
    ``SUPPORTED``; raise UnsupportedOpenRLHFVersionError when OpenRLHF is not installed."""
    version = installed_version("openrlhf") if version is None else version
    if version is None:
        raise UnsupportedOpenRLHFVersionError(
            f"gmpo_plugins: OpenRLHF is not installed; the OpenRLHF adapter supports openrlhf{SUPPORTED} "
            f"(pip install 'openrlhf{SUPPORTED}')"
        )
    warn_if_untested("openrlhf", version)
    return version
