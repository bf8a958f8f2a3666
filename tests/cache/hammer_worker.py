"""A separate process hammering one DiskCache directory (run as a script by the tests).

usage: hammer_worker.py DIRECTORY MAX_BYTES SEED OPS GO_FILE

Waits (bounded) for GO_FILE so that all workers start together, then runs OPS random
operations over a fixed set of overlapping names, checking every byte it reads.  Prints one
JSON line: {"gets": n, "fetches": n, "vanished": n, "errors": [...]} and exits 0 unless an
error happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import tempfile
import time
import traceback

NAMES = [hashlib.sha256(f"entry-{i}".encode()).hexdigest() for i in range(24)]


def expected_content(name: str) -> bytes:
    size = 400 + int(name[:4], 16) % 2600
    block = hashlib.sha256(name.encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def main() -> int:
    directory, max_bytes, seed, ops, go_file = sys.argv[1:6]
    from lakefuse.cache import DiskCache

    rng = random.Random(int(seed))
    cache = DiskCache(directory, int(max_bytes), name="hammer", touch_interval=0, stats_interval=0.05)
    counts = {"gets": 0, "fetches": 0, "vanished": 0, "errors": []}

    def fetcher(name: str):
        def fetch(tmp_path: str) -> None:
            counts["fetches"] += 1
            data = expected_content(name)
            with open(tmp_path, "wb") as f:  # written in two steps to widen race windows
                f.write(data[: len(data) // 2])
                f.flush()
                if rng.random() < 0.2:
                    time.sleep(0.001)
                f.write(data[len(data) // 2 :])

        return fetch

    deadline = time.monotonic() + 30
    while not os.path.exists(go_file):
        if time.monotonic() > deadline:
            print(json.dumps({**counts, "errors": ["go file never appeared"]}))
            return 1
        time.sleep(0.005)

    for _ in range(int(ops)):
        name = rng.choice(NAMES[: rng.choice((6, 24))])  # a hot subset and the whole set
        action = rng.random()
        try:
            if action < 0.6:
                counts["gets"] += 1
                path = cache.get(name, fetcher(name))
                try:
                    with open(path, "rb") as f:  # the documented contract: open right away
                        data = f.read()
                except FileNotFoundError:
                    counts["vanished"] += 1  # evicted by the other process in between: allowed
                    continue
            elif action < 0.9:
                counts["gets"] += 1
                with cache.open(name, fetcher(name)) as f:
                    data = f.read()
            elif action < 0.95:
                with tempfile.NamedTemporaryFile(dir=os.path.dirname(directory), delete=False) as src:
                    src.write(expected_content(name))
                path = cache.put_file(name, src.name, move=rng.random() < 0.5)
                if os.path.exists(src.name):
                    os.unlink(src.name)
                continue
            else:
                cache.invalidate(name)
                continue
            if data != expected_content(name):
                counts["errors"].append(f"wrong content for {name}: {len(data)} bytes")
        except Exception:
            counts["errors"].append(traceback.format_exc())
    cache.close()
    print(json.dumps(counts))
    return 1 if counts["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
