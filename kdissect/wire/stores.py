"""Capture archives in HDFS and object stores: URIs -> pyarrow file systems.

A CAPTURE argument (or the Spark job's OUTDIR) may be a URI:

    s3://bucket/key, s3a://bucket/key   S3 or an S3-compatible server (pyarrow's S3FileSystem)
    gs://bucket/key                     Google Cloud Storage (pyarrow's GcsFileSystem)
    abfs://container@account.dfs.core.windows.net/key, abfs://container/key
                                        Azure Blob Storage / ADLS Gen2 (pyarrow's AzureFileSystem)
    hdfs://namenode:port/path           HDFS (pyarrow's HadoopFileSystem: libhdfs and a JVM)
    file:///path                        the local file system, as a plain path is

Why pyarrow.fs: it is a dependency already, its S3 client is native (the
AWS C++ SDK: no Python in the read path, ranged GETs, the standard credential
chain), and the same `FileSystem` interface covers HDFS, the local disk and
(wrapped) any fsspec file system, so the reader has one path. The Spark job
reads and writes through it from the Python tasks, so the JVM needs no
hadoop-aws jars.

Credentials and endpoints come from the usual places and never from the URI:
the AWS variables and profiles (read by the SDK itself), and the s3a settings
of a Spark or Hadoop configuration (`fs.s3a.endpoint`, `fs.s3a.access.key`,
...; see `S3Settings`), Google's default credentials (`GcsSettings`) and the
Azure storage variables (`AzureSettings`). A URI holding a user or password
is refused, so none can end up in an output, log or error; errors name the
URI as given (an abfs:// URI's `container@account` is a name, not a secret).

Reads go through `RangedFile`: a seekable file that fetches blocks with
ranged reads (S3 ranged GET, HDFS positional read) and keeps the last few
(per process), so the split finder's many small reads near one offset cost
one request, and a byte range is read once, in blocks counted from its start
and cut at its end, never the whole file.
"""

from __future__ import annotations

import os
import posixpath
import re
from _thread import allocate_lock  # (threading.Lock: the same lock, without importing threading at start)
from typing import Any, Iterator

from kdissect.failures import InputError
from kdissect.model.packet import FrozenSlotRecord
from kdissect.wire.webhdfs import webhdfs_file_system  # (imports fsspec only when called)

# schemes and the client serving them
S3_SCHEMES = ("s3", "s3a", "s3n")
GCS_SCHEMES = ("gs",)
AZURE_SCHEMES = ("abfs", "abfss")
# stores whose pyarrow paths are "bucket/key" ("container/key"), not "/dir/file"
BUCKET_SCHEMES = S3_SCHEMES + GCS_SCHEMES + AZURE_SCHEMES
HDFS_SCHEMES = ("hdfs", "viewfs")
WEBHDFS_SCHEMES = ("webhdfs",)  # HDFS's REST face: fsspec's WebHDFS (no JVM, no libhdfs on the node)
LOCAL_SCHEMES = ("file",)
SCHEMES = BUCKET_SCHEMES + HDFS_SCHEMES + WEBHDFS_SCHEMES + LOCAL_SCHEMES
# "s3://b/k" written through pathlib loses a slash ("s3:/b/k"): both are accepted
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(/+)(.*)$", re.DOTALL)
BLOCK_SIZE = 4 << 20  # bytes per ranged read from a remote store
# Bytes of blocks kept per process, least recently used dropped, shared by
# the files open on one URI (the split finder's chain checks seek back and
# forth near one offset).
KEPT_BYTES = 16 << 20
_blocks: dict[tuple[str, int, int], bytes] = {}  # (URI, offset, length) -> bytes
_kept_bytes = 0
_blocks_lock = allocate_lock()
GCS_RETRY_SECONDS = 20  # how long the GCS client retries a failing request
TAIL_BLOCK = 16 << 10  # bytes per ranged read outside a byte range (its last record's rest, the file's header)


# (the records below are FrozenSlotRecords, not frozen dataclasses: capture.py
# imports this module on every run, and the dataclasses module costs a
# start-up more than all of this one)


