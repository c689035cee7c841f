"""Turn the user's INPUT arguments into an ordered list of capture files."""

from __future__ import annotations

import glob
import os

from kdissect.failures import InputError

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"
_PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


def file_kind(path: str) -> str | None:
    """'pcap', 'pcapng', 'gzip' by magic bytes, or None for anything else."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(4)
    except OSError as problem:
        raise InputError(f"cannot read {path}: {problem.strerror or problem}") from None
    if head in _PCAP_MAGICS:
        return "pcap"
    if head == PCAPNG_MAGIC:
        return "pcapng"
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    return None


def expand_inputs(inputs: list[str]) -> tuple[list[str], list[str]]:
    """Files named, found under directories (recursively) or matched by globs.

    Returns (capture files, skipped files). Files met while walking a
    directory or matching a glob are kept only if they look like captures
    (the rest are returned as skipped); a file named explicitly must be one.
    """
    found: list[str] = []
    skipped: list[str] = []
    for item in inputs:
        if os.path.isfile(item):
            if file_kind(item) is None:
                raise InputError(f"{item}: not a pcap, pcapng or gzip capture file")
            found.append(item)
            continue
        if os.path.isdir(item):
            candidates = sorted(
                os.path.join(root, name) for root, _, names in os.walk(item) for name in names
            )
        elif glob.has_magic(item):
            candidates = sorted(glob.glob(item, recursive=True))
            if not candidates:
                raise InputError(f"{item}: no file matches")
            expanded: list[str] = []
            for match in candidates:
                if os.path.isdir(match):
                    expanded.extend(
                        sorted(os.path.join(r, n) for r, _, ns in os.walk(match) for n in ns)
                    )
                else:
                    expanded.append(match)
            candidates = expanded
        else:
            raise InputError(f"{item}: no such file or directory")
        for candidate in candidates:
            if not os.path.isfile(candidate):
                continue
            (found if file_kind(candidate) else skipped).append(candidate)
    unique = list(dict.fromkeys(os.path.abspath(path) for path in found))
    if not unique:
        raise InputError("no capture files found in the inputs")
    return unique, skipped
