"""Let glibc's malloc keep and reuse freed memory in a process that dissects a lot.

Big Kafka frames are collected from segment payloads and joined into blocks
of up to a few MiB; by default each such block is a fresh mmap (and freed
heap tops go back to the system), so every one is paid again in page faults:
about half the kernel time of exporting a capture of large batches. With
this, blocks under 32 MiB come from the heap and up to 256 MiB of freed heap
is kept for reuse. Meant for processes that end with their job (`kdissect
export`, Spark's Python workers). A no-op off glibc.
"""

from __future__ import annotations

# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_tuned = False


def keep_freed_memory() -> None:
    """Tune this process's malloc once (later calls do nothing)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, ImportError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 256 << 20)
