"""Helpers of the Spark job tests: synthetic source trees."""

from __future__ import annotations

import os


def make_tree(root, files: dict[str, bytes]) -> dict[str, bytes]:
    """Write ``files`` (relative path -> bytes) under ``root``; returns them."""
    for path, data in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(data)
    return files


def sample_tree(count: int = 300) -> dict[str, bytes]:
    """A tree with files at several depths, one directory with many files."""
    files = {"top.txt": b"top level", "empty.bin": b""}
    for i in range(count):
        files[f"d{i % 7}/sub{i % 3}/file-{i:04d}.dat"] = f"payload {i} ".encode() * (1 + i % 5)
    for i in range(40):
        files[f"flat/f{i:03d}"] = bytes([i]) * i
    return files
