"""A disk cache of the codec's compiled decoder/encoder code objects.

Generating a codec's source is cheap; compiling it is not (about a millisecond
per message version, over a hundred versions in a bulk capture). The compiled
code object depends only on the source text, its file label and the Python
version, so it is stored with `marshal` under a key made of exactly those:
a cached entry can never be stale. The cache lives in `$KDISSECT_CACHE_DIR`,
else `$XDG_CACHE_HOME/kdissect`, else `~/.cache/kdissect` (one subdirectory
per Python version). Setting `KDISSECT_CACHE_DIR` to an empty string turns the
cache off. Any problem (unwritable directory, damaged entry) silently falls
back to compiling.
"""

from __future__ import annotations

import marshal
import os
import sys
from _thread import get_ident
from types import CodeType

from kdissect.blake2 import blake2b as _digest

# marshal's format and code objects change between Python versions
_PYTHON_TAG = f"{sys.implementation.cache_tag}-{sys.hexversion:08x}"

_directory: str | None = None
_resolved = False


def cache_directory() -> str | None:
    """Where compiled codecs are kept for this Python (None: caching is off)."""
    global _directory, _resolved
    if not _resolved:
        _resolved = True
        base = os.environ.get("KDISSECT_CACHE_DIR")
        if base is None:
            xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            base = os.path.join(xdg, "kdissect")
        _directory = os.path.join(base, f"codecs-{_PYTHON_TAG}") if base else None
    return _directory


def reset() -> None:
    """Look the cache directory up again on next use (after the environment changed)."""
    global _directory, _resolved
    _directory = None
    _resolved = False


def entry_path(source: str, filename: str) -> str | None:
    directory = cache_directory()
    if directory is None:
        return None
    key = _digest(f"{filename}\0{source}".encode("utf-8", "surrogatepass"), digest_size=20).hexdigest()
    return os.path.join(directory, key + ".marshal")


def compile_cached(source: str, filename: str) -> CodeType:
    """`compile(source, filename, "exec")`, from the cache when possible."""
    path = entry_path(source, filename)
    if path is not None:
        try:
            with open(path, "rb") as handle:
                code = marshal.loads(handle.read())
            if isinstance(code, CodeType) and code.co_filename == filename:
                return code
        except (OSError, ValueError, EOFError, TypeError):
            pass
    code = compile(source, filename, "exec")
    if path is not None:
        _store(path, code)
    return code


def _store(path: str, code: CodeType) -> None:
    temporary = f"{path}.{os.getpid()}.{get_ident()}.tmp"  # private to this process and thread
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(temporary, path)  # atomic: readers see a whole entry or none
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