class Location(FrozenSlotRecord):
    """A parsed URI: scheme, authority (bucket or namenode) and path in the store."""

    __slots__ = ("scheme", "authority", "path")
    scheme: str
    authority: str
    # as the pyarrow file system names it: "bucket/key" for S3 and GCS,
    # "container/key" for Azure, "/dir/file" for HDFS and local
    path: str

    def __init__(self, scheme: str, authority: str, path: str) -> None:
        self._set_fields(scheme, authority, path)

    @property
    def uri(self) -> str:
        if self.scheme in LOCAL_SCHEMES:
            return f"file://{self.path}"
        if self.scheme in AZURE_SCHEMES:  # the authority may name the account: container@account...
            return f"{self.scheme}://{self.authority}{self.path[len(self.container):]}"
        if self.scheme in BUCKET_SCHEMES:
            return f"{self.scheme}://{self.path}"
        return f"{self.scheme}://{self.authority}{self.path}"

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    @property
    def container(self) -> str:
        """The bucket or container (the path's first part) of a bucket store."""
        return self.path.split("/", 1)[0]

    @property
    def account(self) -> str | None:
        """The Azure storage account an abfs:// URI names (container@ACCOUNT.dfs...), if it names one."""
        _, at, host = self.authority.partition("@")
        return host.split(".", 1)[0] or None if at else None

    def child(self, store_path: str) -> Location:
        """The location of `store_path` (a path as the file system lists it) in this store."""
        return Location(self.scheme, self.authority, store_path)


def is_uri(text: str) -> bool:
    """True for a store URI kdissect handles (a plain path is not one)."""
    match = _URI.match(str(text))
    return match is not None and match.group(1).lower() in SCHEMES


def parse(text: str) -> Location:
    """The Location of a URI; InputError for an unknown scheme or embedded credentials."""
    match = _URI.match(str(text))
    if not match:
        raise InputError(f"{text}: not a URI")
    scheme, rest = match.group(1).lower(), match.group(3)
    if scheme not in SCHEMES:
        raise InputError(f"{scheme}://: unsupported store "
                         f"(kdissect reads s3://, s3a://, gs://, abfs://, hdfs://, webhdfs://, file://)")
    if scheme in LOCAL_SCHEMES:
        return Location(scheme, "", "/" + rest)
    authority, _, path = rest.partition("/")
    if scheme in AZURE_SCHEMES and "@" in authority and ":" not in authority.rsplit("@", 1)[0]:
        # abfs://container@account.dfs.core.windows.net/key: a container and an account, no secret
        container = authority.split("@", 1)[0]
        if not container:
            raise InputError(f"{text}: no container in the URI")
        return Location(scheme, authority, f"{container}/{path}".rstrip("/") if path else container)
    if "@" in authority:
        # never keep (or print) what may be a secret: name the store without it
        raise InputError(f"{scheme}://{authority.rsplit('@', 1)[1]}/{path}: credentials in a URI are refused "
                         f"(see the README's lake section for where each store's credentials are read)")
    if not authority:
        raise InputError(f"{text}: no bucket or namenode in the URI")
    if scheme in BUCKET_SCHEMES:
        return Location(scheme, authority, f"{authority}/{path}".rstrip("/") if path else authority)
    return Location(scheme, authority, "/" + path)


# -- settings ------------------------------------------------------------------------------


def _fs_keys(conf: dict[str, str]) -> dict[str, str]:
    """A configuration's keys without Spark's `spark.hadoop.` prefix, values stripped."""
    return {key.removeprefix("spark.hadoop."): value.strip() for key, value in conf.items()}


