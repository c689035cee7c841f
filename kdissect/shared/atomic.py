"""Every output file is written whole or not at all.

An output is written under a temporary name in its own directory and renamed
over the target (`os.replace`) only once it is complete and synced. A failure
on the way (a full disk, a write error, an interruption, a bad capture) removes
the temporary file and leaves whatever the target held before untouched; the
user gets one line, `cannot write PATH: REASON`, and exit status 2
(`OutputError` is an `InputError`).

    with atomic_file("out.csv", "w", encoding="utf-8") as stream:  # a file object
        stream.write(...)
    with atomic_path("table.parquet") as temporary:                  # a path, for writers that open by name
        pyarrow.parquet.write_table(table, temporary)

`AtomicFile` is the same for writers that stay open across calls
(`kdissect.shared.output.open_writer`): `open_text()`/`open_binary()` or
`temporary`, then `commit()` or `abandon()`.

A target that is a symbolic link is written through (its target is replaced,
the link stays, as `cp` does). A target that exists and is not a regular file
(/dev/null, a FIFO, a terminal) cannot be renamed over: it is written in
place, as before.
"""

from __future__ import annotations

import io
import os
import stat
from contextlib import contextmanager
from typing import IO, Any, Iterator

from kdissect.failures import InputError

TEMPORARY_SUFFIX = ".kdissect-tmp"
_MAX_NAME_PART = 180  # a temporary name stays within NAME_MAX (255) whatever the target's


class OutputError(InputError):
    """An output could not be written (full disk, permissions, a directory in the way)."""


def cannot_write(path: str, problem: OSError | str) -> OutputError:
    """The one-line error for an output that could not be written."""
    if isinstance(problem, str):
        reason = problem
    else:
        # pyarrow's: "Error writing bytes to file. Detail: [errno 28] No space left on device"
        import re

        found = re.search(r"\[errno (\d+)\]", str(problem))
        reason = os.strerror(int(found.group(1))) if found else (problem.strerror or str(problem))
    return OutputError(f"cannot write {path}: {reason}")


def temporary_name(target: str) -> str:
    """A fresh temporary name beside `target` (hidden: a leading dot, so
    Spark and pyarrow skip it when they read a table directory)."""
    directory, name = os.path.split(target)
    return os.path.join(directory, f".{name[:_MAX_NAME_PART]}.{os.urandom(6).hex()}{TEMPORARY_SUFFIX}")


class _GuardedFileIO(io.FileIO):
    """A FileIO whose write errors are `OutputError`s naming the output.
    The buffered layers above call it once per buffer, not per row."""

    output_name = ""

    def write(self, data: Any) -> int | None:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError as problem:
            raise cannot_write(self.output_name, problem) from None


# temporaries of this process not yet committed or abandoned: what an
# interrupted run (SIGTERM lands between creating a temporary and the code that
# would abandon it) removes on its way out (`remove_unfinished`)
_UNFINISHED: set[str] = set()


def remove_unfinished() -> None:
    """Remove every temporary file this process made and did not commit."""
    while _UNFINISHED:
        name = _UNFINISHED.pop()
        try:
            os.unlink(name)
        except OSError:
            pass


class AtomicFile:
    """One output file: written to `temporary` until `commit()` renames it
    over the target; `abandon()` removes it. `path` is the name the user gave
    (it is what messages show)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.target = os.path.realpath(self.path)  # through a symbolic link, as cp writes
        try:
            status: os.stat_result | None = os.stat(self.target)
        except FileNotFoundError:
            status = None
        except OSError as problem:
            raise cannot_write(self.path, problem) from None
        if status is not None and stat.S_ISDIR(status.st_mode):
            raise cannot_write(self.path, "is a directory")
        self.in_place = status is not None and not stat.S_ISREG(status.st_mode)
        self._raw: io.FileIO | None = None
        self._done = False
        if self.in_place:  # a device or a FIFO: nothing to rename over
            self.temporary = self.target
            return
        self.temporary = temporary_name(self.target)
        _UNFINISHED.add(self.temporary)
        try:
            descriptor = os.open(self.temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except OSError as problem:
            raise cannot_write(self.path, problem) from None
        try:
            if status is not None:  # the replaced file's permissions, not the umask's
                os.fchmod(descriptor, stat.S_IMODE(status.st_mode))
        finally:
            os.close(descriptor)

    def _open_raw(self) -> io.FileIO:
        try:
            raw = _GuardedFileIO(self.temporary, "w")
        except OSError as problem:
            raise cannot_write(self.path, problem) from None
        raw.output_name = self.path
        self._raw = raw
        return raw

    def open_binary(self, buffering: int = io.DEFAULT_BUFFER_SIZE) -> IO[bytes]:
        """The temporary file opened for writing bytes (write errors raise OutputError)."""
        return io.BufferedWriter(self._open_raw(), buffering)  # type: ignore[return-value]

    def open_text(self, encoding: str = "utf-8", newline: str | None = None,
                  buffering: int = io.DEFAULT_BUFFER_SIZE) -> IO[str]:
        """The temporary file opened for writing text (write errors raise OutputError)."""
        return io.TextIOWrapper(self.open_binary(buffering), encoding=encoding, newline=newline)

    def commit(self, stream: IO[Any] | None = None) -> None:
        """Close `stream` (the file object from open_*), sync the file and
        rename it over the target. On failure the temporary file is removed
        and OutputError raised; the target is as it was."""
        if self._done:
            return
        try:
            if stream is not None:
                stream.close()
            if not self.in_place:
                _sync(self.temporary)
                os.replace(self.temporary, self.target)
                _UNFINISHED.discard(self.temporary)
                _sync_directory(os.path.dirname(self.target))
        except OutputError:
            self.abandon()
            raise
        except OSError as problem:
            self.abandon()
            raise cannot_write(self.path, problem) from None
        self._done = True

    def abandon(self) -> None:
        """Remove the temporary file (what the target held stays). Quiet:
        called while another error is on its way."""
        if self._done:
            return
        self._done = True
        if self._raw is not None:
            # Closing the raw file first makes the buffered layers above it
            # closed too: nothing left for them to flush (and fail) later.
            try:
                self._raw.close()
            except OSError:
                pass
        if not self.in_place:
            try:
                os.unlink(self.temporary)
            except OSError:
                pass
            _UNFINISHED.discard(self.temporary)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: Any, value: Any, trace: Any) -> None:
        if kind is None:
            self.commit()
        else:
            self.abandon()


def _sync(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sync_directory(directory: str) -> None:
    """Make the rename durable; some file systems cannot sync a directory (fine)."""
    try:
        _sync(directory or ".")
    except OSError:
        pass


@contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "w", encoding: str = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """A file object ("w" text or "wb" bytes) whose content replaces `path`
    when the block ends without an error, and is discarded otherwise."""
    output = AtomicFile(path)
    try:
        stream = output.open_binary() if "b" in mode else output.open_text(encoding, newline)
        yield stream
    except BaseException:
        output.abandon()
        raise
    output.commit(stream)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path for a writer that opens files by name (pyarrow);
    renamed over `path` when the block ends without an error. An OSError
    inside the block (the writer's own write error) becomes OutputError."""
    output = AtomicFile(path)
    try:
        yield output.temporary
    except OSError as problem:
        output.abandon()
        raise cannot_write(output.path, problem) from None
    except BaseException:
        output.abandon()
        raise
    output.commit()


def write_atomically(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` with `data` (str as UTF-8), whole or not at all."""
    with atomic_file(path, "wb") as stream:
        stream.write(data.encode("utf-8") if isinstance(data, str) else data)
