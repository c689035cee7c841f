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
  input (kdissect.shared.protected_inputs), a table directory that leads (through
  a symbolic link) to an input, or a file to remove that is an input (a
  hard link).

The rule is the same for an OUTDIR in a store (s3://, hdfs://, webhdfs://;
kdissect.shared.outdir_tree): the store must answer (and its bucket exist), what
OUTDIR holds is known from the store's listing, inputs are compared by URI,
and `--overwrite` removes the same files of kdissect's. An earlier output
is also recognised by the `_SUCCESS` and `_KDISSECT_RUNNING` markers the
job writes at OUTDIR's top (see kdissect.spark.job: `_SUCCESS` is written
last, so an output without it is incomplete).

Refusals are one-line InputErrors (exit 2). OUTDIR is a local path, a
file:// URL or a store URI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Sequence

from kdissect.wire import stores
from kdissect.failures import InputError
from kdissect.shared.protected_inputs import ProtectedInputs
from kdissect.shared.outdir_tree import RUNNING, SUCCESS, Tree

MARKER = ".kdissect-outdir"
MANIFEST = "manifest.json"
TOOL = "kdissect spark"
# Files of a table directory that kdissect writes: part files (pyarrow's
# part-NNNNN.parquet, and the part-NNNNN-<uuid>-c000.snappy.parquet names of
# Spark's own writer, used by earlier versions), _SUCCESS, the checksums
# Spark writes beside them and temporary files (kdissect.shared.atomic's, and the
# .<name>.<hex>.tmp of earlier versions).
_OWN_TABLE_FILE = re.compile(
    r"part-\d{5}[-\w.]*\.parquet|_SUCCESS|\.(?:part-\d{5}[-\w.]*\.parquet|_SUCCESS)\.crc"
    r"|\..+\.kdissect-tmp|\.part-\d{5}\.parquet\.[0-9a-f]+(?:\.tmp)?|\._SUCCESS\.[0-9a-f]+\.tmp")
# the exchanges table's lake partitions (kdissect.spark.part_files)
_PARTITION = re.compile(r"capture_date=[\w-]+")
_MARKER_TEXT = json.dumps({
    "written_by": TOOL,
    "about": "This directory holds tables of `kdissect spark`. A later run replaces them only with "
             "--overwrite, and then removes only the files kdissect wrote.",
}, indent=2) + "\n"


def is_kdissect_outdir(path: str) -> bool:
    """The local directory holds an earlier output of the job (see `_is_earlier_output`)."""
    return _is_earlier_output(Tree(path))


def _is_earlier_output(tree: Tree) -> bool:
    """The directory holds an earlier output of the job: its marker (or the
    top markers of kdissect.shared.outdir_tree), or a manifest.json the job wrote
    (outputs from before the markers)."""
    entries = tree.entries()
    if MARKER in entries or SUCCESS in entries or RUNNING in entries:
        return True
    if MANIFEST not in entries:
        return False
    try:
        info = tree.fs.get_file_info(tree.path(MANIFEST))
        if info.size is None or info.size > 64 << 20:
            return False
        return json.loads(tree.read_bytes(MANIFEST)).get("tool") == TOOL
    except (OSError, ValueError, AttributeError):
        return False


def claim_outdir(outdir: str, inputs: ProtectedInputs, overwrite: bool, tables: Sequence[str],
                 work_dir: str, settings: stores.StoreSettings | None = None) -> str:
    """Check OUTDIR against the rule above, remove what an earlier run wrote
    (with `overwrite`), create it and write the marker; its absolute local
    path, or its URI in a store. `tables` and `work_dir` are the names the
    job writes under it."""
    tree = Tree(outdir, settings)
    if tree.remote:
        _claim_in_store(tree, outdir, inputs, overwrite, tables, work_dir)
        return tree.uri
    given = outdir
    path = tree.path()
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"{given}: exists and is not a directory")
    clash = inputs.overlapping(path)
    if clash is not None:
        raise InputError(f"OUTDIR {given} {_relation(path, clash)} the input {clash}: refusing to write there "
                         "(choose an OUTDIR apart from the inputs)")
    if os.path.isdir(path) and os.listdir(path):
        if not _is_earlier_output(tree):
            raise InputError(f"OUTDIR {given} is not empty and holds no earlier kdissect spark output: "
                             "refusing to write there, even with --overwrite (choose a new or empty directory)")
        if not overwrite:
            raise InputError(f"OUTDIR {given} holds an earlier kdissect spark output: give --overwrite to replace "
                             "its tables (files kdissect did not write are left as they are), or choose another OUTDIR")
        _remove_earlier_output(path, given, inputs, tables, work_dir)
    try:
        os.makedirs(path, exist_ok=True)
        from kdissect.shared.atomic import write_atomically

        write_atomically(os.path.join(path, MARKER), _MARKER_TEXT)
    except OSError as problem:
        raise InputError(f"cannot write {given}: {problem.strerror or problem}") from None
    return path