class S3Settings(FrozenSlotRecord):
    """How to reach S3: a Hadoop/Spark configuration's fs.s3a.* keys, else
    the AWS variables (AWS_ENDPOINT_URL[_S3], AWS_REGION, AWS_ACCESS_KEY_ID,
    ...), else the AWS SDK's own chain (profiles, instance roles) on each
    node. `repr` hides the keys."""

    __slots__ = ("endpoint", "region", "access_key", "secret_key", "session_token", "path_style")
    endpoint: str | None
    region: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    path_style: bool | None

    def __init__(self, endpoint: str | None = None, region: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, session_token: str | None = None,
                 path_style: bool | None = None) -> None:
        self._set_fields(endpoint, region, access_key, secret_key, session_token, path_style)

    def __repr__(self) -> str:  # the keys never
        return f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, path_style={self.path_style!r})"

    @classmethod
    def from_conf(cls, conf: dict[str, str]) -> S3Settings:
        """From fs.s3a.* keys (a `spark.hadoop.` prefix is dropped)."""
        keys = _fs_keys(conf)

        def get(name: str) -> str | None:
            return keys.get(f"fs.s3a.{name}") or None

        def env(*names: str) -> str | None:
            return next((os.environ[name] for name in names if os.environ.get(name)), None)

        path_style = get("path.style.access")
        access_key, secret_key = get("access.key"), get("secret.key")
        session_token = get("session.token")
        if not (access_key and secret_key):
            # as spark-submit does: the driver's AWS variables stand in for
            # unset fs.s3a keys (profiles and instance roles are left to the SDK)
            access_key, secret_key = env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")
            session_token = env("AWS_SESSION_TOKEN")
        return cls(endpoint=get("endpoint") or env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
                   region=get("endpoint.region") or get("region") or env("AWS_REGION", "AWS_DEFAULT_REGION"),
                   access_key=access_key, secret_key=secret_key, session_token=session_token,
                   path_style=None if path_style is None else path_style.lower() == "true")

    def pyarrow_options(self) -> dict[str, Any]:
        endpoint = self.endpoint
        options: dict[str, Any] = {}
        if endpoint:
            scheme, _, host = endpoint.rpartition("://")
            options["endpoint_override"] = host.rstrip("/")
            options["scheme"] = scheme or "https"
            # a custom endpoint is almost always path-style (MinIO, SeaweedFS, Ceph)
            options["force_virtual_addressing"] = self.path_style is False
        options["region"] = self.region or "us-east-1"
        if self.access_key and self.secret_key:
            options["access_key"] = self.access_key
            options["secret_key"] = self.secret_key
            if self.session_token:
                options["session_token"] = self.session_token
        return options


def _endpoint_parts(endpoint: str) -> tuple[str, str]:
    """("http", "host:port") of "http://host:port/" (https when no scheme is given)."""
    scheme, _, host = endpoint.rpartition("://")
    return scheme or "https", host.rstrip("/")


class GcsSettings(FrozenSlotRecord):
    """How to reach Google Cloud Storage. Credentials are never carried: each
    node's GcsFileSystem finds Google's default credentials itself
    (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default login, the
    metadata server). `endpoint`: an emulator's URL (fs.gs.storage.root.url,
    else $STORAGE_EMULATOR_HOST, the variable Google's clients read), which
    is reached anonymously, as the clients do; `anonymous` also for
    fs.gs.auth.type=UNAUTHENTICATED (public buckets)."""

    __slots__ = ("endpoint", "anonymous", "project_id")
    endpoint: str | None
    anonymous: bool
    project_id: str | None

    def __init__(self, endpoint: str | None = None, anonymous: bool = False, project_id: str | None = None) -> None:
        self._set_fields(endpoint, anonymous, project_id)

    @classmethod
    def from_conf(cls, conf: dict[str, str]) -> GcsSettings:
        """From fs.gs.* keys (the GCS connector's names) and the environment."""
        keys = _fs_keys(conf)
        endpoint = keys.get("fs.gs.storage.root.url") or os.environ.get("STORAGE_EMULATOR_HOST") or None
        anonymous = bool(endpoint) or keys.get("fs.gs.auth.type", "").upper() == "UNAUTHENTICATED"
        project = keys.get("fs.gs.project.id") or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
        return cls(endpoint, anonymous, project)

    def pyarrow_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"anonymous": self.anonymous}
        if self.endpoint:
            options["scheme"], options["endpoint_override"] = _endpoint_parts(self.endpoint)
        if self.project_id:
            options["project_id"] = self.project_id
        return options


