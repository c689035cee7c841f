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
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from kdissect.failures import InputError


def _inside(path: str, directory: str) -> bool:
    """`path` is `directory` or lies under it (both real, absolute paths)."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


class ProtectedInputs:
    """The input files (by real path and identity) and input directories."""

    def __init__(self, files: Iterable[str], directories: Iterable[str] = ()) -> None:
        self.files: dict[str, str] = {}  # real path -> the path as the run knows it
        self.identities: dict[tuple[int, int], str] = {}
        for path in files:
            self.files.setdefault(os.path.realpath(path), path)
            try:
                status = os.stat(path)
            except OSError:
                continue  # gone since it was listed: nothing to protect
            self.identities.setdefault((status.st_dev, status.st_ino), path)
        self.directories = {os.path.realpath(path): path for path in directories}

    @classmethod
    def of_arguments(cls, arguments: Sequence[str], files: Iterable[str]) -> ProtectedInputs:
        """From the CAPTURE arguments (files, directories, globs) and the
        capture files they expanded to (kdissect.inputs.expand_inputs)."""
        directories = []
        for item in arguments:
            if os.path.isdir(item):
                directories.append(item)
            elif any(char in item for char in "*?["):
                import glob

                directories.extend(match for match in glob.glob(item, recursive=True) if os.path.isdir(match))
        return cls(files, directories)

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
            if _inside(protected, real) or _inside(real, protected):
                return given
        return None


def refuse_output_over_input(output: str | None, inputs: ProtectedInputs) -> None:
    """Refuse (InputError, exit 2) an output file that is one of the inputs."""
    if output is None or output == "-":
        return
    found = inputs.same_file(output)
    if found is None:
        return
    what = "an input" if os.path.abspath(output) == os.path.abspath(found) else f"the same file as the input {found}"
    raise InputError(f"-o {output} is {what}: refusing to write over it (choose another output file)")