def _refusals(given: str, earlier: bool, overwrite: bool) -> None:
    """The rule for a non-empty OUTDIR (the same words for a local one and a store)."""
    if not earlier:
        raise InputError(f"OUTDIR {given} is not empty and holds no earlier kdissect spark output: "
                         "refusing to write there, even with --overwrite (choose a new or empty directory)")
    if not overwrite:
        raise InputError(f"OUTDIR {given} holds an earlier kdissect spark output: give --overwrite to replace "
                         "its tables (files kdissect did not write are left as they are), or choose another OUTDIR")


def _claim_in_store(tree: Tree, given: str, inputs: ProtectedInputs, overwrite: bool, tables: Sequence[str],
                    work_dir: str) -> None:
    """The rule above for an OUTDIR in a store, through the tree's listing."""
    from pyarrow.fs import FileSelector, FileType

    tree.check_store()
    shown = tree.uri
    clash = inputs.overlapping_uri(tree.uri)
    if clash is not None:
        raise InputError(f"OUTDIR {shown} is, holds or lies inside the input {clash}: refusing to write there "
                         "(choose an OUTDIR apart from the inputs)")
    if tree.fs.get_file_info(tree.path()).type == FileType.File:
        raise InputError(f"{shown}: exists and is not a directory")
    entries = tree.entries()
    if entries:
        _refusals(shown, _is_earlier_output(tree), overwrite)
        doomed: list[str] = []  # names below OUTDIR; checked whole before any is removed
        for name in (*tables, work_dir, MANIFEST, MARKER, SUCCESS, RUNNING):
            if name not in entries:
                continue
            info = tree.fs.get_file_info(tree.path(name))
            if name in (MANIFEST, MARKER, SUCCESS, RUNNING) or name == work_dir:
                doomed.append(name)  # the job's own files (a run's scratch files under work_dir)
            elif info.type != FileType.Directory:
                raise InputError(f"{shown}/{name} is not a table directory kdissect wrote: refusing to replace it "
                                 "(move it out of OUTDIR, or choose another OUTDIR)")
            else:
                below = tree.fs.get_file_info(FileSelector(tree.path(name), recursive=True))
                for item in below:
                    relative = item.path[len(tree.path(name)):].lstrip("/")
                    if item.type == FileType.Directory:
                        continue  # the exchanges table's capture_date= partitions
                    first, _, rest = relative.rpartition("/")
                    if not _OWN_TABLE_FILE.fullmatch(rest or first) or (first and not _PARTITION.fullmatch(first)):
                        raise InputError(f"{shown}/{name}/{relative} was not written by kdissect: refusing to "
                                         f"replace the {name} table beside it (move it out of OUTDIR, or choose "
                                         "another OUTDIR)")
                doomed.append(name)
        for name in doomed:
            tree.delete(name)
    try:
        tree.write_bytes(_MARKER_TEXT.encode(), MARKER)
    except InputError:
        raise
    except OSError as problem:
        raise InputError(f"cannot write {shown}: {problem}") from None


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
    partitions: list[str] = []
    for name in (*tables, work_dir, MANIFEST, MARKER, SUCCESS, RUNNING):
        entry = os.path.join(path, name)
        if not os.path.lexists(entry):
            continue
        clash = inputs.overlapping(entry)
        if clash is not None:
            raise InputError(f"{given}/{name} {_relation(entry, clash)} the input {clash}: refusing to remove it")
        if name in (MANIFEST, MARKER, SUCCESS, RUNNING):
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
                if _PARTITION.fullmatch(file) and os.path.isdir(inside) and not os.path.islink(inside):
                    # a lake partition of the exchanges table: its files are checked as the table's
                    for part in sorted(os.listdir(inside)):
                        _check_own(given, name, f"{file}/{part}", os.path.join(inside, part))
                        files.append(os.path.join(inside, part))
                    partitions.append(inside)
                    continue
                _check_own(given, name, file, inside)
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
    for partition in partitions:
        os.rmdir(partition)


def _check_own(given: str, table: str, relative: str, inside: str) -> None:
    """Refuse a file of a table directory that kdissect did not write."""
    if not _OWN_TABLE_FILE.fullmatch(os.path.basename(relative)) or os.path.isdir(inside):
        raise InputError(f"{given}/{table}/{relative} was not written by kdissect: refusing to replace the "
                         f"{table} table beside it (move it out of OUTDIR, or choose another OUTDIR)")