class AzureSettings(FrozenSlotRecord):
    """How to reach Azure Blob Storage / ADLS Gen2: the account
    ($AZURE_STORAGE_ACCOUNT_NAME, unless the URI names one), its key
    ($AZURE_STORAGE_ACCOUNT_KEY or fs.azure.account.key.ACCOUNT.dfs.core.windows.net;
    handed only to that account), else Azure's default credential chain
    (environment service principal, managed identity, az login) on each node.
    `endpoint`: an emulator's URL, e.g. Azurite's http://127.0.0.1:10000
    ($AZURE_STORAGE_ENDPOINT). `repr` hides the key."""

    __slots__ = ("account_name", "account_key", "endpoint")
    account_name: str | None
    account_key: str | None
    endpoint: str | None

    def __init__(self, account_name: str | None = None, account_key: str | None = None,
                 endpoint: str | None = None) -> None:
        self._set_fields(account_name, account_key, endpoint)

    def __repr__(self) -> str:  # the key never
        return f"AzureSettings(account_name={self.account_name!r}, endpoint={self.endpoint!r})"

    @classmethod
    def from_conf(cls, conf: dict[str, str]) -> AzureSettings:
        keys = _fs_keys(conf)
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME") or os.environ.get("AZURE_STORAGE_ACCOUNT") or None
        key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_KEY") or None
        if account and not key:
            key = keys.get(f"fs.azure.account.key.{account}.dfs.core.windows.net") \
                or keys.get(f"fs.azure.account.key.{account}.blob.core.windows.net") or None
        return cls(account, key, os.environ.get("AZURE_STORAGE_ENDPOINT") or None)

    def pyarrow_options(self, account: str | None) -> dict[str, Any]:
        """Options for the account `account` (None: the configured one)."""
        name = account or self.account_name
        if not name:
            raise InputError("abfs://: no storage account (name it in the URI, container@ACCOUNT.dfs.core.windows.net, "
                             "or set AZURE_STORAGE_ACCOUNT_NAME)")
        options: dict[str, Any] = {"account_name": name}
        if self.account_key and name == self.account_name:
            import binascii
            from base64 import b64decode

            try:  # checked here: the SDK's own complaint comes as an untyped error at the first request
                b64decode(self.account_key, validate=True)
            except (binascii.Error, ValueError):
                raise InputError(f"abfs://: the account key of {name} is not base64 "
                                 "(AZURE_STORAGE_ACCOUNT_KEY or fs.azure.account.key.*)") from None
            options["account_key"] = self.account_key
        if self.endpoint:
            # an emulator (Azurite) serves both APIs on one address, the account in the path
            scheme, host = _endpoint_parts(self.endpoint)
            options.update(blob_storage_authority=host, dfs_storage_authority=host,
                           blob_storage_scheme=scheme, dfs_storage_scheme=scheme)
        return options


def hadoop_conf() -> dict[str, str]:
    """fs.* settings of the Hadoop configuration ($HADOOP_CONF_DIR/core-site.xml)
    and of Spark's defaults ($SPARK_CONF_DIR/spark-defaults.conf, spark.hadoop.*)."""
    found: dict[str, str] = {}
    conf_dir = os.environ.get("HADOOP_CONF_DIR") or (
        os.path.join(os.environ["HADOOP_HOME"], "etc", "hadoop") if os.environ.get("HADOOP_HOME") else None)
    if conf_dir and os.path.isfile(os.path.join(conf_dir, "core-site.xml")):
        import xml.etree.ElementTree as ElementTree  # here: capture.py imports this module on every run

        try:
            root = ElementTree.parse(os.path.join(conf_dir, "core-site.xml")).getroot()
            for prop in root.iter("property"):
                name, value = prop.findtext("name"), prop.findtext("value")
                if name and value is not None and name.startswith("fs."):
                    found[name.strip()] = value.strip()
        except (OSError, ElementTree.ParseError):
            pass
    spark_dir = os.environ.get("SPARK_CONF_DIR")
    if spark_dir and os.path.isfile(os.path.join(spark_dir, "spark-defaults.conf")):
        with open(os.path.join(spark_dir, "spark-defaults.conf"), encoding="utf-8", errors="replace") as lines:
            for line in lines:
                parts = line.strip().split(None, 1)
                if len(parts) == 2 and parts[0].startswith("spark.hadoop.fs."):
                    found[parts[0].removeprefix("spark.hadoop.")] = parts[1]
    return found


