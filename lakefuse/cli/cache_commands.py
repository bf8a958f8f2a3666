"""``lakefuse cache status``: the persisted counters of every disk cache under the configured
cache directory (one subdirectory per cache: ``graveler`` files, the mount's ``blocks``...), read
with ``lakefuse.cache.read_disk_cache_stats`` (no running process needed, nothing opened for
writing)."""

from __future__ import annotations

from pathlib import Path

from lakefuse.cli.context import CliContext
from lakefuse.cli.output import format_time, human_size, print_table, write_json


def register(subparsers, ctx: CliContext) -> None:
    cache = subparsers.add_parser("cache", help="inspect the local caches", description="Inspect the local caches.")
    verbs = cache.add_subparsers(dest="cache_command", metavar="COMMAND", required=True)
    status = verbs.add_parser("status", help="show disk cache counters",
                              description="Show the counters each disk cache under the cache directory last "
                                          "persisted: hits, misses, evictions, corrupted entries, size.")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=lambda args: cmd_status(ctx, args))


def cache_stats(directory: Path) -> list[dict]:
    from lakefuse.cache import read_disk_cache_stats

    if not directory.is_dir():
        return []
    result = []
    for child in sorted(directory.iterdir()):
        if not child.is_dir():
            continue
        stats = read_disk_cache_stats(child)
        if stats["name"] is None and not stats["entries"] and not stats["hits"] + stats["misses"]:
            continue  # not a cache (the mount's spool directory...) or one that never persisted anything
        result.append({"directory": child.name, "path": str(child), **stats})
    return result


def _hit_rate(stats: dict) -> str:
    lookups = stats["hits"] + stats["misses"]
    return f"{100.0 * stats['hits'] / lookups:.1f}%" if lookups else "-"


def cmd_status(ctx: CliContext, args) -> int:
    directory = Path(ctx.config().cache.dir)
    caches = cache_stats(directory)
    if args.json:
        write_json({"cache_dir": str(directory), "caches": caches})
        return 0
    out = ctx.out
    out.write(f"Cache directory: {directory}\n")
    if not caches:
        out.write("No caches yet.\n")
        return 0
    print_table(
        ("CACHE", "HITS", "MISSES", "HIT RATE", "EVICTIONS", "CORRUPTED", "ENTRIES", "SIZE", "LIMIT", "UPDATED"),
        [(c["directory"], c["hits"], c["misses"], _hit_rate(c), c["evictions"], c["corrupted"], c["entries"],
          human_size(c["bytes"]), "-" if c["max_bytes"] is None else human_size(c["max_bytes"]),
          format_time(c["updated_at"])) for c in caches],
        out,
    )
    return 0
