"""The ``lakefuse mount`` and ``lakefuse umount`` commands.

``lakefuse mount MOUNTPOINT [lakefs://repo[/ref]]`` mounts all repositories, one repository
(its refs at the root) or one ref (its tree at the root).  Without ``-f`` it daemonizes: the
parent waits on a pipe until the child's mount answers requests, then exits 0; if the child
fails first, the parent prints the child's one-line error and exits with its code.  With
``-f`` it serves in the foreground (systemd ``Type=notify`` units: readiness goes to
``$NOTIFY_SOCKET`` as ``READY=1``).  SIGTERM/SIGINT upload written files, then unmount.

``lakefuse umount MOUNTPOINT`` unmounts (``fusermount3 -u``, or ``umount`` as root).

The CLI registers these with ``add_mount_arguments`` / ``add_umount_arguments`` and calls
``mount_main(args)`` / ``umount_main(args)``; they return 0 or raise ``LakefuseError``.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from lakefuse.errors import InvalidArgument, LakefuseError, MountPointInUse
from lakefuse.fs.state import WATCHED_BRANCH_TTL
from lakefuse.fs.tree import METADATA_ENTRIES
from lakefuse.fuse.mountinfo import process_alive
from lakefuse.fuse.spin import DEFAULT_SPIN_SECONDS

log = logging.getLogger("lakefuse.mount")

READY_WAIT_SECONDS = 120.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class MountError(LakefuseError):
    """The mount failed."""

    exit_code = 1


# ---------------------------------------------------------------------------- arguments

def add_mount_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mountpoint", help="an existing empty directory (not already a mount point)")
    parser.add_argument("uri", nargs="?", default=None,
                        help="lakefs://REPO (its branches and tags at the root) or lakefs://REPO/REF (that "
                             "ref's objects at the root); default: every repository")
    parser.add_argument("-f", "--foreground", action="store_true",
                        help="serve in the foreground (default: daemonize once the mount is ready)")
    parser.add_argument("--read-only", action="store_true", help="refuse every write (EROFS)")
    parser.add_argument("--allow-other", action="store_true",
                        help="let other users access the mount (needs user_allow_other in /etc/fuse.conf "
                             "unless root)")
    parser.add_argument("--default-permissions", action="store_true",
                        help="let the kernel check permission bits even on a mount only root reaches "
                             "(default: only with --allow-other or when not run by root; see docs/mount.md)")
    parser.add_argument("--cache-dir", help="cache directory (default: cache.dir of the configuration)")
    parser.add_argument("--cache-disk-bytes", help="bound of each disk cache, e.g. 10GiB")
    parser.add_argument("--cache-ram-bytes", help="bound of the RAM cache, e.g. 1GiB")
    parser.add_argument("--cache-scan-bytes",
                        help="how much of the RAM cache the ranges walks read may keep, e.g. 1GiB (default: 128MiB, "
                             "or all of it if smaller; what point reads keep goes last either way)")
    parser.add_argument("--metadata-entries", type=_entries, default=METADATA_ENTRIES, metavar="N",
                        help=f"paths whose metadata each ref keeps in memory, and entries of the listing "
                             f"pages it keeps (default {METADATA_ENTRIES:,}; about 0.8 KB each: see the "
                             f"memory section of docs/mount.md)")
    parser.add_argument("--read-ahead-kb", type=int, default=1024,
                        help="kernel read-ahead of the mount in KiB (default 1024; 0 leaves it alone)")
    parser.add_argument("--change-poll", type=_seconds, default=0.5, metavar="SECONDS",
                        help="how often to ask the database what other processes changed on the branches "
                             "(default 0.5; the kernel keeps branch metadata until then; 0: no polling, "
                             "branch metadata is trusted for 1 s instead)")
    parser.add_argument("--branch-timeout", type=_branch_timeout, default=WATCHED_BRANCH_TTL, metavar="SECONDS",
                        help=f"with --change-poll, how long the kernel and the mount trust a branch's names, "
                             f"attributes and listings (default {WATCHED_BRANCH_TTL:.0f}: the polls name "
                             f"every change other processes make; this bounds how long one they could not "
                             f"report would show)")
    parser.add_argument("--names-only-for", type=_programs, default=frozenset(), metavar="PROGRAMS",
                        help="comma-separated program names (as ps shows them, e.g. find,fd,tree) whose "
                             "directory listings give regular files by name alone: the kernel then makes no "
                             "inode per file, which makes a fresh find of a big tree about 1.5x faster, and "
                             "a later ls -l or du of the same directories that much slower (see "
                             "docs/mount.md, listings by name alone; default: none)")
    parser.add_argument("--spin-us", type=_microseconds, default=round(DEFAULT_SPIN_SECONDS * 1e6),
                        metavar="MICROSECONDS",
                        help=f"poll for the next request this long after each one before sleeping, "
                             f"yielding the CPU to anything else that wants it (default "
                             f"{DEFAULT_SPIN_SECONDS * 1e6:.0f}; 0: never): a run of small requests "
                             f"(stat, open, create) then costs no wake-up of the daemon per request. "
                             f"Needs the pyfuse3 scripts/install builds")
    parser.add_argument("--no-idle-reader", dest="idle_reader", action="store_false",
                        help="serve every request on the event loop's thread (by default, while it sleeps, a "
                             "thread of the binding reads requests and answers those it can in C: reading "
                             "many files from busy processes costs no wake-up of the event loop per "
                             "request). Needs the pyfuse3 scripts/install builds")
    parser.add_argument("--no-passthrough", dest="passthrough", action="store_false",
                        help="serve every read through lakefuse (by default the kernel reads objects of a "
                             "local storage namespace under commits, tags and read-only mounts itself: "
                             "FUSE passthrough, where the kernel, libfuse and privileges allow it)")
    parser.add_argument("--passthrough-branches", action="store_true",
                        help="let the kernel read branch files itself too; a file opened for reading then "
                             "keeps its bytes while other handles write it (no tail -f)")
    parser.add_argument("--writeback-cache", action="store_true",
                        help="let the kernel keep written pages and send them in big pieces: small writes "
                             "(dd bs=4k, logs) run several times faster; the kernel then cannot read local "
                             "objects itself (no passthrough reads)")
    parser.add_argument("--uid", type=_id, metavar="UID",
                        help="owner of entries that store none (written before lakefuse kept owners, or by the "
                             "CLI, Spark or other lakeFS clients), of implied directories, refs and repositories "
                             "(default: the mounting user)")
    parser.add_argument("--gid", type=_id, metavar="GID", help="their group (default: the mounting user's)")
    parser.add_argument("--map-uid", type=_id_pair, action="append", default=[], metavar="STORED:SHOWN",
                        help="show entries owned by uid STORED as owned by SHOWN, and store STORED when "
                             "something is created or chowned to SHOWN (data written where a user had another "
                             "uid); repeatable")
    parser.add_argument("--map-gid", type=_id_pair, action="append", default=[], metavar="STORED:SHOWN",
                        help="the same for groups; repeatable")
    parser.add_argument("--force-owner", action="store_true",
                        help="show every entry as owned by --uid/--gid (default: the mounting user), whatever "
                             "owner it stores; creates and chowns still store the requester's ids")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="default INFO")
    parser.add_argument("--log-file", help="log here (daemon default: $LAKEFUSE_HOME/logs/mount-<dir>.log; "
                                           "foreground default: stderr)")


def _bounded(parse, what: str, unit: str, high):
    """An argparse type: ``parse(text)`` between 0 and ``high`` ``unit``."""

    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what} {unit}: {text!r}") from None
        if not 0 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between 0 and {high} {unit}, got {text}")
        return value

    return convert


def _id(text: str) -> int:
    """An argparse type: a user or group ID."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a numeric id: {text!r}") from None
    if not 0 <= value < 2**32 - 1:
        raise argparse.ArgumentTypeError(f"id out of range: {text}")
    return value