class StoreSettings(FrozenSlotRecord):
    """What the driver hands the tasks (in their closure) to reach the stores."""

    __slots__ = ("s3", "hadoop_user", "gcs", "azure")
    s3: S3Settings
    # the HDFS user of WebHDFS requests (simple authentication): the driver's
    # $HADOOP_USER_NAME, as Hadoop clients take it; None: each process's own user
    hadoop_user: str | None
    gcs: GcsSettings
    azure: AzureSettings

    def __init__(self, s3: S3Settings | None = None, hadoop_user: str | None = None,
                 gcs: GcsSettings | None = None, azure: AzureSettings | None = None) -> None:
        self._set_fields(S3Settings() if s3 is None else s3, hadoop_user,
                         GcsSettings() if gcs is None else gcs, AzureSettings() if azure is None else azure)

    @classmethod
    def from_conf(cls, conf: dict[str, str] | None = None) -> StoreSettings:
        merged = hadoop_conf()
        merged.update({key.removeprefix("spark.hadoop."): value for key, value in (conf or {}).items()
                       if key.startswith(("spark.hadoop.fs.", "fs."))})
        return cls(S3Settings.from_conf(merged), os.environ.get("HADOOP_USER_NAME") or None,
                   GcsSettings.from_conf(merged), AzureSettings.from_conf(merged))


_settings: StoreSettings | None = None  # None: from this process's configuration, on first use
_clients: dict[tuple, Any] = {}
_lock = allocate_lock()


def configure(settings: StoreSettings) -> None:
    """Use `settings` for the stores opened from now on in this process."""
    global _settings, _kept_bytes
    with _lock:
        _settings = settings
        _clients.clear()
        _known_sizes.clear()
        _blocks.clear()
        _kept_bytes = 0
        for name in list(_heads):
            _forget_head(name)


def configure_once(settings: StoreSettings) -> None:
    """configure(), unless these settings are in use already (a task's start:
    the clients of a long-lived Python worker are kept)."""
    if _settings is not settings and _settings != settings:
        configure(settings)


def settings() -> StoreSettings:
    global _settings
    if _settings is None:
        _settings = StoreSettings.from_conf()
    return _settings


def file_system(location: Location) -> Any:
    """The pyarrow FileSystem serving `location` (one per store and process)."""
    from pyarrow import fs

    if location.scheme in LOCAL_SCHEMES:
        return fs.LocalFileSystem()
    current = settings()
    # one client per S3 or GCS (any bucket), per Azure account, per namenode
    if location.scheme in AZURE_SCHEMES:
        store = location.account or ""
    else:
        store = "" if location.scheme in BUCKET_SCHEMES else location.authority
    key = (location.scheme, store, current)
    with _lock:
        client = _clients.get(key)
        if client is None:
            if location.scheme in S3_SCHEMES:
                client = fs.S3FileSystem(**current.s3.pyarrow_options())
            elif location.scheme in GCS_SCHEMES:
                from datetime import timedelta

                # google-cloud-cpp retries a refused connection for 15 minutes by default
                client = _client(location, fs.GcsFileSystem, {**current.gcs.pyarrow_options(),
                                                              "retry_time_limit": timedelta(seconds=GCS_RETRY_SECONDS)})
            elif location.scheme in AZURE_SCHEMES:
                client = _client(location, fs.AzureFileSystem, current.azure.pyarrow_options(location.account))
            elif location.scheme in WEBHDFS_SCHEMES:
                client = _webhdfs(location)
            else:
                client = _hdfs(location)
            _clients[key] = client
    return client


def _client(location: Location, factory: Any, options: dict[str, Any]) -> Any:
    """factory(**options); one line (no key, no SDK text) if the client cannot be made."""
    try:
        return factory(**options)
    except (OSError, RuntimeError, ValueError, TypeError) as problem:
        raise store_error(location.uri, problem) from None


def _hdfs(location: Location) -> Any:
    """pyarrow's HadoopFileSystem (libhdfs, which starts a JVM in this process)."""
    from pyarrow import fs

    if not os.environ.get("CLASSPATH") and not os.environ.get("HADOOP_HOME"):
        # checked here: libhdfs would print its own lines to stderr before failing
        raise InputError(f"{location.uri}: hdfs:// needs Hadoop's client jars on CLASSPATH "
                         "(CLASSPATH=$(hadoop classpath --glob)) or HADOOP_HOME")
    host, _, port = location.authority.partition(":")
    # the driver's $HADOOP_USER_NAME, handed to the tasks (simple authentication)
    user = settings().hadoop_user or os.environ.get("HADOOP_USER_NAME")
    try:
        return fs.HadoopFileSystem(host, int(port or 8020), **({"user": user} if user else {}))
    except (OSError, RuntimeError) as problem:
        if "libjvm" in str(problem):
            raise InputError(f"{location.uri}: hdfs:// needs a Java runtime (JAVA_HOME: libjvm not found)") from None
        if "libhdfs" in str(problem):
            raise InputError(f"{location.uri}: hdfs:// needs libhdfs.so (in $ARROW_LIBHDFS_DIR or "
                             "$HADOOP_HOME/lib/native)") from None
        raise InputError(f"{location.uri}: cannot reach HDFS ({_first_line(problem)})") from None


