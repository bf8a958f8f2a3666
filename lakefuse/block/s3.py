"""The ``s3`` block adapter: objects under ``s3://bucket/prefix`` on AWS or any S3-compatible
endpoint, through boto3.  The only module that imports boto3/botocore/s3transfer.

Owns: building the client from ``config.S3Config`` (endpoint URL, region, static keys, else the
standard AWS credential chain; botocore "standard" retries with backoff on throttling and 5xx,
``max_attempts`` from the config), multipart uploads through s3transfer for objects above
``TransferSettings.multipart_threshold`` (memory bounded by part size x concurrency), streamed
downloads that resume with a ranged ``If-Match`` request when the body breaks off (our own
bounded retry: botocore retries requests, not reading a body), and the translation of
botocore errors: 404/NoSuchKey -> ``ObjectNotFound``, everything else -> ``StorageError`` with a
one-line message.
"""

from __future__ import annotations

import email.utils
import io
import os
import threading
import time
from contextlib import contextmanager
from typing import BinaryIO, Iterator

import boto3
import botocore.config
import botocore.exceptions
from botocore.exceptions import BotoCoreError, ClientError
from s3transfer.manager import TransferConfig as S3TransferConfig
from s3transfer.manager import TransferManager

from lakefuse.block.base import BlockAdapter, ObjectStat, TransferSettings, check_key, check_prefix
from lakefuse.block.local import write_file_atomically
from lakefuse.config import S3Config
from lakefuse.errors import ConfigError, InvalidArgument, LakefuseError, ObjectNotFound, StorageError

MAX_KEY_BYTES = 1024
BODY_READ_ATTEMPTS = 4  # reading a response body (or resuming it) this many times at most
DOWNLOAD_CHUNK_BYTES = 1024 * 1024
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_BODY_ERRORS = tuple(
    cls
    for cls in (
        getattr(botocore.exceptions, "ReadTimeoutError", None),
        getattr(botocore.exceptions, "ResponseStreamingError", None),
        getattr(botocore.exceptions, "IncompleteReadError", None),
        getattr(botocore.exceptions, "ConnectionClosedError", None),
    )
    if cls is not None
)


_session_lock = threading.Lock()
_session: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    """One boto3 session per process: it caches the service model, making each new client
    (one per adapter) cheap.  Credentials are passed per client, else the AWS chain is used."""
    global _session
    if _session is None:
        _session = boto3.session.Session()
    return _session


def make_s3_client(s3_config: S3Config, max_pool_connections: int = 10):
    """A botocore S3 client for ``s3_config`` (also used by tests and tools that need one)."""
    if bool(s3_config.access_key_id) != bool(s3_config.secret_access_key):
        raise ConfigError("s3: access_key_id and secret_access_key must be given together")
    if s3_config.max_attempts < 1:
        raise ConfigError(f"s3: max_attempts must be at least 1, got {s3_config.max_attempts}")
    options: dict = {
        "retries": {"mode": "standard", "total_max_attempts": s3_config.max_attempts},  # incl. the first
        "max_pool_connections": max_pool_connections,
    }
    if s3_config.endpoint_url:
        # S3-compatible servers (MinIO, Ceph, moto) want path-style addressing, and many
        # don't speak the newer default CRC checksums / aws-chunked uploads.
        options["s3"] = {"addressing_style": "path"}
        if "request_checksum_calculation" in botocore.config.Config.OPTION_DEFAULTS:
            options["request_checksum_calculation"] = "when_required"
            options["response_checksum_validation"] = "when_required"
    try:
        with _session_lock:  # boto3 sessions are not thread-safe; the clients they make are
            return _shared_session().client(
                "s3",
                endpoint_url=s3_config.endpoint_url,
                region_name=s3_config.region,
                aws_access_key_id=s3_config.access_key_id,
                aws_secret_access_key=s3_config.secret_access_key,
                config=botocore.config.Config(**options),
            )
    except (BotoCoreError, ValueError) as exc:
        raise ConfigError(f"s3: cannot create a client: {_one_line(exc)}") from None


