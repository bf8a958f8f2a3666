"""DiskCache shared by real processes: concurrent fetches, evictions and counters."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lakefuse.cache import DiskCache, read_disk_cache_stats

from .hammer_worker import NAMES, expected_content

WORKER = Path(__file__).with_name("hammer_worker.py")


def run_workers(directory: Path, max_bytes: int, seeds: list[int], ops: int) -> list[dict]:
    go = directory.parent / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(directory), str(max_bytes), str(seed), str(ops), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in seeds
    ]
    time.sleep(0.3)  # let the interpreters start so that the workers really overlap
    go.touch()
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        assert proc.returncode == 0, f"worker failed (rc={proc.returncode}):\n{out}\n{err}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_processes_hammering_one_directory(tmp_path):
    directory = tmp_path / "cache"
    max_bytes = 12_000  # a handful of the 24 entries (400..3000 bytes each)
    results = run_workers(directory, max_bytes, seeds=[1, 2], ops=500)
    for result in results:
        assert result["errors"] == []

    on_disk = {
        p.name: p.read_bytes()
        for shard in directory.iterdir()
        if shard.is_dir() and len(shard.name) <= 2
        for p in shard.iterdir()
    }
    assert sum(len(data) for data in on_disk.values()) <= max_bytes
    for name, data in on_disk.items():
        assert name in NAMES and data == expected_content(name)
    assert list((directory / "tmp").iterdir()) == []

    persisted = read_disk_cache_stats(directory)
    assert persisted["misses"] == sum(r["fetches"] for r in results)  # every fetch was a miss
    assert persisted["hits"] + persisted["misses"] >= sum(r["gets"] for r in results)
    assert persisted["evictions"] > 0 and persisted["corrupted"] == 0
    assert persisted["bytes"] == sum(len(d) for d in on_disk.values())
    assert persisted["entries"] == len(on_disk)

    # the index agrees with the directory: a repair finds nothing to change
    cache = DiskCache(directory, max_bytes)
    before = cache.stats()
    cache.repair()
    assert cache.stats().bytes == before.bytes == persisted["bytes"]
    assert cache.stats().entries == before.entries == len(on_disk)
    for name in on_disk:  # and every entry verifies in a fresh process view
        assert Path(cache.get(name, lambda tmp: None)).read_bytes() == expected_content(name)
    assert cache.stats().corrupted == 0 and cache.stats().misses == 0


def test_two_processes_fetching_the_same_missing_name(tmp_path):
    """Both fetch (slowly, at the same time); both get a correct file; one entry remains."""
    directory = tmp_path / "cache"
    name = "ab" * 32
    script = f"""
import os, sys, time
from pathlib import Path
from lakefuse.cache import DiskCache
go = Path(sys.argv[1])
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
def fetch(tmp):
    with open(tmp, "wb") as f:
        f.write(b"x" * 50_000)
        f.flush()
        time.sleep(0.3)
        f.write(b"y" * 50_000)
cache = DiskCache({str(directory)!r}, 1_000_000)
data = Path(cache.get({name!r}, fetch)).read_bytes()
assert data == b"x" * 50_000 + b"y" * 50_000, len(data)
cache.close()
print("ok")
"""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    time.sleep(0.3)
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "ok", err
    stats = read_disk_cache_stats(directory)
    assert stats["entries"] == 1 and stats["bytes"] == 100_000
    assert stats["misses"] in (1, 2) and stats["hits"] + stats["misses"] == 2
    assert hashlib.sha256((directory / "ab" / name).read_bytes()).hexdigest() == hashlib.sha256(
        b"x" * 50_000 + b"y" * 50_000
    ).hexdigest()
    assert os.listdir(directory / "tmp") == []


def test_a_process_killed_mid_work_leaves_a_usable_cache(tmp_path):
    directory = tmp_path / "cache"
    go = tmp_path / "go"
    victim = subprocess.Popen(
        [sys.executable, str(WORKER), str(directory), "12000", "7", "100000", str(go)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.3)
    go.touch()
    time.sleep(0.4)  # well inside its 100,000 operations
    victim.kill()
    victim.wait(timeout=10)
    results = run_workers(tmp_path / "cache", 12_000, seeds=[8], ops=200)  # reuses the go file
    assert results[0]["errors"] == []
    cache = DiskCache(directory, 12_000)
    cache.repair()
    on_disk = {
        p.name: p.read_bytes()
        for shard in directory.iterdir()
        if shard.is_dir() and len(shard.name) <= 2
        for p in shard.iterdir()
    }
    assert cache.stats().bytes == sum(len(d) for d in on_disk.values()) <= 12_000
    assert all(data == expected_content(name) for name, data in on_disk.items())


def test_counters_of_a_process_that_never_closes_are_flushed_at_exit(tmp_path):
    directory = tmp_path / "cache"
    script = f"""
from pathlib import Path
from lakefuse.cache import DiskCache
cache = DiskCache({str(directory)!r}, 1000)
for _ in range(3):
    cache.get("aa", lambda tmp: Path(tmp).write_bytes(b"data"))
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    stats = read_disk_cache_stats(directory)
    assert (stats["hits"], stats["misses"], stats["entries"]) == (2, 1, 1)


def test_a_forked_child_uses_its_own_lock_and_index(tmp_path):
    import multiprocessing

    cache = DiskCache(tmp_path / "cache", 1000)
    cache.get("aa", lambda tmp: Path(tmp).write_bytes(b"parent"))
    child = multiprocessing.get_context("fork").Process(target=_child_inserts, args=(cache,))
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    assert Path(cache.get("bb", lambda tmp: Path(tmp).write_bytes(b"wrong"))).read_bytes() == b"child"
    assert cache.stats().entries == 2


def _child_inserts(cache: DiskCache) -> None:
    assert Path(cache.get("aa", lambda tmp: Path(tmp).write_bytes(b"wrong"))).read_bytes() == b"parent"
    cache.get("bb", lambda tmp: Path(tmp).write_bytes(b"child"))
    cache.flush_stats()