def _id_pair(text: str) -> tuple[int, int]:
    """An argparse type: ``STORED:SHOWN`` ids."""
    stored, sep, shown = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected STORED:SHOWN, got {text!r}")
    return _id(stored), _id(shown)


def _entries(text: str) -> int:
    """An argparse type: a number of cache entries (at least 1)."""
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of entries: {text!r}") from None
    if not 1 <= value <= 1_000_000_000:
        raise argparse.ArgumentTypeError(f"must be between 1 and 1000000000 entries, got {text}")
    return value


def _programs(text: str) -> frozenset[str]:
    """An argparse type: comma-separated program names, as the kernel keeps them (``comm``)."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if "/" in name or len(name.encode("utf-8")) > 15:
            raise argparse.ArgumentTypeError(
                f"not a program name as ps shows it (at most 15 bytes, no '/'): {name!r}")
    return names


_seconds = _bounded(float, "a number of", "seconds", 3600)
_branch_timeout = _bounded(float, "a number of", "seconds", 86400)
_microseconds = _bounded(int, "a whole number of", "microseconds", 100_000)


def add_umount_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mountpoint")
    parser.add_argument("-l", "--lazy", action="store_true",
                        help="detach now, clean up when no longer busy")


# ---------------------------------------------------------------------------- mount

@dataclasses.dataclass
class _Plan:
    mountpoint: str
    repo: str | None
    ref: str | None


def check_mountpoint(mountpoint: str) -> None:
    """One-line errors for a mount point that cannot be used: already a mount point or not
    empty (``MountPointInUse``), missing or not a directory (``InvalidArgument``)."""
    from lakefuse.fuse.runner import is_mounted

    if is_mounted(mountpoint):  # first: a stale FUSE mount fails every other check with ENOTCONN
        raise MountPointInUse(f"{mountpoint} is already a mount point (unmount it first: lakefuse umount {mountpoint})")
    if not os.path.lexists(mountpoint):
        raise InvalidArgument(f"mount point {mountpoint} does not exist (create it: mkdir -p {mountpoint})")
    if not os.path.isdir(mountpoint):
        raise InvalidArgument(f"mount point {mountpoint} is not a directory")
    try:
        entries = len(os.listdir(mountpoint))
    except OSError as exc:
        raise InvalidArgument(f"mount point {mountpoint}: cannot list it: {exc.strerror}") from None
    if entries:
        raise MountPointInUse(f"mount point {mountpoint} is not empty ({entries} entries the mount would hide): "
                              "mount on an empty directory")


def _plan(args) -> _Plan:
    mountpoint = os.path.abspath(args.mountpoint)
    repo = ref = None
    if args.uri:
        from lakefuse.uri import parse_uri

        uri = parse_uri(args.uri)
        if uri.path:
            raise InvalidArgument(f"{args.uri}: mount a repository or a ref, not a path inside it")
        repo, ref = uri.repository, uri.ref
    return _Plan(mountpoint, repo, ref)


def _config(args):
    from lakefuse.config import check_cache, load_config, parse_size

    config = load_config()
    cache = config.cache
    if args.cache_dir:
        cache = dataclasses.replace(cache, dir=Path(args.cache_dir).expanduser().resolve())
    if args.cache_disk_bytes:
        cache = dataclasses.replace(cache, disk_bytes=parse_size(args.cache_disk_bytes, "--cache-disk-bytes"))
    if args.cache_ram_bytes:
        cache = dataclasses.replace(cache, ram_bytes=parse_size(args.cache_ram_bytes, "--cache-ram-bytes"))
    if args.cache_scan_bytes:
        cache = dataclasses.replace(cache, scan_bytes=parse_size(args.cache_scan_bytes, "--cache-scan-bytes"))
    check_cache(cache)
    return dataclasses.replace(config, cache=cache)


def _setup_logging(level: str, log_file: str | None, use_stderr: bool) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handler: logging.Handler = logging.FileHandler(log_file)
    elif use_stderr:
        handler = logging.StreamHandler(sys.stderr)
    else:
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level))
    logging.getLogger("pyfuse3").setLevel(max(logging.INFO, root.level))  # its DEBUG is per request


def _spool_dir(home: Path) -> str:
    """A spool directory of this process under ``<home>/spool``, beside the default storage
    root ``<home>/storage``: a finished file is then renamed into a default local storage
    namespace, not copied (the cache directory may be on another filesystem).  Leftovers of
    dead processes are removed."""
    base = home / "spool"
    base.mkdir(parents=True, exist_ok=True)
    for child in base.iterdir():
        m = re.fullmatch(r"(\d+)-\d+", child.name)
        if m and not process_alive(int(m.group(1))):
            shutil.rmtree(child, ignore_errors=True)
    path = base / f"{os.getpid()}-{time.time_ns()}"
    path.mkdir()
    return str(path)


def sd_notify(state: str) -> bool:
    """Tell systemd (``$NOTIFY_SOCKET``) our state, e.g. ``READY=1``; False if not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
        return True
    except OSError as exc:
        log.warning("sd_notify(%s) failed: %s", state, exc)
        return False