class S3BlockAdapter(BlockAdapter):
    """Objects under ``s3://bucket/prefix``; thread-safe (botocore clients are)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        s3_config: S3Config | None = None,
        transfer: TransferSettings | None = None,
    ):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._root = self.prefix + "/" if self.prefix else ""
        self.s3_config = s3_config or S3Config()
        self.transfer = transfer or TransferSettings()
        self._client = make_s3_client(self.s3_config, max_pool_connections=max(10, 2 * self.transfer.max_concurrency))
        self._manager: TransferManager | None = None
        self._manager_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3BlockAdapter({self.uri!r})"

    def close(self) -> None:
        with self._manager_lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            manager.shutdown()
        close_client = getattr(self._client, "close", None)
        if close_client is not None:
            close_client()

    # ---------------------------------------------------------------- writes

    def put(self, key: str, data: bytes) -> ObjectStat:
        full_key = self._full_key(key)
        if len(data) <= self.transfer.multipart_threshold:
            return self._put_small(key, full_key, bytes(data))
        return self._put_multipart(key, full_key, io.BytesIO(data))

    def put_file(self, key: str, path: str, move: bool = False, durable: bool = True,
                 source_fd: int | None = None) -> ObjectStat:
        stat = self._put_file(key, path)  # an S3 PUT is durable once answered: ``durable`` changes nothing
        if move:  # uploaded: the local file is no longer needed
            try:
                os.unlink(path)
            except OSError:
                pass
        return stat

    def _put_file(self, key: str, path: str) -> ObjectStat:
        full_key = self._full_key(key)
        try:
            source = open(path, "rb")
        except OSError as exc:
            raise InvalidArgument(f"cannot read local file {path}: {exc.strerror}") from None
        with source:
            try:
                size = os.fstat(source.fileno()).st_size
            except OSError as exc:
                raise StorageError(f"cannot read local file {path}: {exc.strerror}") from None
            if size <= self.transfer.multipart_threshold:
                return self._put_small(key, full_key, source)  # seekable: botocore can retry it
        return self._put_multipart(key, full_key, os.fspath(path))

    def put_stream(self, key: str, stream: BinaryIO) -> ObjectStat:
        full_key = self._full_key(key)
        threshold = self.transfer.multipart_threshold
        head = _read_up_to(stream, threshold + 1)
        if len(head) <= threshold:
            return self._put_small(key, full_key, head)
        return self._put_multipart(key, full_key, _PrefixedStream(head, stream))

    def _put_small(self, key: str, full_key: str, body) -> ObjectStat:
        with self._errors("put", key):
            response = self._client.put_object(Bucket=self.bucket, Key=full_key, Body=body)
        size = len(body) if isinstance(body, bytes) else os.fstat(body.fileno()).st_size
        return ObjectStat(key=key, size=size, mtime=_response_time(response), etag=_etag(response.get("ETag")))

    def _put_multipart(self, key: str, full_key: str, source) -> ObjectStat:
        """Upload a filename or a readable stream in parts (s3transfer), then stat it."""
        with self._errors("put", key):
            self._transfer_manager().upload(source, self.bucket, full_key).result()
        return self.stat(key)

    def _transfer_manager(self) -> TransferManager:
        with self._manager_lock:
            if self._manager is None:
                settings = self.transfer
                config = S3TransferConfig(
                    multipart_threshold=settings.multipart_threshold,
                    multipart_chunksize=settings.part_size,
                    max_request_concurrency=settings.max_concurrency,
                    max_in_memory_upload_chunks=settings.max_concurrency,
                    max_in_memory_download_chunks=settings.max_concurrency,
                )
                self._manager = TransferManager(self._client, config)
            return self._manager

    # ----------------------------------------------------------------- reads

    def get(self, key: str) -> bytes:
        full_key = self._full_key(key)
        return self._read_body(key, Bucket=self.bucket, Key=full_key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        full_key = self._full_key(key)
        if offset < 0 or length < 0:
            raise InvalidArgument(f"invalid byte range: offset {offset}, length {length} (must not be negative)")
        if length == 0:
            self.stat(key)  # a missing key is still an error
            return b""
        try:
            return self._read_body(key, Bucket=self.bucket, Key=full_key, Range=f"bytes={offset}-{offset + length - 1}")
        except _RangeNotSatisfiable:
            return b""

    def _read_body(self, key: str, **request) -> bytes:
        for attempt in range(1, BODY_READ_ATTEMPTS + 1):
            with self._errors("get", key):
                response = self._client.get_object(**request)
                try:
                    return response["Body"].read()
                except _BODY_ERRORS:
                    if attempt == BODY_READ_ATTEMPTS:
                        raise
            _backoff(attempt)
        raise AssertionError("unreachable")

    def get_to_file(self, key: str, path: str) -> ObjectStat:
        full_key = self._full_key(key)
        with self._errors("get", key):
            response = self._client.get_object(Bucket=self.bucket, Key=full_key)
        size = response["ContentLength"]
        stat = ObjectStat(key=key, size=size, mtime=response["LastModified"].timestamp(), etag=_etag(response.get("ETag")))

        def fill(fd: int) -> None:
            body = response["Body"]
            written = 0
            for attempt in range(1, BODY_READ_ATTEMPTS + 1):
                with self._errors("get", key):
                    try:
                        for chunk in body.iter_chunks(DOWNLOAD_CHUNK_BYTES):
                            view = memoryview(chunk)
                            while view:
                                view = view[os.write(fd, view) :]
                            written += len(chunk)
                        break
                    except _BODY_ERRORS:
                        if attempt == BODY_READ_ATTEMPTS:
                            raise
                _backoff(attempt)
                with self._errors("get", key):  # resume where the body broke off, same version only
                    body = self._client.get_object(
                        Bucket=self.bucket, Key=full_key, Range=f"bytes={written}-", IfMatch=f'"{stat.etag}"'
                    )["Body"]
            if written != size:
                raise StorageError(f"s3 get {self.full_uri(key)}: got {written} of {size} bytes")

        write_file_atomically(path, fill)
        return stat

    def stat(self, key: str) -> ObjectStat:
        full_key = self._full_key(key)
        with self._errors("stat", key):
            response = self._client.head_object(Bucket=self.bucket, Key=full_key)
        return ObjectStat(
            key=key, size=response["ContentLength"], mtime=response["LastModified"].timestamp(), etag=_etag(response.get("ETag"))
        )

    # ----------------------------------------------------- delete, listing

    def delete(self, key: str) -> None:
        full_key = self._full_key(key)
        with self._errors("delete", key):
            self._client.delete_object(Bucket=self.bucket, Key=full_key)

    def list(self, prefix: str = "", start_after: str = "", page_size: int = 1000) -> Iterator[ObjectStat]:
        """ListObjectsV2 page by page.  Keys this interface can't address (folder markers
        ``dir/``, ``a//b``, ...) written by other tools are skipped."""
        check_prefix(prefix)
        if page_size < 1:
            raise InvalidArgument(f"page_size must be at least 1, got {page_size}")
        return self._list(prefix, start_after or "", min(page_size, 1000))

    def _list(self, prefix: str, start_after: str, page_size: int) -> Iterator[ObjectStat]:
        request = {"Bucket": self.bucket, "Prefix": self._root + prefix, "MaxKeys": page_size}
        if start_after:
            request["StartAfter"] = self._root + start_after
        root_length = len(self._root)
        while True:
            with self._errors("list", prefix):
                response = self._client.list_objects_v2(**request)
            for item in response.get("Contents", ()):
                key = item["Key"][root_length:]
                try:
                    check_key(key)
                except InvalidArgument:
                    continue
                yield ObjectStat(key=key, size=item["Size"], mtime=item["LastModified"].timestamp(), etag=_etag(item.get("ETag")))
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            request["ContinuationToken"] = token

    # -------------------------------------------------------------- helpers

    def _full_key(self, key: str) -> str:
        full_key = self._root + check_key(key)
        if len(full_key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
            raise InvalidArgument(f"object key too long for S3 (over {MAX_KEY_BYTES} bytes with the prefix): {key[:60]!r}...")
        return full_key

    @contextmanager
    def _errors(self, op: str, key: str):
        """Translate botocore/s3transfer failures of one operation into lakefuse errors."""
        try:
            yield
        except LakefuseError:
            raise
        except ClientError as exc:
            raise self._client_error(op, key, exc) from None
        except BotoCoreError as exc:
            raise StorageError(f"s3 {op} {self.full_uri(key) if key else self.uri}: {_one_line(exc)}") from None
        except OSError as exc:
            raise StorageError(f"s3 {op} {self.full_uri(key) if key else self.uri}: {_one_line(exc)}") from None

    def _client_error(self, op: str, key: str, exc: ClientError) -> LakefuseError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        where = self.full_uri(key) if key else self.uri
        if code == "NoSuchBucket":
            return StorageError(f"s3 {op} {where}: bucket {self.bucket!r} does not exist")
        if code in _NOT_FOUND_CODES or (status == 404 and op != "list"):
            return ObjectNotFound(f"object not found: {where}")
        if code == "InvalidRange" or status == 416:
            return _RangeNotSatisfiable(f"s3 {op} {where}: range not satisfiable")
        message = _one_line(error.get("Message") or exc)
        return StorageError(f"s3 {op} {where}: {code or status}: {message}")


class _RangeNotSatisfiable(StorageError):
    """HTTP 416: the requested range starts at or after the end of the object."""


class _PrefixedStream(io.RawIOBase):
    """A non-seekable stream: ``head`` bytes already read, then the rest of ``tail``.
    ``read(n)`` returns exactly ``n`` bytes until EOF (s3transfer cuts a part per read, and a
    short part in the middle of a multipart upload is rejected by S3)."""

    def __init__(self, head: bytes, tail: BinaryIO):
        self._head = memoryview(head)
        self._tail = tail

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            data = bytes(self._head) + _read_up_to(self._tail, None)
            self._head = memoryview(b"")
            return data
        data = bytes(self._head[:size])
        self._head = self._head[size:]
        if len(data) < size:
            data += _read_up_to(self._tail, size - len(data))
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _read_up_to(stream: BinaryIO, size: int | None) -> bytes:
    """Read until ``size`` bytes (``None``: all) or EOF, however short the stream's reads are."""
    parts = []
    remaining = size
    while remaining is None or remaining > 0:
        chunk = stream.read(DOWNLOAD_CHUNK_BYTES if remaining is None else remaining)
        if chunk is None:
            raise InvalidArgument("put_stream needs a blocking stream (read() returned None)")
        if not chunk:
            break
        parts.append(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    return b"".join(parts)


def _etag(value: str | None) -> str:
    return (value or "").strip('"')


def _response_time(response: dict) -> float:
    """The server's clock at the response (what Last-Modified will say), else ours."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if date:
        try:
            return email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


def _backoff(attempt: int) -> None:
    time.sleep(min(0.05 * 2**attempt, 1.0))


def _one_line(value) -> str:
    return " ".join(str(value).split())
