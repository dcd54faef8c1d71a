"""Test-only stand-in for Python >= 3.12's ``typing.TypedDict`` on Python 3.11.

skyrl 0.3.0 declares Python >= 3.11 but cannot be imported on 3.11: importing any
``skyrl.backends`` module runs ``skyrl/backends/__init__.py:3`` -> ``backends/backend.py:30``
-> ``skyrl/tinker/types.py:137``, a pydantic model with a ``typing.TypedDict`` field, which
pydantic 2 rejects before Python 3.12 ("Please use typing_extensions.TypedDict").
``typing_extensions.TypedDict`` is what pydantic asks for and is the same class on 3.12+.
The skyrl nox session puts this directory on PYTHONPATH (so Ray workers get it too); it is
not part of gmpo_plugins.
"""

import sys

if sys.version_info < (3, 12):
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict
