"""The BlockAdapter contract: behaviour every object storage adapter must have.

Use as a mixin: a test class inherits ``BlockAdapterContract`` and provides an ``adapter``
fixture returning an EMPTY adapter built with ``CONTRACT_TRANSFER`` (5 MiB parts and threshold,
so the 20 MiB objects below really go multipart on S3).
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import tracemalloc

import pytest

from lakefuse.block.base import MiB, ObjectStat, TransferSettings
from lakefuse.errors import InvalidArgument, ObjectNotFound

CONTRACT_TRANSFER = TransferSettings(part_size=5 * MiB, multipart_threshold=5 * MiB, max_concurrency=2)
LARGE_OBJECT_BYTES = 20 * MiB
WAIT_SECONDS = 20.0

# chosen so that walking directories naively ("a" before "a-b") would give the wrong order:
# '-' < '/' < '0' < 'b', and 'é' sorts after every ASCII character
ORDERING_KEYS = ["a/c/d", "ab/x", "b", "a-b", "z/y/x", "a0", "é/1", "a/b", "a/ba", "a/c-", "ü"]

BAD_KEYS = ["", "/abs", "a/../b", "..", "../x", "a\0b", "a//b", "a/", "./a", "a/./b", ".lakefuse-tmp-1"]


def fill_file(path, size: int, seed: bytes = b"lakefuse") -> str:
    """Write ``size`` pseudo-random bytes (no two 1 MiB blocks alike); return their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        block_number = 0
        remaining = size
        while remaining:
            block = hashlib.shake_256(seed + block_number.to_bytes(8, "big")).digest(min(MiB, remaining))
            f.write(block)
            digest.update(block)
            remaining -= len(block)
            block_number += 1
    return digest.hexdigest()


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()


class GatedStream(io.RawIOBase):
    """Yields ``first`` then blocks until ``release`` is set, then yields ``rest``."""

    def __init__(self, first: bytes, rest: bytes):
        self.pending = [first, rest]
        self.reached_gate = threading.Event()
        self.release = threading.Event()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if len(self.pending) == 1 and not self.release.is_set():
            self.reached_gate.set()
            if not self.release.wait(WAIT_SECONDS):
                raise TimeoutError("test gate was never released")
        if not self.pending:
            return b""
        chunk = self.pending[0]
        if size is None or size < 0 or size >= len(chunk):
            self.pending.pop(0)
            return chunk
        self.pending[0] = chunk[size:]
        return chunk[:size]


class StreamBroke(Exception):
    pass


class BrokenStream(io.RawIOBase):
    """Yields ``good_bytes`` of data, then raises ``StreamBroke``."""

    def __init__(self, good_bytes: int):
        self.remaining = good_bytes

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.remaining <= 0:
            raise StreamBroke("the source went away")
        n = self.remaining if size is None or size < 0 else min(size, self.remaining)
        self.remaining -= n
        return b"x" * n


def keys_of(stats) -> list[str]:
    return [s.key for s in stats]