def _webhdfs(location: Location) -> Any:
    """fsspec's WebHDFS client as a pyarrow FileSystem (user: $HADOOP_USER_NAME, else this process's)."""
    import getpass
    import importlib.util

    if importlib.util.find_spec("fsspec") is None or importlib.util.find_spec("requests") is None:
        raise InputError(f"{location.uri}: webhdfs:// needs fsspec and requests (pip install 'kdissect[webhdfs]')")
    host, _, port = location.authority.partition(":")
    user = settings().hadoop_user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    return webhdfs_file_system(host, int(port or 9870), user)


# -- errors ---------------------------------------------------------------------------------


def _first_line(problem: BaseException) -> str:
    text = str(problem).strip().splitlines()
    line = text[0] if text else type(problem).__name__
    # the SDK's messages never hold the secret, but may hold a signature or the key id
    line = re.sub(r"(?i)(signature|credential|access.?key(?:.?id)?|account.?key|secret[^=:\s]*|sig)\s*[=:]\s*[^\s&]+",
                  r"\1=…", line)
    line = re.sub(r"(?i)(sharedkey(?:lite)?)\s+\S+", r"\1 …", line)  # an Azure Authorization header's value
    return line[:240]


def store_error(uri: str, problem: BaseException) -> InputError:
    """One line naming the URI for a failed store operation (the store's own
    message is not repeated: it may name the key id or a signature)."""
    lowered = str(problem).lower()
    if "invalidaccesskeyid" in lowered or "signaturedoesnotmatch" in lowered or "invalid_access_key" in lowered \
            or "signature_does_not_match" in lowered or "credentials" in lowered \
            or "failed to authenticate" in lowered or "authenticationfailed" in lowered:
        reason = "the store refused the credentials"
    elif "accessdenied" in lowered or "access_denied" in lowered or "access denied" in lowered \
            or "forbidden" in lowered or "permission denied" in lowered or isinstance(problem, PermissionError):
        # an S3 HEAD answer has no body: a refused key and a missing
        # permission both come back as a bare 403
        reason = "access denied (no permission, or the credentials were refused)"
    elif isinstance(problem, FileNotFoundError) or "nosuchbucket" in lowered or "no_such_bucket" in lowered \
            or "nosuchkey" in lowered or "not found" in lowered or "does not exist" in lowered:
        reason = "no such file, directory or bucket"
    elif "curl" in lowered or "connect" in lowered or "resolve" in lowered or "timeout" in lowered \
            or "timed out" in lowered or "unreachable" in lowered or "network" in lowered:
        reason = "cannot reach the store"
    else:
        reason = _first_line(problem)
    return InputError(f"{uri}: {reason}")


# -- reading ---------------------------------------------------------------------------------


def file_info(uri: str) -> Any:
    """The pyarrow FileInfo of `uri` (type NotFound if absent); InputError if the store fails."""
    location = parse(uri)
    client = file_system(location)
    try:
        return client.get_file_info(location.path)
    except (OSError, RuntimeError, ValueError) as problem:
        raise store_error(location.uri, problem) from None


# What the driver learns of many small files, kept so that each costs one
# listing entry and one ranged GET, not a HEAD and a GET per look (the format
# check, the first packet, the size): sizes from listings, and the first
# HEAD_BYTES of files whose heads were read. Keyed by canonical URI; an entry
# whose listed size changed is dropped. Bounded (HEAD_CACHE_BYTES).
HEAD_BYTES = 64 << 10
HEAD_CACHE_BYTES = 64 << 20
_known_sizes: dict[str, int] = {}
_heads: dict[str, bytes] = {}
_head_bytes = 0


def _remember_size(uri: str, file_size: int) -> None:
    if _known_sizes.get(uri, file_size) != file_size:
        _forget_head(uri)
    _known_sizes[uri] = file_size


