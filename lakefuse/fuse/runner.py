"""Mounting and serving: the life of one FUSE mount.

Owns the kernel mount options (``fsname``/``subtype`` so ``mount`` and ``df`` say lakefuse,
``ro``, ``allow_other``, ``default_permissions`` (whether the kernel checks permission bits:
see ``kernel_checks_permissions``), ``max_read``), readiness (the mount answers a
``stat`` before anyone is told it is ready), the mount's read-ahead (raised through
``/sys/class/bdi/<major:minor>/read_ahead_kb`` so buffered sequential reads arrive in 1 MiB
requests), the change watcher (every ``change_poll`` seconds ``LakeFilesystem.poll_changes``
says what other writers changed on the branches, and the kernel's entries and attributes of
those paths are invalidated; a merge or reset through ``.lakefuse/`` invalidates at once, from
the thread that ran it), the mount's status file (``status.py``: written once ready, when
the error counters of ``LakeOperations`` change, and at the end, when the counters are also
logged), and the end: SIGTERM/SIGINT/SIGHUP upload written files, then unmount; an external
``umount`` ends the loop the same way.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
from dataclasses import dataclass
from typing import Callable

import pyfuse3
import trio

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import Invalidations, LakeFilesystem
from lakefuse.fuse.mountinfo import mounted_at
from lakefuse.fuse.operations import LakeOperations
from lakefuse.fuse.spin import DEFAULT_SPIN_SECONDS, idle_reader_counts
from lakefuse.fuse.status import STATUS_INTERVAL_SECONDS, MountStatusFile, format_counts

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 30.0
#: allocations between young collections of the serving process (CPython's default is 700)
GC_YOUNG_THRESHOLD = 50_000


class MountFailed(LakefuseError):
    """The filesystem could not be mounted."""

    exit_code = 1


@dataclass(frozen=True)
class MountOptions:
    read_only: bool = False
    allow_other: bool = False
    read_ahead_kb: int = 1024
    fsname: str = "lakefuse"
    worker_threads: int = 16
    change_poll: float = 0.5  # seconds between polls of the change feed (a watched filesystem)
    spin: float = DEFAULT_SPIN_SECONDS  # seconds the loop polls for the next request before it sleeps
    passthrough: bool = True  # let the kernel read local objects itself (lakefuse.fs.passthrough)
    passthrough_branches: bool = False  # ... of writable branches too
    writeback_cache: bool = False  # the kernel caches writes (and then grants no passthrough)
    #: a thread of the binding reads requests while the event loop sleeps (``LakeOperations.init``)
    idle_reader: bool = True
    #: the kernel checks permission bits even where only root reaches the mount (see
    #: ``kernel_checks_permissions``)
    default_permissions: bool = False


def kernel_checks_permissions(options: MountOptions, euid: int | None = None) -> bool:
    """Whether the mount gets ``default_permissions``: the kernel checks the POSIX permission
    rules before a request reaches lakefuse.  Always, unless the mount is root's and private
    (no ``allow_other``): the kernel then lets root's processes alone in, and they pass those
    rules anyway (but the execute bits, which the kernel checks either way, and which
    ``LakeOperations.access`` checks for access(2)).  Without the option, the kernel need not
    fetch a directory's attributes again after each create, unlink or rename in it before the
    next path walk through it: one request fewer per file for ``tar x``, ``cp -r``, ``rm -r``
    and ``git clone``.  What root gives up: a root process that dropped its capabilities
    (CAP_DAC_OVERRIDE, CAP_FOWNER) is not held to the permission bits; ``--default-permissions``
    (``options.default_permissions``) keeps the kernel's checks for such callers."""
    euid = os.geteuid() if euid is None else euid
    return options.default_permissions or options.allow_other or euid != 0


def kernel_options(options: MountOptions, euid: int | None = None) -> set[str]:
    # no max_read: libfuse refuses it unless init() sets the same; requests are bounded by
    # the session's 1 MiB buffer (max_pages 256) anyway
    opts = {f"fsname={options.fsname}", "subtype=lakefuse"}
    if kernel_checks_permissions(options, euid):
        opts.add("default_permissions")
    if options.read_only:
        opts.add("ro")
    if options.allow_other:
        opts.add("allow_other")
    return opts


