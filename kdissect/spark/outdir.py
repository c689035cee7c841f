"""The Spark job's OUTDIR: what it may already hold, and what the job may remove.

The job writes only names of its own under OUTDIR: one directory per table
(kdissect.spark.job.TABLES), `_work/` while it runs, `manifest.json` at the
end and the marker `.kdissect-outdir` at the start (so an interrupted run is
still recognised as kdissect's). `claim_outdir` decides, before Spark starts
and before anything under OUTDIR is written or removed:

- a new or empty directory is used;
- a directory holding an earlier kdissect output (the marker, or a
  `manifest.json` that `kdissect spark` wrote) is refused unless
  `--overwrite` is given; with it, only kdissect's own files are removed
  (the table directories' part files, `_SUCCESS` markers and temporary
  files, `_work/`, `manifest.json`), everything else under OUTDIR stays as
  it is. A file in a table directory that kdissect did not write is
  refused rather than left there: the table would no longer read as
  Parquet;
- any other non-empty directory is refused, `--overwrite` or not;
- never, whatever the options: an OUTDIR that is, holds or lies inside an
  input (kdissect.protected_inputs), a table directory that leads (through
  a symbolic link) to an input, or a file to remove that is an input (a
  hard link).

Refusals are one-line InputErrors (exit 2). OUTDIR is a local or mounted
path (`local_outdir`; a file:// URL is accepted).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Sequence

from kdissect.failures import InputError
from kdissect.protected_inputs import ProtectedInputs

MARKER = ".kdissect-outdir"
MANIFEST = "manifest.json"
TOOL = "kdissect spark"
# Files of a table directory that kdissect writes: part files (pyarrow's
# part-NNNNN.parquet, and the part-NNNNN-<uuid>-c000.snappy.parquet names of
# Spark's own writer, used by earlier versions), _SUCCESS, the checksums
# Spark writes beside them and temporary files (kdissect.atomic's, and the
# .<name>.<hex>.tmp of earlier versions).
_OWN_TABLE_FILE = re.compile(
    r"part-\d{5}[-\w.]*\.parquet|_SUCCESS|\.(?:part-\d{5}[-\w.]*\.parquet|_SUCCESS)\.crc"
    r"|\..+\.kdissect-tmp|\.part-\d{5}\.parquet\.[0-9a-f]+(?:\.tmp)?")
_MARKER_TEXT = json.dumps({
    "written_by": TOOL,
    "about": "This directory holds tables of `kdissect spark`. A later run replaces them only with "
             "--overwrite, and then removes only the files kdissect wrote.",
}, indent=2) + "\n"


def local_outdir(outdir: str) -> str:
    """OUTDIR as a file system path: the tasks and the driver write into it
    with plain file operations, so it must be local or mounted (on every
    node, for a cluster); a file:// URL is accepted."""
    if "://" in outdir and not outdir.startswith("file://"):
        raise InputError(f"{outdir}: OUTDIR must be a local or mounted path (the tasks write into it directly)")
    return outdir.removeprefix("file://")


def is_kdissect_outdir(path: str) -> bool:
    """The directory holds an earlier output of the job: its marker, or a
    manifest.json the job wrote (outputs from before the marker)."""
    if os.path.isfile(os.path.join(path, MARKER)):
        return True
    manifest = os.path.join(path, MANIFEST)
    try:
        if not os.path.isfile(manifest) or os.path.getsize(manifest) > 64 << 20:
            return False
        with open(manifest, encoding="utf-8") as stream:
            return json.load(stream).get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        return False


def claim_outdir(outdir: str, inputs: ProtectedInputs, overwrite: bool, tables: Sequence[str],
                 work_dir: str) -> str:
    """Check OUTDIR against the rule above, remove what an earlier run wrote
    (with `overwrite`), create it and write the marker; its absolute local
    path. `tables` and `work_dir` are the names the job writes under it."""
    given = outdir
    path = os.path.abspath(local_outdir(outdir))
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"{given}: exists and is not a directory")
    clash = inputs.overlapping(path)
    if clash is not None:
        raise InputError(f"OUTDIR {given} {_relation(path, clash)} the input {clash}: refusing to write there "
                         "(choose an OUTDIR apart from the inputs)")
    if os.path.isdir(path) and os.listdir(path):
        if not is_kdissect_outdir(path):
            raise InputError(f"OUTDIR {given} is not empty and holds no earlier kdissect spark output: "
                             "refusing to write there, even with --overwrite (choose a new or empty directory)")
        if not overwrite:
            raise InputError(f"OUTDIR {given} holds an earlier kdissect spark output: give --overwrite to replace "
                             "its tables (files kdissect did not write are left as they are), or choose another OUTDIR")
        _remove_earlier_output(path, given, inputs, tables, work_dir)
    try:
        os.makedirs(path, exist_ok=True)
        from kdissect.atomic import write_atomically

        write_atomically(os.path.join(path, MARKER), _MARKER_TEXT)
    except OSError as problem:
        raise InputError(f"cannot write {given}: {problem.strerror or problem}") from None
    return path


def _relation(path: str, clash: str) -> str:
    real, other = os.path.realpath(path), os.path.realpath(clash)
    if real == other:
        return "is"
    return "holds" if other.startswith(real.rstrip(os.sep) + os.sep) else "is inside"


def _remove_earlier_output(path: str, given: str, inputs: ProtectedInputs, tables: Sequence[str],
                           work_dir: str) -> None:
    """Remove the files an earlier run wrote; refuse (before removing any)
    if one of them is or leads to an input, or a table directory holds a
    file that is not kdissect's."""
    files: list[str] = []
    trees: list[str] = []
    for name in (*tables, work_dir, MANIFEST, MARKER):
        entry = os.path.join(path, name)
        if not os.path.lexists(entry):
            continue
        clash = inputs.overlapping(entry)
        if clash is not None:
            raise InputError(f"{given}/{name} {_relation(entry, clash)} the input {clash}: refusing to remove it")
        if name in (MANIFEST, MARKER):
            files.append(entry)
        elif name == work_dir:
            trees.append(entry)  # wholly the job's (scratch files of a run)
            files.extend(os.path.join(root, file) for root, _, names in os.walk(entry) for file in names)
        elif not os.path.isdir(entry):
            raise InputError(f"{given}/{name} is not a table directory kdissect wrote: refusing to replace it "
                             "(move it out of OUTDIR, or choose another OUTDIR)")
        else:
            for file in sorted(os.listdir(entry)):
                inside = os.path.join(entry, file)
                if not _OWN_TABLE_FILE.fullmatch(file) or os.path.isdir(inside):
                    raise InputError(f"{given}/{name}/{file} was not written by kdissect: refusing to replace the "
                                     f"{name} table beside it (move it out of OUTDIR, or choose another OUTDIR)")
                files.append(inside)
    for file in files:
        clash = inputs.same_file(file) if not os.path.islink(file) else None
        if clash is not None:
            raise InputError(f"{file} is the same file as the input {clash}: refusing to remove it")
    for file in files:
        if os.path.lexists(file) and not any(file.startswith(tree + os.sep) for tree in trees):
            os.unlink(file)
    for tree in trees:
        shutil.rmtree(tree)