def _forget_head(uri: str) -> None:
    global _head_bytes
    head = _heads.pop(uri, None)
    if head is not None:
        _head_bytes -= len(head)


def _remember_head(uri: str, head: bytes) -> None:
    global _head_bytes
    with _blocks_lock:  # heads may be fetched by several threads (prefetch_heads)
        _forget_head(uri)
        while _heads and _head_bytes + len(head) > HEAD_CACHE_BYTES:
            _forget_head(next(iter(_heads)))
        _heads[uri] = head
        _head_bytes += len(head)


def size(uri: str) -> int:
    known = _known_sizes.get(parse(uri).uri)
    if known is not None:
        return known
    info = file_info(uri)
    from pyarrow.fs import FileType

    if info.type != FileType.File:
        raise InputError(f"{parse(uri).uri}: no such file")
    _remember_size(parse(uri).uri, int(info.size))
    return int(info.size)


def any_size(path: str) -> int:
    """Size of a local path or a store URI."""
    return size(path) if is_uri(str(path)) else os.path.getsize(path)


class RangedFile:
    """A read-only, seekable file of a store read in aligned blocks (see the module comment)."""

    def __init__(self, uri: str, file_size: int | None = None, block_size: int | None = None,
                 origin: int = 0, until: int | None = None) -> None:
        """`origin` and `until`: a byte range read from `origin` on (blocks
        counted from there, so a range's first block holds no bytes before
        it), whose last block stops at `until`; outside the range (the last
        record running over its end, the file's header) blocks of TAIL_BLOCK bytes."""
        self.origin = origin
        self.until = until
        self.location = parse(uri)
        self.name = self.location.uri
        self._client = file_system(self.location)
        self._handle: Any = None
        if file_size is None:
            file_size = _known_sizes.get(self.name)
        if file_size is None:
            from pyarrow.fs import FileType

            try:
                info = self._client.get_file_info(self.location.path)
            except (OSError, RuntimeError, ValueError) as problem:
                raise store_error(self.name, problem) from None
            if info.type == FileType.NotFound:
                raise InputError(f"{self.name}: no such file")
            if info.type != FileType.File:
                raise InputError(f"{self.name}: is a directory, not a capture file")
            file_size = int(info.size)
            _remember_size(self.name, file_size)
        self.size = file_size
        self.block_size = block_size or BLOCK_SIZE
        head = _heads.get(self.name)
        self._whole = head if head is not None and len(head) == self.size else None  # a small file, read already
        self.position = 0
        self.bytes_fetched = 0

    def _span(self, position: int) -> tuple[int, int]:
        """(offset, length) of the block holding `position`."""
        until = self.until
        if until is not None and position >= until:
            start = until + (position - until) // TAIL_BLOCK * TAIL_BLOCK
            return start, min(TAIL_BLOCK, self.size - start)
        if position < self.origin:  # before the range (a look at the file's head): small blocks
            start = position // TAIL_BLOCK * TAIL_BLOCK
            return start, min(TAIL_BLOCK, self.origin - start, self.size - start)
        start = self.origin + (position - self.origin) // self.block_size * self.block_size
        end = start + self.block_size
        if until is not None and start < until < end:
            end = until
        return start, min(end, self.size) - start

    def _block(self, start: int, length: int) -> bytes:
        global _kept_bytes
        key = (self.name, start, length)
        with _blocks_lock:
            block = _blocks.pop(key, None)
            if block is not None:
                _blocks[key] = block  # most recently used last
        if block is None:
            try:
                if self._handle is None:  # opened on the first read (pyarrow asks the store for the size)
                    self._handle = self._client.open_input_file(self.location.path)
                block = self._handle.read_at(length, start)
            except (OSError, RuntimeError, ValueError) as problem:
                raise store_error(self.location.uri, problem) from None
            self.bytes_fetched += len(block)
            with _blocks_lock:
                while _blocks and _kept_bytes + len(block) > KEPT_BYTES:
                    _kept_bytes -= len(_blocks.pop(next(iter(_blocks))))
                _blocks[key] = block
                _kept_bytes += len(block)
        return block

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.position
        n = max(0, min(n, self.size - self.position))
        if self._whole is not None:
            piece = self._whole[self.position:self.position + n]
            self.position += len(piece)
            return piece
        head = _heads.get(self.name)
        if head is not None and self.position + n <= len(head):  # inside the head the driver read already
            piece = head[self.position:self.position + n]
            self.position += len(piece)
            return piece
        pieces: list[bytes] = []
        while n > 0:
            start, length = self._span(self.position)
            block = self._block(start, length)
            offset = self.position - start
            piece = block[offset:offset + n]
            if not piece:
                break
            pieces.append(piece)
            self.position += len(piece)
            n -= len(piece)
        return b"".join(pieces) if len(pieces) != 1 else pieces[0]

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> RangedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(uri: str, file_size: int | None = None, origin: int = 0, until: int | None = None) -> RangedFile:
    return RangedFile(uri, file_size, origin=origin, until=until)