def mount_device(mountpoint: str) -> str | None:
    """``major:minor`` of the filesystem mounted at ``mountpoint`` (the last one mounted
    there), read from /proc/self/mountinfo without touching the mount itself."""
    info = mounted_at(mountpoint)
    return None if info is None else info.device


def is_mounted(mountpoint: str) -> bool:
    return mount_device(mountpoint) is not None


def set_read_ahead(mountpoint: str, kilobytes: int) -> bool:
    device = mount_device(mountpoint)
    if device is None:
        return False
    path = f"/sys/class/bdi/{device}/read_ahead_kb"
    try:
        with open(path, "w") as f:
            f.write(str(kilobytes))
        return True
    except OSError as exc:
        log.warning("cannot set %s to %d (%s): sequential reads stay in small requests", path, kilobytes,
                    exc.strerror)
        return False


def serve(fs: LakeFilesystem, mountpoint: str, options: MountOptions,
          on_ready: Callable[[], None] | None = None, status: MountStatusFile | None = None) -> None:
    """Mount ``fs`` at ``mountpoint`` and serve it until unmounted or signalled.  ``on_ready``
    runs once the mount answers requests.  Raises MountFailed if it never gets there.
    ``status``: the status file to keep up to date."""
    mountpoint = os.path.abspath(mountpoint)
    if not os.path.isdir(mountpoint):
        raise MountFailed(f"mount point {mountpoint} is not a directory")
    tune_garbage_collector()
    # a write lease the spools take for an instant (``Spool.held_elsewhere``) is broken by
    # another open of the file in that instant with a signal: SIGURG, set for each lease; the
    # kernel's default, SIGIO, whose default action ends the process, is ignored as well
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    ops = LakeOperations(fs, worker_threads=options.worker_threads, spin=options.spin,
                         passthrough=options.passthrough, passthrough_branches=options.passthrough_branches,
                         idle_reader=options.idle_reader,
                         writeback_cache=options.writeback_cache)
    fs.set_kernel_invalidator(invalidate_kernel_caches)  # a merge or reset through .lakefuse/
    try:
        pyfuse3.init(ops, mountpoint, kernel_options(options))
    except RuntimeError as exc:
        raise MountFailed(f"cannot mount at {mountpoint}: {exc} (is it already mounted? is /dev/fuse usable?)") from None
    ready = []
    try:
        trio.run(_main, fs, ops, mountpoint, options,
                 lambda: (ready.append(True), on_ready and on_ready()), status)
    except KeyboardInterrupt:
        pass
    except trio.TooSlowError:
        raise MountFailed(f"{mountpoint}: the mount did not answer within {READY_TIMEOUT_SECONDS:.0f} s") from None
    finally:
        try:
            fs.close()
        except Exception:  # noqa: BLE001 - unmount anyway
            log.exception("flushing files at unmount failed")
        pyfuse3.close(unmount=True)
        log.info("unmounted %s", mountpoint)
        _final_report(ops, status, mounted_once=bool(ready))
    if not ready:
        raise MountFailed(f"{mountpoint}: the FUSE session ended before the mount was ready (see the log)")