def _serve(args, plan: _Plan, on_ready, log_file: str | None = None) -> None:
    """Build the filesystem over the configured core and serve it (returns when unmounted)."""
    from lakefuse.app import App
    from lakefuse.fs.app_backend import AppBackend
    from lakefuse.fs.filesystem import LakeFilesystem
    from lakefuse.fs.readers import BlockCache, DiskBlockStore, RamBlockStore
    from lakefuse.fuse.runner import MountOptions, serve
    from lakefuse.fuse.status import MountStatusFile, layout_of

    config = _config(args)
    app = App(config)
    block_cache = None
    disk_cache = None
    spool = None
    try:
        if config.cache.disk_bytes > 0:
            from lakefuse.cache import DiskCache

            disk_cache = DiskCache(Path(config.cache.dir) / "blocks", config.cache.disk_bytes, name="blocks")
            store = DiskBlockStore(disk_cache)
        else:
            store = RamBlockStore(min(config.cache.ram_bytes, 256 * 1024 * 1024))
        block_cache = BlockCache(store)
        backend = AppBackend(app, block_cache)
        spool = _spool_dir(config.home)
        fs = LakeFilesystem(backend, spool_dir=spool, repo=plan.repo, ref=plan.ref, read_only=args.read_only,
                            change_feed=args.change_poll > 0, watched_branch_ttl=args.branch_timeout,
                            uid=args.uid, gid=args.gid,
                            uid_map=dict(args.map_uid), gid_map=dict(args.map_gid), force_owner=args.force_owner,
                            metadata_entries=args.metadata_entries, names_only_programs=args.names_only_for)
        options = MountOptions(read_only=args.read_only, allow_other=args.allow_other,
                               read_ahead_kb=args.read_ahead_kb, change_poll=args.change_poll,
                               spin=args.spin_us / 1e6, passthrough=args.passthrough,
                               passthrough_branches=args.passthrough_branches,
                               writeback_cache=args.writeback_cache, idle_reader=args.idle_reader,
                               default_permissions=args.default_permissions)

        def ready() -> None:
            sd_notify("READY=1\nSTATUS=serving " + plan.mountpoint)
            on_ready()

        uri = None if plan.repo is None else f"lakefs://{plan.repo}" + (f"/{plan.ref}" if plan.ref else "")
        status = MountStatusFile(config.home, plan.mountpoint, {
            "uri": uri, "repository": plan.repo, "ref": plan.ref, "layout": layout_of(plan.repo, plan.ref),
            "read_only": bool(args.read_only), "log_file": os.path.abspath(log_file) if log_file else None})
        serve(fs, plan.mountpoint, options, on_ready=ready, status=status)
        sd_notify("STOPPING=1")
    finally:
        if block_cache is not None:
            block_cache.close()
        if disk_cache is not None:
            disk_cache.close()  # persists its counters for 'lakefuse cache status'
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)
        app.close()


