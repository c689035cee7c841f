"""The optional parts of kdissect and the pip extra each one needs.

A face whose extra is not installed stops with one line naming the extra
(`MissingExtra`), not with the ModuleNotFoundError of whatever it imports
first.
"""

from __future__ import annotations

import importlib.util

from kdissect.failures import InputError

# extra -> the modules it installs that kdissect imports (every third-party
# module its face imports beyond the base dependencies: tests/shared/test_extras.py)
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pandas", "numpy"),
    "scapy": ("scapy",),
    "report": ("altair", "vl_convert"),  # the charts in notebooks (the page needs neither)
    "webhdfs": ("fsspec", "requests"),  # webhdfs:// URIs (kdissect/wire/webhdfs.py, through kdissect.wire.stores)
}


class MissingExtra(InputError, ModuleNotFoundError):
    """A module of an optional extra is not installed; the message says which
    extra to install. The CLI reports it as any InputError (one line, exit 2);
    Python callers can catch it as the ModuleNotFoundError it stands for."""


def require(extra: str, face: str) -> None:
    """Raise MissingExtra unless every module of `extra` can be imported;
    `face` names what needs it (e.g. "`kdissect spark`")."""
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(f"{face} needs {module}, which is not installed: pip install 'kdissect[{extra}]'",
                               name=module)
