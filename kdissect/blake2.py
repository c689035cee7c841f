"""BLAKE2b from CPython's built-in `_blake2` module: importing `hashlib`
would load OpenSSL first (about 4 ms and 3-4 MiB of memory at every start).
A leaf module: the codec cache, the capture-set merger and the check of the
compiled build (kdissect/native.py) take it from here."""

try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - other Python implementations
    from hashlib import blake2b

__all__ = ["blake2b"]