def tune_garbage_collector() -> None:
    """Fewer, later collections: a cold ``stat`` allocates a handful of objects (inode,
    attributes, reply), so with the default thresholds (a young collection every 700
    allocations, full ones scanning every cached node) collecting cost about a quarter of
    lakefuse's own time per request.  What the process built before serving (modules, the
    core's caches) is frozen out of collections altogether."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


async def _main(fs: LakeFilesystem, ops: LakeOperations, mountpoint: str,
                options: MountOptions, on_ready, status: MountStatusFile | None = None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, fs, nursery.cancel_scope)
        nursery.start_soon(_serve_until_unmounted, nursery.cancel_scope)
        if fs.watched:
            nursery.start_soon(_watch_changes, fs, options.change_poll)
        await _wait_ready(mountpoint)
        if options.read_ahead_kb > 0:
            set_read_ahead(mountpoint, options.read_ahead_kb)
        log.info("mounted %s", mountpoint)
        if status is not None:
            await trio.to_thread.run_sync(_write_status, status, True, ops.error_counts())
            nursery.start_soon(_keep_status, ops, status)
        if on_ready is not None:
            on_ready()


def _write_status(status: MountStatusFile, mounted: bool, errors: dict) -> None:
    try:
        status.write(mounted=mounted, errors=errors)
    except OSError as exc:
        log.warning("cannot write the mount's status file %s: %s", status.path, exc.strerror or exc)


async def _keep_status(ops: LakeOperations, status: MountStatusFile) -> None:
    """Rewrite the status file when the error counters changed, at most every
    STATUS_INTERVAL_SECONDS."""
    written = ops.errors_version
    while True:
        await trio.sleep(STATUS_INTERVAL_SECONDS)
        if ops.errors_version != written:
            written = ops.errors_version
            await trio.to_thread.run_sync(_write_status, status, True, ops.error_counts())


def _final_report(ops: LakeOperations, status: MountStatusFile | None, mounted_once: bool) -> None:
    """At unmount: the error counters in the log (WARNING if any answer was an unexpected error)
    and in the status file; how many reads, opens and lookups the binding answered itself and
    how many files were read in ahead of cold walks, in the log."""
    errors = ops.error_counts()
    log.log(logging.WARNING if ops.unexpected_errors() else logging.INFO, "errors answered, per operation: %s",
            format_counts(errors))
    answered = getattr(ops.fs.native_reads, "answered", None)
    if answered is not None:
        log.info("reads answered in the binding: %d", answered())
    native = ops.native_answers
    if native is not None:
        log.info("opens answered in the binding: %d; lookups of missing names: %d", native.opens_answered(),
                 native.misses_answered())
    counts = idle_reader_counts()
    if counts is not None:
        log.info("requests the idle reader read: %d answered in the binding, %d handed to the event loop", *counts)
    log.info("files read in ahead of cold directory walks: %d", ops.fs.files_read_ahead)
    if status is not None and mounted_once:
        _write_status(status, False, errors)


async def _serve_until_unmounted(cancel_scope: trio.CancelScope) -> None:
    await pyfuse3.main()
    cancel_scope.cancel()  # unmounted from outside: stop the signal watcher too


async def _watch_changes(fs: LakeFilesystem, interval: float) -> None:
    """Poll the change feed and invalidate what the kernel holds of the changed paths, from
    a worker thread (an invalidation waits for requests on the same names to finish)."""
    while True:
        await trio.sleep(interval)
        try:
            stale = await trio.to_thread.run_sync(fs.poll_changes)
            if stale:
                await trio.to_thread.run_sync(invalidate_kernel_caches, stale)
        except Exception:  # noqa: BLE001 - keep watching; the next poll tries again
            log.exception("polling the change feed failed")


def invalidate_kernel_caches(stale: Invalidations) -> None:
    for parent, name in stale.entries:
        try:
            pyfuse3.invalidate_entry(parent, name)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # ENOENT: the kernel had forgotten it already
                log.warning("invalidating entry %r of inode %d: %s", name, parent, exc.strerror)
    for ino in stale.inodes:
        try:
            pyfuse3.invalidate_inode(ino, attr_only=True)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.warning("invalidating inode %d: %s", ino, exc.strerror)


async def _wait_ready(mountpoint: str) -> None:
    """Returns once the kernel finished INIT and a request came back (a stat of the root)."""
    with trio.fail_after(READY_TIMEOUT_SECONDS):
        await trio.to_thread.run_sync(os.stat, mountpoint, abandon_on_cancel=True)


async def _watch_signals(fs: LakeFilesystem, cancel_scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("%s: uploading written files, then unmounting", signal.Signals(signum).name)
            failures = await trio.to_thread.run_sync(fs.flush_all)
            for path, exc in failures:
                log.error("upload of %s failed: %s", path, exc)
            pyfuse3.terminate()
            return
