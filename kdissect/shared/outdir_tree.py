"""OUTDIR as a tree of files in any store: a local path, file://, s3://, gs://, abfs://, hdfs://.

The driver and the tasks write the tables, the manifest and their work files
through a `Tree`, never with plain file operations, so OUTDIR may be a
bucket or an HDFS directory no node mounts. A Tree pickles as its root and
the store settings (kdissect.wire.stores), so a task gets it in its closure and
opens its own client.

Every file is written under a temporary name beside its final one and
moved into place when complete (a rename on local disks, HDFS and Azure
with a hierarchical namespace; a server-side copy on S3, GCS and flat Azure
Blob storage), so no reader ever sees a half-written file.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from typing import Any, Iterator

from kdissect.wire import stores
from kdissect.failures import InputError


class Tree:
    """A directory in a file system or a store; paths below it are relative, '/'-separated."""

    def __init__(self, root: str, settings: stores.StoreSettings | None = None) -> None:
        if stores.is_uri(root):
            location = stores.parse(root)
            self.uri = location.uri.rstrip("/")
            self.remote = location.scheme not in stores.LOCAL_SCHEMES
            self._base = location.path.rstrip("/") or "/"
        else:
            self._base = os.path.abspath(root)
            self.uri = self._base
            self.remote = False
        self.settings = settings if settings is not None else stores.settings()
        self._fs: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "remote": self.remote, "_base": self._base, "settings": self.settings, "_fs": None}

    def __repr__(self) -> str:
        return f"Tree({self.uri!r})"

    @property
    def fs(self) -> Any:
        if self._fs is None:
            if self.remote:
                stores.configure_once(self.settings)
                self._fs = stores.file_system(stores.parse(self.uri))
            else:
                from pyarrow.fs import LocalFileSystem

                self._fs = LocalFileSystem()
        return self._fs

    def sub(self, *parts: str) -> Tree:
        """The tree below `parts`."""
        child = Tree.__new__(Tree)
        child.__dict__.update(self.__getstate__())
        child.uri = posixpath.join(self.uri, *parts)
        child._base = posixpath.join(self._base, *parts)
        return child

    def path(self, *parts: str) -> str:
        """The file system path of `parts` (as the pyarrow FileSystem names it)."""
        return posixpath.join(self._base, *parts)

    def uri_of(self, *parts: str) -> str:
        """What to show (and what Spark reads): a URI, or a local path."""
        return posixpath.join(self.uri, *parts)

    def _error(self, problem: BaseException) -> InputError:
        return stores.store_error(self.uri, problem)

    # -- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def output(self, *parts: str) -> Iterator[Any]:
        """A stream to write `parts` with; the file appears whole when the block ends, or not at all."""
        final = self.path(*parts)
        directory, name = posixpath.split(final)
        temporary = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            self.fs.create_dir(directory, recursive=True)
            stream = self.fs.open_output_stream(temporary)
        except OSError as problem:
            raise self._error(problem) from None
        try:
            try:
                yield stream
            finally:
                stream.close()
            self._rename(temporary, final)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(temporary)
            raise

    def write_bytes(self, data: bytes, *parts: str) -> None:
        with self.output(*parts) as stream:
            stream.write(data)

    def move(self, source: str, target: str) -> None:
        """Rename the file `source` to `target` (both below the root)."""
        try:
            self._rename(self.path(source), self.path(target))
        except OSError as problem:
            raise self._error(problem) from None

    def _rename(self, source: str, target: str) -> None:
        """Move a file; where the store has no rename (Azure Blob storage without a
        hierarchical namespace), a server-side copy, then the source deleted."""
        try:
            self.fs.move(source, target)
        except NotImplementedError:  # (pyarrow's ArrowNotImplementedError)
            self.fs.copy_file(source, target)
            self.fs.delete_file(source)

    def delete(self, *parts: str) -> None:
        """Remove the file or directory `parts`, if there is one."""
        from pyarrow.fs import FileType

        target = self.path(*parts)
        try:
            info = self.fs.get_file_info(target)
            if info.type == FileType.Directory:
                self.fs.delete_dir(target)
            elif info.type == FileType.File:
                self.fs.delete_file(target)
        except OSError as problem:
            raise self._error(problem) from None

    def check_store(self) -> None:
        """InputError unless the store answers and its bucket (S3, GCS), container (Azure) or root (HDFS) exists."""
        from pyarrow.fs import FileType

        scheme = stores.parse(self.uri).scheme if stores.is_uri(self.uri) else "file"
        top = self._base.split("/", 1)[0] if scheme in stores.BUCKET_SCHEMES else "/"
        try:
            info = self.fs.get_file_info(top)
        except OSError as problem:
            raise self._error(problem) from None
        if info.type == FileType.NotFound:
            raise InputError(f"{self.uri}: no such {'container' if scheme in stores.AZURE_SCHEMES else 'bucket'}")

    # -- reading -------------------------------------------------------------------------

    def exists(self, *parts: str) -> bool:
        from pyarrow.fs import FileType

        return self.fs.get_file_info(self.path(*parts)).type != FileType.NotFound

    def read_bytes(self, *parts: str) -> bytes:
        with self.fs.open_input_stream(self.path(*parts)) as stream:
            return stream.read()

    def open_input(self, *parts: str) -> Any:
        return self.fs.open_input_file(self.path(*parts))

    def files(self, *parts: str, suffix: str = "", prefix: str = "") -> list[str]:
        """Names (relative to `parts`, sorted) of the files below it ending with
        `suffix` whose own name starts with `prefix`; temporaries and markers left out."""
        from pyarrow.fs import FileSelector, FileType

        base = self.path(*parts)
        infos = self.fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
        found = []
        for info in infos:
            name = posixpath.basename(info.path)
            if info.type == FileType.File and name.endswith(suffix) and name.startswith(prefix) \
                    and not name.startswith((".", "_")):
                found.append(posixpath.relpath(info.path, base))
        return sorted(found)

    def entries(self) -> list[str]:
        """Names directly under the root (an empty list if it does not exist)."""
        from pyarrow.fs import FileSelector

        try:
            infos = self.fs.get_file_info(FileSelector(self._base, recursive=False, allow_not_found=True))
        except OSError as problem:
            raise self._error(problem) from None
        return sorted(posixpath.basename(info.path.rstrip("/")) for info in infos)


def as_tree(where: Tree | str | os.PathLike) -> Tree:
    """`where` as a Tree (a path or URI is rooted there)."""
    return where if isinstance(where, Tree) else Tree(os.fspath(where))


SUCCESS = "_SUCCESS"  # written last: the output is complete
RUNNING = "_KDISSECT_RUNNING"  # written first, removed last: a job writes (or died writing) here
