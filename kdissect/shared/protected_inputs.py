"""The inputs of a run, which no output may overwrite, hold or remove.

A capture is known by its real path and by its file identity (device and
inode), so a symbolic link or a hard link to it is the capture too. The
directories named as inputs (or matched by a glob) are kept as well.

- A single output file (`-o FILE` of export, records, topics, groups,
  clients, report) is refused when it is an input file, as `cp` refuses to
  copy a file onto itself (`refuse_output_over_input`), before anything is
  opened for writing.
- The Spark job's OUTDIR (kdissect.spark.outdir) is refused when it is,
  holds or lies inside an input (`ProtectedInputs.overlapping`), and no file
  it removes may be an input.
- Inputs and an OUTDIR in a store (kdissect.wire.stores: s3://, hdfs:// ...)
  have no real path nor identity there: they are compared by URI
  (`ProtectedInputs.overlapping_uri`; s3a:// and s3n:// are s3://).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from kdissect.wire import stores
from kdissect.failures import InputError


def _inside(path: str, directory: str) -> bool:
    """`path` is `directory` or lies under it (both real, absolute paths)."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


class ProtectedInputs:
    """The input files (by real path and identity) and input directories."""

    def __init__(self, files: Iterable[str], directories: Iterable[str] = ()) -> None:
        self.files: dict[str, str] = {}  # real path -> the path as the run knows it
        self.identities: dict[tuple[int, int], str] = {}
        for path in map(_as_local, files):
            if stores.is_uri(path):
                self.files.setdefault(path, path)  # compared by URI (overlapping_uri)
                continue
            self.files.setdefault(os.path.realpath(path), path)
            try:
                status = os.stat(path)
            except OSError:
                continue  # gone since it was listed: nothing to protect
            self.identities.setdefault((status.st_dev, status.st_ino), path)
        self.directories = {path if stores.is_uri(path) else os.path.realpath(path): path
                            for path in map(_as_local, directories)}

    @classmethod
    def of_arguments(cls, arguments: Sequence[str], files: Iterable[str]) -> ProtectedInputs:
        """From the CAPTURE arguments (files, directories, globs) and the
        capture files they expanded to (kdissect.shared.inputs.expand_inputs)."""
        directories = []
        for item in arguments:
            if stores.is_uri(item):
                directories.append(_wildcard_free(item))  # a store directory, a glob's fixed part, or a file
            elif os.path.isdir(item):
                directories.append(item)
            elif any(char in item for char in "*?["):
                import glob

                directories.extend(match for match in glob.glob(item, recursive=True) if os.path.isdir(match))
        return cls(files, directories)

    def overlapping_uri(self, uri: str) -> str | None:
        """The store input that the store location `uri` is, holds or lies inside (by URI), or None."""
        target = _store_key(uri)
        for given in (*self.files.values(), *self.directories.values()):
            if stores.is_uri(given):
                protected = _store_key(given)
                if protected == target or protected.startswith(target + "/") or target.startswith(protected + "/"):
                    return given
        return None

    def same_file(self, path: str) -> str | None:
        """The input that `path` is (itself, a symbolic link to it or a hard link), or None."""
        try:
            status = os.stat(path)
        except OSError:
            return None
        return self.identities.get((status.st_dev, status.st_ino))

    def overlapping(self, path: str) -> str | None:
        """The input that `path` is, holds or lies inside (by real paths,
        and by identity for a file), or None."""
        found = self.same_file(path)
        if found is not None:
            return found
        real = os.path.realpath(path)
        for protected, given in (*self.files.items(), *self.directories.items()):
            if stores.is_uri(given):
                continue  # in a store: never a local OUTDIR's
            if _inside(protected, real) or _inside(real, protected):
                return given
        return None


def _as_local(path: str) -> str:
    """A file:// URI as its local path; anything else as it is."""
    if stores.is_uri(path):
        location = stores.parse(path)
        if location.scheme in stores.LOCAL_SCHEMES:
            return location.path
    return path


def _wildcard_free(uri: str) -> str:
    """The part of a URI before its first glob character's path component."""
    for at, char in enumerate(uri):
        if char in "*?[":
            return uri[:at].rsplit("/", 1)[0]
    return uri


def _store_key(uri: str) -> str:
    """A store URI compared as a location: one spelling of the scheme, no trailing slash."""
    location = stores.parse(uri)
    if location.scheme in stores.S3_SCHEMES:
        return f"s3://{location.path}".rstrip("/")
    if location.scheme in stores.AZURE_SCHEMES:  # abfs and abfss name the same container
        return f"abfs://{location.account or ''}/{location.path}".rstrip("/")
    if location.scheme in stores.BUCKET_SCHEMES:
        return f"{location.scheme}://{location.path}".rstrip("/")
    return f"{location.scheme}://{location.authority}{location.path}".rstrip("/")


def refuse_output_over_input(output: str | None, inputs: ProtectedInputs) -> None:
    """Refuse (InputError, exit 2) an output file that is one of the inputs."""
    if output is None or output == "-":
        return
    found = inputs.same_file(output)
    if found is None:
        return
    what = "an input" if os.path.abspath(output) == os.path.abspath(found) else f"the same file as the input {found}"
    raise InputError(f"-o {output} is {what}: refusing to write over it (choose another output file)")
