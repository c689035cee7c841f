"""webhdfs:// in kdissect.wire.stores: fsspec's WebHDFS client as a pyarrow
FileSystem (HDFS's REST face: no JVM, no libhdfs on the node). Kept apart
because it needs the `webhdfs` extra (fsspec, requests); kdissect.wire.stores
turns a missing extra into its one-line error."""

from __future__ import annotations

from typing import Any


def webhdfs_file_system(host: str, port: int, user: str) -> Any:
    """A pyarrow FileSystem over the WebHDFS endpoint host:port, acting as `user`."""
    from fsspec.implementations.webhdfs import WebHDFS
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    return PyFileSystem(FSSpecHandler(WebHDFS(host, port=port, user=user, use_listings_cache=False)))
