"""The command line's CAPTURE arguments -> the capture files they name.

Every command that reads captures (export, show, stats, records, spark) goes
through `expand_inputs`, so files, directories and globs mean the same
everywhere and fail with the same one-line errors.
"""

from __future__ import annotations

import os
import stat
from typing import Sequence

from kdissect.failures import InputError

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
GZIP_MAGIC = b"\x1f\x8b"
_PCAP_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")


def file_kind(path: str) -> str | None:
    """'pcap', 'pcapng', 'gzip' by magic bytes, or None for anything else
    (a store URI's first bytes come from one small ranged read)."""
    from kdissect.wire import stores

    if stores.is_uri(path):
        return _kind_of(stores.read_head(path, 4))
    try:
        descriptor = os.open(path, os.O_RDONLY)  # not open(): no buffered file object for 4 bytes
        try:
            head = os.read(descriptor, 4)
        finally:
            os.close(descriptor)
    except OSError as problem:
        raise InputError(f"cannot read {path}: {problem.strerror or problem}") from None
    return _kind_of(head)


def _kind_of(head: bytes) -> str | None:
    if head in _PCAP_MAGICS:
        return "pcap"
    if head == PCAPNG_MAGIC:
        return "pcapng"
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    return None


def not_regular(path: str) -> str | None:
    """What `path` is when it exists but is neither a regular file nor a
    directory ("a FIFO", "a character device", ...; links followed), else
    None. Such a file is never opened: opening a FIFO blocks, and a device
    such as /dev/zero never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def expand_inputs(inputs: Sequence[str]) -> tuple[list[str], list[str]]:
    """Files named, found under directories (recursively) or matched by globs.

    Returns (capture files, skipped files). Files met while walking a
    directory or matching a glob are kept only if they look like captures
    (the rest are returned as skipped, FIFOs and devices with what they are);
    a file named explicitly must be one.
    """
    from kdissect.wire import stores

    found: list[str] = []
    skipped: list[str] = []
    for item in inputs:
        if stores.is_uri(item):
            _expand_uri(item, found, skipped)
            continue
        if os.path.isfile(item):
            if file_kind(item) is None:
                raise InputError(f"{item}: not a pcap, pcapng or gzip capture file")
            found.append(item)
            continue
        if os.path.isdir(item):
            candidates = sorted(
                os.path.join(root, name) for root, _, names in os.walk(item) for name in names
            )
        elif any(char in item for char in "*?["):  # as glob.has_magic
            import glob

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
            kind = not_regular(item)
            if kind is not None:
                raise InputError(f"{item}: not a regular file ({kind}), not read")
            raise InputError(f"{item}: no such file or directory")
        for candidate in candidates:
            if not os.path.isfile(candidate):
                kind = not_regular(candidate)
                if kind is not None:
                    skipped.append(f"{candidate} ({kind})")
                continue
            (found if file_kind(candidate) else skipped).append(candidate)
    unique = list(dict.fromkeys(path if stores.is_uri(path) else os.path.abspath(path) for path in found))
    if not unique:
        raise InputError(f"no capture files found in {', '.join(inputs)}")
    return unique, skipped


def _expand_uri(item: str, found: list[str], skipped: list[str]) -> None:
    """A store URI's files (kdissect.wire.stores.list_files), kept as canonical URIs."""
    from kdissect.wire import stores

    listed = stores.list_files(item)
    named = len(listed) == 1 and stores.parse(listed[0][0]).path == stores.parse(item).path
    stores.prefetch_heads([uri for uri, _size in listed])  # what file_kind and the first look read
    for uri, _size in listed:
        kind = file_kind(uri)
        if named and kind is None:
            raise InputError(f"{stores.parse(item).uri}: not a pcap, pcapng or gzip capture file")
        (found if kind else skipped).append(uri)