def prefetch_heads(uris: list[str], threads: int = 16) -> None:
    """Fetch the heads of many files at once (a store's latency, not its
    bandwidth, bounds one file after another); errors are left for the
    reads that follow, which report them."""
    from concurrent.futures import ThreadPoolExecutor

    def fetch(uri: str) -> None:
        try:
            read_head(uri, HEAD_BYTES)
        except (InputError, OSError):
            pass

    if len(uris) > 1:
        with ThreadPoolExecutor(min(threads, len(uris))) as pool:
            list(pool.map(fetch, uris))


def read_head(uri: str, count: int) -> bytes:
    """The first `count` bytes of a file: one ranged read of up to HEAD_BYTES,
    kept for the driver's next looks at the same file."""
    name = parse(uri).uri
    head = _heads.get(name)
    if head is None or (len(head) < count and len(head) < _known_sizes.get(name, len(head) + 1)):
        with RangedFile(uri, block_size=max(count, HEAD_BYTES)) as handle:
            head = handle.read(handle.block_size)
        _remember_head(name, head)
    return head[:count]


# -- listing ---------------------------------------------------------------------------------


def list_files(uri: str) -> list[tuple[str, int]]:
    """(URI, size) of the files `uri` names: the file itself, every file under
    a directory (or key prefix), or the files matching a glob (*, ?, [...] in
    the path; ** crosses directories), listed with the store's own listing."""
    from pyarrow.fs import FileSelector, FileType

    location = parse(uri)
    client = file_system(location)
    path = location.path
    magic = re.search(r"[*?\[]", path)
    try:
        if magic is None:
            info = client.get_file_info(path)
            if info.type == FileType.File:
                _remember_size(location.child(info.path).uri, int(info.size))
                return [(location.child(info.path).uri, int(info.size))]
            if info.type == FileType.NotFound:
                if location.scheme in BUCKET_SCHEMES and \
                        client.get_file_info(location.container).type == FileType.NotFound:
                    what = "container" if location.scheme in AZURE_SCHEMES else "bucket"
                    raise InputError(f"{location.uri}: no such {what}")
                raise InputError(f"{location.uri}: no such file or directory")
            infos = client.get_file_info(FileSelector(path, recursive=True))
            listed = sorted((location.child(i.path).uri, int(i.size)) for i in infos if i.type == FileType.File)
            for name, file_size in listed:
                _remember_size(name, file_size)
            return listed
        base = path[:magic.start()].rsplit("/", 1)[0]
        pattern = _glob_regex(path)
        infos = client.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
    except InputError:
        raise
    except (OSError, RuntimeError, ValueError) as problem:
        raise store_error(location.uri, problem) from None
    matched = [i for i in infos if pattern.fullmatch(i.path)]
    if not matched:
        raise InputError(f"{location.uri}: no file matches")
    for info in infos:
        if info.type == FileType.File:
            _remember_size(location.child(info.path).uri, int(info.size))
    found: set[tuple[str, int]] = set()
    for info in matched:
        if info.type == FileType.File:
            found.add((location.child(info.path).uri, int(info.size)))
        elif info.type == FileType.Directory:
            prefix = info.path.rstrip("/") + "/"
            found.update((location.child(i.path).uri, int(i.size)) for i in infos
                         if i.type == FileType.File and i.path.startswith(prefix))
    return sorted(found)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over store paths: * and ? stay within a directory, ** crosses them."""
    out = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            close = pattern.find("]", index + 2)
            if close < 0:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1:close]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
                index = close
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out), re.DOTALL)