def mount_main(args) -> int:
    plan = _plan(args)
    check_mountpoint(plan.mountpoint)
    if args.foreground:
        _setup_logging(args.log_level, args.log_file, use_stderr=True)
        _serve(args, plan, on_ready=lambda: None, log_file=args.log_file)
        return 0
    return _daemonize(args, plan)


def _default_log_file(mountpoint: str) -> str:
    from lakefuse.config import default_home

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", mountpoint.strip("/")) or "root"
    return str(default_home() / "logs" / f"mount-{name}.log")


def _daemonize(args, plan: _Plan) -> int:
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: becomes the mount daemon
        os.close(read_end)
        code = 1
        try:
            os.setsid()
            os.chdir("/")
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.close(devnull)
            log_file = args.log_file or _default_log_file(plan.mountpoint)
            _setup_logging(args.log_level, log_file, use_stderr=False)

            def ready() -> None:
                os.write(write_end, b"ok\n")
                os.close(write_end)

            _serve(args, plan, on_ready=ready, log_file=log_file)
            code = 0
        except LakefuseError as exc:
            code = exc.exit_code
            _report(write_end, code, str(exc))
        except BaseException as exc:  # noqa: BLE001 - the child reports everything to the parent
            log.exception("mount failed")
            _report(write_end, 1, f"{type(exc).__name__}: {exc}")
        finally:
            logging.shutdown()
            os._exit(code)
    os.close(write_end)
    message = _read_status(read_end, pid)
    os.close(read_end)
    if message == "ok":
        return 0
    code_text, _, text = message.partition(" ")
    error = MountError(text or "the mount process failed")
    error.exit_code = int(code_text) if code_text.isdigit() else 1
    raise error


