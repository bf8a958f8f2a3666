"""How the CLI prints: aligned tables, ``--json`` documents, sizes, times, and commits, entries
and differences as plain dicts (the ``--json`` shapes, stable for scripts).

Times print in UTC (``2024-05-01 12:00:00 UTC``) for people and as epoch seconds in JSON.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Iterable, Sequence

DIFF_SYMBOLS = {"added": "+", "changed": "~", "removed": "-"}


def write_json(data, out=None) -> None:
    out = out or sys.stdout
    json.dump(data, out, indent=2, ensure_ascii=False)
    out.write("\n")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]], out=None) -> None:
    out = out or sys.stdout
    table = [tuple(headers)] + [tuple("" if cell is None else str(cell) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")


def print_fields(fields: Sequence[tuple[str, object]], out=None) -> None:
    """``Name:  value`` lines, values aligned."""
    out = out or sys.stdout
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        out.write(f"{name + ':':<{width}} {value}\n")


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # unreachable


def format_time(epoch: float | int | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


# --------------------------------------------------------------------------------------------
# model objects as dicts


def commit_dict(commit) -> dict:
    return {
        "id": commit.id,
        "parents": list(commit.parents),
        "committer": commit.committer,
        "message": commit.message,
        "creation_date": commit.creation_date,
        "meta_range_id": commit.metarange_id,
        "metadata": dict(commit.metadata),
    }


def entry_dict(path: str, entry) -> dict:
    out = {
        "path": path,
        "path_type": "object",
        "physical_address": entry.physical_address,
        "address_is_full": entry.address_is_full,
        "size_bytes": entry.size,
        "mtime": entry.mtime,
        "checksum": entry.checksum,
        "content_type": entry.content_type,
        "metadata": dict(entry.metadata),
    }
    posix = posix_of(path, entry)
    if posix is not None:
        out["posix"] = posix
    return out


def posix_of(path: str, entry) -> dict | None:
    """What the entry's POSIX keys say (``lakefuse.posix``: type, mode, owner, link target,
    device, times), or None for an entry that has none (most objects)."""
    from lakefuse.posix import POSIX_KEYS, describe

    metadata = entry.metadata
    if not metadata or not any(key in metadata for key in POSIX_KEYS):
        return None
    return describe(metadata, is_dir=path.endswith("/"))


def posix_suffix(path: str, entry) -> str:
    """What a listing line adds after a special entry's path: `` -> target`` for a symbolic
    link, `` (fifo)`` and the like for other special files; nothing for files and directories."""
    posix = posix_of(path, entry) if entry is not None else None
    if posix is None or posix["type"] in ("file", "directory"):
        return ""
    if "target" in posix:
        return f" -> {posix['target']}"
    return f" ({posix['type']}{' ' + posix['rdev'] if 'rdev' in posix else ''})"


def difference_dict(difference) -> dict:
    return {
        "path": difference.path,
        "type": difference.type.value,
        "left": None if difference.left is None else entry_dict(difference.path, difference.left),
        "right": None if difference.right is None else entry_dict(difference.path, difference.right),
    }


def repository_dict(repo) -> dict:
    return {
        "id": repo.id,
        "storage_namespace": repo.storage_namespace,
        "default_branch": repo.default_branch,
        "creation_date": repo.creation_date,
    }


# --------------------------------------------------------------------------------------------
# human forms


def print_commit(commit, out=None) -> None:
    """A commit like ``git log`` shows one."""
    out = out or sys.stdout
    out.write(f"commit {commit.id}\n")
    if len(commit.parents) > 1:
        out.write("Merge: " + " ".join(parent[:12] for parent in commit.parents) + "\n")
    out.write(f"Committer: {commit.committer}\n")
    out.write(f"Date: {format_time(commit.creation_date)}\n")
    for key in sorted(commit.metadata):
        out.write(f"Meta: {key} = {commit.metadata[key]}\n")
    out.write("\n")
    for line in (commit.message or "").splitlines():
        out.write(f"    {line}\n" if line else "\n")
    out.write("\n")


def print_commit_details(commit, out=None, extra: Sequence[tuple[str, object]] = ()) -> None:
    """A commit's fields, one per line (``show``, ``commit``, ``merge``)."""
    out = out or sys.stdout
    fields: list[tuple[str, object]] = list(extra)
    fields += [
        ("ID", commit.id),
        ("Message", (commit.message or "").splitlines()[0] if commit.message else ""),
        ("Committer", commit.committer),
        ("Date", format_time(commit.creation_date)),
        ("Parents", ", ".join(commit.parents) or "-"),
        ("Meta range", commit.metarange_id),
    ]
    for key in sorted(commit.metadata):
        fields.append((f"Meta {key}", commit.metadata[key]))
    print_fields(fields, out)
    lines = (commit.message or "").splitlines()
    if len(lines) > 1:
        out.write("\n" + "\n".join(f"    {line}" if line else "" for line in lines) + "\n")


def print_difference(difference, out=None) -> None:
    """``+ path``, ``~ path``, ``- path``; a symbolic link with its target (``+ lib -> lib64``),
    another special file with its type."""
    out = out or sys.stdout
    entry = difference.left if difference.type.value == "removed" else difference.right
    out.write(f"{DIFF_SYMBOLS[difference.type.value]} {difference.path}{posix_suffix(difference.path, entry)}\n")