class BlockAdapterContract:
    # ------------------------------------------------------------ put / get

    def test_put_then_get_returns_the_bytes_and_a_stat(self, adapter):
        before = time.time()
        stat = adapter.put("dir/sub/object.bin", b"hello world")
        assert isinstance(stat, ObjectStat)
        assert (stat.key, stat.size) == ("dir/sub/object.bin", 11)
        assert before - 5 <= stat.mtime <= time.time() + 5
        assert '"' not in stat.etag
        assert adapter.get("dir/sub/object.bin") == b"hello world"
        again = adapter.stat("dir/sub/object.bin")
        assert (again.key, again.size, again.etag) == (stat.key, stat.size, stat.etag)
        assert abs(again.mtime - stat.mtime) < 2

    def test_empty_object(self, adapter):
        assert adapter.put("empty", b"").size == 0
        assert adapter.get("empty") == b""
        assert adapter.stat("empty").size == 0
        assert adapter.get_range("empty", 0, 10) == b""
        assert keys_of(adapter.list()) == ["empty"]

    def test_put_accepts_bytes_like_objects(self, adapter):
        adapter.put("ba", bytearray(b"abc"))
        adapter.put("mv", memoryview(b"xyzw")[1:])
        assert adapter.get("ba") == b"abc"
        assert adapter.get("mv") == b"yzw"

    def test_unicode_and_spaces_in_keys(self, adapter):
        key = "dir with space/ü-名前 (1).txt"
        adapter.put(key, b"x")
        assert adapter.get(key) == b"x"
        assert keys_of(adapter.list()) == [key]

    def test_overwrite_replaces_content_and_size(self, adapter):
        adapter.put("k", b"first version, long")
        adapter.put("k", b"second")
        assert adapter.get("k") == b"second"
        assert adapter.stat("k").size == 6
        assert keys_of(adapter.list()) == ["k"]

    def test_put_stream_small_and_put_file(self, adapter, tmp_path):
        assert adapter.put_stream("s", io.BytesIO(b"streamed")).size == 8
        assert adapter.get("s") == b"streamed"
        source = tmp_path / "source.txt"
        source.write_bytes(b"from a file")
        stat = adapter.put_file("f", str(source))
        assert (stat.key, stat.size) == ("f", 11)
        assert adapter.get("f") == b"from a file"

    def test_put_file_of_a_missing_local_file_is_invalid(self, adapter, tmp_path):
        with pytest.raises(InvalidArgument, match="missing.txt"):
            adapter.put_file("k", str(tmp_path / "missing.txt"))
        assert not adapter.exists("k")

    @pytest.mark.parametrize("move", [False, True])
    def test_a_put_that_is_not_durable_yet_is_whole_and_readable_and_sync_keeps_it(self, adapter, tmp_path, move):
        source = tmp_path / "later.bin"
        source.write_bytes(b"durable at the next sync" * 100)
        stat = adapter.put_file("lazy/k", str(source), move=move, durable=False)
        assert stat.size == 2400
        assert adapter.get("lazy/k") == b"durable at the next sync" * 100
        assert source.exists() is not move
        adapter.sync()
        assert adapter.get("lazy/k") == b"durable at the next sync" * 100
        assert keys_of(adapter.list("lazy/")) == ["lazy/k"]

    # ------------------------------------------------------ put_file(move=True)

    def test_put_file_with_move_stores_the_bytes_and_consumes_the_file(self, adapter, tmp_path):
        adapter.put("dir/k", b"previous content is replaced")
        source = tmp_path / "moved.txt"
        source.write_bytes(b"moved bytes")
        stat = adapter.put_file("dir/k", str(source), move=True)
        assert (stat.key, stat.size) == ("dir/k", 11)
        assert adapter.get("dir/k") == b"moved bytes"
        assert adapter.stat("dir/k").size == 11
        assert not source.exists()
        assert keys_of(adapter.list()) == ["dir/k"]

    @pytest.mark.parametrize("move", [False, True])
    def test_put_file_from_a_descriptor_the_caller_keeps_open(self, adapter, tmp_path, move):
        source = tmp_path / "spool"
        fd = os.open(source, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            os.pwrite(fd, b"written through the caller's descriptor", 0)
            os.lseek(fd, 7, os.SEEK_SET)  # wherever the caller left it: the whole file is stored
            stat = adapter.put_file("fd/k", str(source), move=move, source_fd=fd)
            assert stat.size == 39
            assert adapter.get("fd/k") == b"written through the caller's descriptor"
            assert source.exists() is not move
            os.fstat(fd)  # still the caller's to close
        finally:
            os.close(fd)

    def test_put_file_with_move_of_a_missing_file_is_invalid(self, adapter, tmp_path):
        with pytest.raises(InvalidArgument, match="missing.txt"):
            adapter.put_file("k", str(tmp_path / "missing.txt"), move=True)
        assert not adapter.exists("k")

    def test_large_file_moves(self, adapter, tmp_path):
        source = tmp_path / "large.src"
        digest = fill_file(source, LARGE_OBJECT_BYTES, seed=b"move")
        stat = adapter.put_file("big/moved", str(source), move=True)
        assert stat.size == LARGE_OBJECT_BYTES == adapter.stat("big/moved").size
        assert not source.exists()
        adapter.get_to_file("big/moved", str(tmp_path / "back"))
        assert file_sha256(tmp_path / "back") == digest

    # ---------------------------------------------------------------- ranges

    def test_get_range(self, adapter):
        data = bytes(range(256)) * 4
        adapter.put("r", data)
        assert adapter.get_range("r", 0, 10) == data[:10]
        assert adapter.get_range("r", 100, 300) == data[100:400]
        assert adapter.get_range("r", 1000, 100) == data[1000:]  # short at the end
        assert adapter.get_range("r", 0, len(data) + 5) == data
        assert adapter.get_range("r", len(data), 10) == b""  # exactly at the end
        assert adapter.get_range("r", len(data) + 100, 10) == b""  # beyond the end
        assert adapter.get_range("r", 5, 0) == b""

    def test_get_range_rejects_negative_numbers(self, adapter):
        adapter.put("r", b"abc")
        with pytest.raises(InvalidArgument):
            adapter.get_range("r", -1, 2)
        with pytest.raises(InvalidArgument):
            adapter.get_range("r", 0, -2)

    # ------------------------------------------------------ missing objects

    def test_missing_key_raises_object_not_found(self, adapter, tmp_path):
        adapter.put("dir/present", b"x")
        downloads = tmp_path / "downloads"
        downloads.mkdir()
        destination = downloads / "downloaded"
        for key in ("absent", "dir/absent", "dir", "dir/present/below"):
            with pytest.raises(ObjectNotFound):
                adapter.get(key)
            with pytest.raises(ObjectNotFound):
                adapter.get_range(key, 0, 1)
            with pytest.raises(ObjectNotFound):
                adapter.get_range(key, 0, 0)
            with pytest.raises(ObjectNotFound):
                adapter.stat(key)
            with pytest.raises(ObjectNotFound):
                adapter.get_to_file(key, str(destination))
            assert not adapter.exists(key)
        assert not destination.exists()
        assert os.listdir(downloads) == []  # no partial download left behind
        assert adapter.exists("dir/present")

    # ---------------------------------------------------------------- delete

    def test_delete(self, adapter):
        adapter.put("d/one", b"1")
        adapter.put("d/two", b"2")
        adapter.delete("d/one")
        assert not adapter.exists("d/one")
        with pytest.raises(ObjectNotFound):
            adapter.get("d/one")
        assert adapter.get("d/two") == b"2"
        assert keys_of(adapter.list()) == ["d/two"]

    def test_delete_of_a_missing_key_is_a_no_op(self, adapter):
        adapter.delete("never/was")
        adapter.put("k", b"x")
        adapter.delete("k")
        adapter.delete("k")
        assert keys_of(adapter.list()) == []

    def test_deleting_everything_leaves_an_empty_listing(self, adapter):
        for key in ("a/b/c/d", "a/b/e", "f"):
            adapter.put(key, b"x")
        for key in ("a/b/c/d", "a/b/e", "f"):
            adapter.delete(key)
        assert keys_of(adapter.list()) == []
        adapter.put("a/b/c/d", b"again")  # directories pruned on the way can come back
        assert adapter.get("a/b/c/d") == b"again"

    # --------------------------------------------------------------- listing

    def test_list_of_an_empty_store(self, adapter):
        assert keys_of(adapter.list()) == []
        assert keys_of(adapter.list(prefix="x/")) == []

    def test_list_is_in_key_order_with_sizes(self, adapter):
        for i, key in enumerate(ORDERING_KEYS):
            adapter.put(key, b"x" * i)
        stats = list(adapter.list())
        assert keys_of(stats) == sorted(ORDERING_KEYS)
        assert {s.key: s.size for s in stats} == {key: i for i, key in enumerate(ORDERING_KEYS)}
        assert all(isinstance(s, ObjectStat) and s.mtime > 0 for s in stats)

    def test_list_pagination_gives_the_same_result(self, adapter):
        for key in ORDERING_KEYS:
            adapter.put(key, b"x")
        for page_size in (1, 2, 3, 1000):
            assert keys_of(adapter.list(page_size=page_size)) == sorted(ORDERING_KEYS), page_size

    def test_list_by_prefix(self, adapter):
        for key in ORDERING_KEYS:
            adapter.put(key, b"x")
        for prefix in ("", "a", "a/", "a/b", "a/c", "a/c/", "ab", "z/y/x", "é", "nothing", "nothing/", "a/c/d/"):
            expected = sorted(k for k in ORDERING_KEYS if k.startswith(prefix))
            assert keys_of(adapter.list(prefix=prefix, page_size=2)) == expected, prefix

    def test_list_start_after(self, adapter):
        for key in ORDERING_KEYS:
            adapter.put(key, b"x")
        for start_after in ("", "a", "a-b", "a/", "a/b", "a/bb", "a/c", "a/c/", "a/c/d", "a/c/e", "a0", "b", "zz", "ü"):
            expected = sorted(k for k in ORDERING_KEYS if k > start_after)
            assert keys_of(adapter.list(start_after=start_after, page_size=2)) == expected, start_after

    def test_list_prefix_and_start_after_together(self, adapter):
        for key in ORDERING_KEYS:
            adapter.put(key, b"x")
        for prefix, start_after in (("a/", "a/b"), ("a/", "a-b"), ("a/", "b"), ("a", "a/c-"), ("a/c", "a/ba"), ("b", "a")):
            expected = sorted(k for k in ORDERING_KEYS if k.startswith(prefix) and k > start_after)
            got = keys_of(adapter.list(prefix=prefix, start_after=start_after, page_size=2))
            assert got == expected, (prefix, start_after)

    def test_resuming_a_listing_page_by_page(self, adapter):
        keys = [f"p/{i:03d}" for i in range(7)]
        for key in keys:
            adapter.put(key, b"x")
        seen, last = [], ""
        while True:
            page = []
            for stat in adapter.list(prefix="p/", start_after=last, page_size=2):
                page.append(stat.key)
                if len(page) == 3:
                    break
            if not page:
                break
            seen += page
            last = page[-1]
        assert seen == keys

    def test_list_rejects_bad_prefixes(self, adapter):
        for prefix in ("/a", "../x", "a/../", "a//", "a\0"):
            with pytest.raises(InvalidArgument):
                list(adapter.list(prefix=prefix))
                pytest.fail(f"prefix {prefix!r} was accepted")

    def test_list_rejects_a_page_size_below_one(self, adapter):
        with pytest.raises(InvalidArgument):
            list(adapter.list(page_size=0))

    # ---------------------------------------------------------------- keys

    def test_bad_keys_are_invalid_arguments(self, adapter, tmp_path):
        for key in BAD_KEYS:
            self.check_bad_key(adapter, key, tmp_path)
        assert keys_of(adapter.list()) == []

    def check_bad_key(self, adapter, key, tmp_path):
        source = tmp_path / "source"
        source.write_bytes(b"x")
        operations = {
            "put": lambda: adapter.put(key, b"x"),
            "put_file": lambda: adapter.put_file(key, str(source)),
            "put_file(move=True)": lambda: adapter.put_file(key, str(source), move=True),
            "put_stream": lambda: adapter.put_stream(key, io.BytesIO(b"x")),
            "get": lambda: adapter.get(key),
            "get_range": lambda: adapter.get_range(key, 0, 1),
            "get_to_file": lambda: adapter.get_to_file(key, str(tmp_path / "out")),
            "stat": lambda: adapter.stat(key),
            "exists": lambda: adapter.exists(key),
            "delete": lambda: adapter.delete(key),
        }
        for name, operation in operations.items():
            with pytest.raises(InvalidArgument):
                operation()
                pytest.fail(f"{name}({key!r}) was accepted")

    # ------------------------------------------------------------ atomicity

    def test_readers_see_the_old_object_while_a_put_is_in_progress(self, adapter):
        adapter.put("dir/k", b"old")
        adapter.put("dir/other", b"o")
        stream = GatedStream(b"new-" * 1000, b"tail")
        errors = []

        def writer():
            try:
                adapter.put_stream("dir/k", stream)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert stream.reached_gate.wait(WAIT_SECONDS)
            assert adapter.get("dir/k") == b"old"
            assert adapter.stat("dir/k").size == 3
            assert keys_of(adapter.list()) == ["dir/k", "dir/other"]  # no temporary object
            assert keys_of(adapter.list(prefix="dir/", page_size=1)) == ["dir/k", "dir/other"]
        finally:
            stream.release.set()
            thread.join(WAIT_SECONDS)
        assert not thread.is_alive() and errors == []
        assert adapter.get("dir/k") == b"new-" * 1000 + b"tail"
        assert keys_of(adapter.list()) == ["dir/k", "dir/other"]

    @pytest.mark.parametrize("good_bytes", [100, 7 * MiB])
    def test_a_failing_stream_leaves_the_old_object(self, adapter, good_bytes):
        adapter.put("k", b"old")
        with pytest.raises(StreamBroke):
            adapter.put_stream("k", BrokenStream(good_bytes))
        with pytest.raises(StreamBroke):
            adapter.put_stream("new/key", BrokenStream(good_bytes))
        assert adapter.get("k") == b"old"
        assert keys_of(adapter.list()) == ["k"]

    # ------------------------------------------------------- large objects

    def test_large_object_streams_through_files(self, adapter, tmp_path):
        tmp_path = tmp_path / "files"
        tmp_path.mkdir()
        source = tmp_path / "large.src"
        digest = fill_file(source, LARGE_OBJECT_BYTES)
        destination = tmp_path / "large.dst"
        destination.write_bytes(b"previous content is replaced")

        tracemalloc.start()
        try:
            stat = adapter.put_file("big/object", str(source))
            _, upload_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            downloaded = adapter.get_to_file("big/object", str(destination))
            _, download_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

        assert (stat.key, stat.size) == ("big/object", LARGE_OBJECT_BYTES)
        assert (downloaded.key, downloaded.size) == ("big/object", LARGE_OBJECT_BYTES)
        assert downloaded.etag == stat.etag == adapter.stat("big/object").etag
        assert file_sha256(destination) == digest
        assert sorted(os.listdir(tmp_path)) == ["large.dst", "large.src"]  # no temporary files
        # never the whole object in memory: at most a few parts in flight
        assert upload_peak < LARGE_OBJECT_BYTES // 2, f"upload peak {upload_peak / MiB:.1f} MiB"
        assert download_peak < LARGE_OBJECT_BYTES // 2, f"download peak {download_peak / MiB:.1f} MiB"
        # ranges across part boundaries read what was written
        with open(source, "rb") as f:
            for offset in (0, 5 * MiB - 3, 10 * MiB - 1, LARGE_OBJECT_BYTES - 7):
                f.seek(offset)
                assert adapter.get_range("big/object", offset, 10) == f.read(10)

    def test_large_put_stream_and_put_bytes(self, adapter, tmp_path):
        source = tmp_path / "stream.src"
        digest = fill_file(source, 11 * MiB, seed=b"stream")
        with open(source, "rb", buffering=0) as f:
            stat = adapter.put_stream("streamed", f)
        assert stat.size == 11 * MiB
        assert hashlib.sha256(adapter.get("streamed")).hexdigest() == digest
        data = source.read_bytes()
        assert adapter.put("bytes", data).size == len(data)
        assert adapter.get_range("bytes", 6 * MiB, 5) == data[6 * MiB : 6 * MiB + 5]
        assert keys_of(adapter.list()) == ["bytes", "streamed"]

    def test_get_to_file_small(self, adapter, tmp_path):
        adapter.put("k", b"content")
        tmp_path = tmp_path / "files"
        tmp_path.mkdir()
        destination = tmp_path / "out.txt"
        stat = adapter.get_to_file("k", str(destination))
        assert (stat.key, stat.size) == ("k", 7)
        assert destination.read_bytes() == b"content"
        assert os.listdir(tmp_path) == ["out.txt"]

    # ------------------------------------------------------------------ uri

    def test_full_uri_is_under_the_namespace_uri(self, adapter):
        assert adapter.full_uri("a/b") == adapter.uri.rstrip("/") + "/a/b"