def _report(fd: int, code: int, text: str) -> None:
    line = " ".join(text.split())  # one line
    try:
        os.write(fd, f"{code} {line}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def _read_status(fd: int, pid: int) -> str:
    deadline = time.monotonic() + READY_WAIT_SECONDS
    data = b""
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            os.kill(pid, signal.SIGTERM)
            return f"1 the mount did not become ready within {READY_WAIT_SECONDS:.0f} s"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    if data:
        return data.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    _, status = os.waitpid(pid, 0)
    return f"1 the mount process exited (status {os.waitstatus_to_exitcode(status)}) before the mount was ready"


# ---------------------------------------------------------------------------- umount

def umount_main(args) -> int:
    from lakefuse.fuse.runner import is_mounted

    mountpoint = os.path.abspath(args.mountpoint)
    if not is_mounted(mountpoint):
        raise InvalidArgument(f"{mountpoint} is not mounted")
    commands = []
    if shutil.which("fusermount3"):
        commands.append(["fusermount3", "-u"] + (["-z"] if args.lazy else []) + [mountpoint])
    if shutil.which("fusermount"):
        commands.append(["fusermount", "-u"] + (["-z"] if args.lazy else []) + [mountpoint])
    if os.geteuid() == 0 and shutil.which("umount"):
        commands.append(["umount"] + (["-l"] if args.lazy else []) + [mountpoint])
    errors = []
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode == 0 and not is_mounted(mountpoint):
            return 0
        errors.append((result.stderr or result.stdout).strip() or f"{command[0]} exited {result.returncode}")
    if not commands:
        raise MountError("neither fusermount3 nor umount found")
    raise MountError(f"cannot unmount {mountpoint}: {errors[0] if errors else 'still mounted'}")
