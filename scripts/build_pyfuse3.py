"""Build a wheel of pyfuse3 with FUSE passthrough (called by scripts/install).

Debian 12 ships libfuse 3.14; FUSE passthrough (the kernel reads and writes a registered local
file directly, so an open file's bytes never travel through the daemon) needs libfuse >= 3.16,
and pyfuse3 exposes no passthrough API.  So this script:

1. fetches the libfuse 3.17.2 source package with ``apt-get source --download-only`` (apt checks
   Debian's signatures) from the newer Debian suite that ships it.  apt runs with a private
   configuration in a temporary directory whose one ``deb-src`` entry reuses the archive URI the
   machine's own apt sources already name (read at run time, written nowhere), so nothing
   system-wide changes.  The upstream tarball's SHA-256 is checked too; libfuse is built into
   ``.venv/opt/libfuse`` with meson and ninja;
2. fetches the pyfuse3 source distribution with pip (its build requirements as wheels) and adds
   these things to its Cython sources: ``FileInfo(backing_id=...)`` (copied into the open
   reply), asking for ``FUSE_CAP_PASSTHROUGH`` in FUSE_INIT when the operations object says
   ``enable_passthrough = True``, ``pyfuse3.passthrough_session_fd()`` (the /dev/fuse
   descriptor to register backing files on, -1 when the kernel did not grant passthrough),
   and ``FileInfo(cache_readdir=...)`` as an answer of ``opendir`` (a stock pyfuse3 takes only
   an fh there): with ``keep_cache`` it tells the kernel to keep the directory's listing;
   and ``FileInfo(noflush=...)`` (FOPEN_NOFLUSH: no FLUSH request at close(2) of that handle);
   and a session loop that reads a request already queued without waiting for the descriptor
   (a non-blocking /dev/fuse: no lock, epoll registration or scheduler pass per request);
   and ``pyfuse3.readdir_reply_name`` (a READDIRPLUS entry without attributes, which the kernel
   makes no inode of) with ``pyfuse3.readdir_caller`` (the thread ID a readdir lists for);
   and GETXATTR of a name the operations object refuses (``refused_xattr_prefixes``)
   answered ENOTSUP in C, without calling its handler (``pyfuse3.xattr_prefixes_refused()``);
   and a session loop that polls /dev/fuse for up to the operations object's ``spin_wait_ns``
   before it sleeps, yielding the CPU and holding no GIL (``pyfuse3.request_spin_ns()``);
   and READ of a handle registered with ``pyfuse3.native_read_add(fh, fd, size)`` answered in
   C from the page cache (``native_read_remove``, ``native_reads_answered``);
   and OPEN of an inode registered with ``pyfuse3.native_open_add(ino, path, size, read_ahead)``
   answered in C with that file as the backing file, and the FLUSH, FSYNC and RELEASE of such
   a handle (``native_open_remove``, ``native_opens_answered``); and LOOKUP of a name a directory
   registered with ``pyfuse3.native_names_add(ino, names, timeout, expires, record)`` does not
   have answered in C with a negative entry, recorded if asked (``native_names_insert``,
   ``native_names_remove``, ``native_names_record_most``,
   ``native_misses_answered``); and OPEN of an inode registered with
   ``pyfuse3.native_branch_open_add(ino, path, size, read_ahead, expires)`` answered in C
   without passthrough, the READs (``native_read_add``'s rule) and RELEASE of its handles
   too, until ``native_branch_take(ino)`` hands them to the handlers; and the idle reader
   (``start_idle_reader``: a thread that reads requests while the session loop sleeps, on a
   clone of the /dev/fuse descriptor, with the libfuse edits in ``LIBFUSE_EDITS``);
3. builds a wheel of that pyfuse3 linked to the new libfuse (rpath, so nothing system-wide
   changes: the system's libfuse, fusermount3 and mount helpers stay as they are).

Run with the venv's Python: ``.venv/bin/python scripts/build_pyfuse3.py WHEEL_DIR`` (scripts/install
runs it while it installs the other packages, and installs the wheel afterwards).  Prints one
line per step with the seconds since ``$LAKEFUSE_INSTALL_STARTED`` (epoch seconds; default: its
own start) and a line every 15 s while a step runs.  Exits 0 when the wheel is in WHEEL_DIR, 1
with a one-line reason otherwise (scripts/install then falls back to the stock pyfuse3, which
mounts without passthrough).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LIBFUSE_VERSION = "3.17.2"
LIBFUSE_DEBIAN_VERSION = f"{LIBFUSE_VERSION}-3"  # the source package apt fetches (pinned)
LIBFUSE_SUITE = "trixie"  # the first Debian release that ships libfuse >= 3.16
LIBFUSE_SHA256 = "3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f"
PYFUSE3_VERSION = "3.5.0"
#: pyfuse3's build requirements (its pyproject.toml), installed once for both pip calls
PYFUSE3_BUILD_REQUIREMENTS = ["setuptools>=78.1.1", "setuptools_scm>=8.0", "Cython"]
APT_TIMEOUT = 180  # seconds for each apt-get call
BUILD_TIMEOUT = 900  # seconds for each build command
HEARTBEAT_SECONDS = 15  # a line this often while a step runs
PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
STARTED = float(os.environ.get("LAKEFUSE_INSTALL_STARTED") or time.time())

#: lakefuse's additions to libfuse: what a thread of the binding's own needs to read and answer
#: requests on a clone of the session's /dev/fuse descriptor beside pyfuse3's session loop (the
#: idle reader, see the pyfuse3 edits below).  libfuse's multi-threaded loop does the same with
#: these internal functions, which its version script keeps private; a reply goes to the
#: descriptor its request was read from (the request's channel), as the kernel requires.
LIBFUSE_EDITS = [
    ("lib/fuse_versionscript",
     "\t\tfuse_log_close_syslog;\n} FUSE_3.12;\n",
     "\t\tfuse_log_close_syslog;\n} FUSE_3.12;\n\n"
     "LAKEFUSE_1 {\n"
     "\tglobal:\n"
     "\t\tfuse_session_receive_buf_internal;\n"
     "\t\tfuse_session_process_buf_internal;\n"
     "\t\tfuse_chan_put;\n"
     "\t\tfuse_buf_free;\n"
     "\t\tlakefuse_clone_chan;\n"
     "} FUSE_3.17;\n"),
    ("lib/fuse_loop_mt.c",
     "static int fuse_loop_start_thread(struct fuse_mt *mt)\n",
     "/* lakefuse: a channel on a new clone of the session's /dev/fuse descriptor (NULL on failure) */\n"
     "struct fuse_chan *lakefuse_clone_chan(struct fuse_session *se);\n"
     "struct fuse_chan *lakefuse_clone_chan(struct fuse_session *se)\n"
     "{\n"
     "\tint clonefd = fuse_clone_chan_fd_default(se);\n"
     "\tstruct fuse_chan *ch;\n\n"
     "\tif (clonefd < 0)\n"
     "\t\treturn NULL;\n"
     "\tch = fuse_chan_new(clonefd);\n"
     "\tif (ch == NULL)\n"
     "\t\tclose(clonefd);\n"
     "\treturn ch;\n"
     "}\n\n"
     "static int fuse_loop_start_thread(struct fuse_mt *mt)\n"),
]

#: (file in the pyfuse3 source tree, text that must be there once, what replaces it)
EDITS = [
    ("Include/fuse_common.pxd",
     "from libc.stdint cimport uint64_t\n",
     "from libc.stdint cimport uint64_t, int32_t, uint32_t\n"),
    ("Include/fuse_common.pxd",
     "        uint64_t lock_owner\n",
     "        uint64_t lock_owner\n        int32_t backing_id\n"),
    ("Include/fuse_common.pxd",
     "        unsigned time_gran\n",
     "        unsigned time_gran\n        uint32_t max_backing_stack_depth\n"),
    ("Include/fuse_common.pxd",
     "      FUSE_CAP_HANDLE_KILLPRIV\n",
     "      FUSE_CAP_HANDLE_KILLPRIV\n      FUSE_CAP_HANDLE_KILLPRIV_V2\n      FUSE_CAP_PASSTHROUGH\n"
     "      FUSE_CAP_DIRECT_IO_ALLOW_MMAP\n"),
    ("src/pyfuse3/handlers.pxi",
     "        conn.want |= FUSE_CAP_POSIX_ACL\n",
     "        conn.want |= FUSE_CAP_POSIX_ACL\n"
     "    global passthrough_granted\n"
     "    passthrough_granted = False\n"
     "    if (getattr(operations, 'enable_passthrough', False) and\n"
     "        conn.capable & FUSE_CAP_PASSTHROUGH):\n"
     "        conn.want |= FUSE_CAP_PASSTHROUGH\n"
     "        conn.max_backing_stack_depth = 0  # backing files on a plain filesystem\n"
     "        passthrough_granted = True\n"
     "    global killpriv_v2_granted\n"
     "    killpriv_v2_granted = False\n"
     "    if (getattr(operations, 'enable_killpriv_v2', False) and\n"
     "        conn.capable & FUSE_CAP_HANDLE_KILLPRIV_V2):\n"
     "        conn.want |= FUSE_CAP_HANDLE_KILLPRIV_V2\n"
     "        killpriv_v2_granted = True\n"
     "    if conn.capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP:\n"
     "        conn.want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP\n"),
    ("src/pyfuse3/__init__.pyx",
     "cdef int session_fd\n",
     "cdef int session_fd\ncdef bint passthrough_granted = False\ncdef bint killpriv_v2_granted = False\n"),
    ("src/pyfuse3/__init__.pyx",
     "    cdef public bint nonseekable\n",
     "    cdef public bint nonseekable\n    cdef public int backing_id\n"),
    ("src/pyfuse3/__init__.pyx",
     "def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0):\n",
     "def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0, backing_id=0):\n"
     "        self.backing_id = backing_id\n"),
    ("src/pyfuse3/__init__.pyx",
     "    cdef _copy_to_fuse(self, fuse_file_info *out):\n        out.fh = self.fh\n",
     "    cdef _copy_to_fuse(self, fuse_file_info *out):\n        out.fh = self.fh\n"
     "        out.backing_id = self.backing_id\n"),
    # opendir may answer a FileInfo (fh, keep_cache, cache_readdir) instead of a bare fh: the
    # kernel then keeps the directory's listing (FOPEN_CACHE_DIR) across opens (FOPEN_KEEP_CACHE)
    ("Include/fuse_common.pxd",
     "        unsigned int nonseekable\n",
     "        unsigned int nonseekable\n        unsigned int cache_readdir\n"),
    ("src/pyfuse3/__init__.pyx",
     "    cdef public int backing_id\n",
     "    cdef public int backing_id\n    cdef public bint cache_readdir\n"),
    ("src/pyfuse3/__init__.pyx",
     "nonseekable=0, backing_id=0):\n",
     "nonseekable=0, backing_id=0, cache_readdir=0):\n        self.cache_readdir = cache_readdir\n"),
    ("src/pyfuse3/__init__.pyx",
     "        out.backing_id = self.backing_id\n",
     "        out.backing_id = self.backing_id\n"
     "        if self.cache_readdir:\n"
     "            out.cache_readdir = 1\n"
     "        else:\n"
     "            out.cache_readdir = 0\n"),
    # open may answer FileInfo(noflush=True) (FOPEN_NOFLUSH): the kernel then sends no FLUSH
    # at each close(2) of that handle (a read-only one has nothing to flush): a round trip less
    # per file read
    ("Include/fuse_common.pxd",
     "        unsigned int cache_readdir\n",
     "        unsigned int cache_readdir\n        unsigned int noflush\n"),
    ("src/pyfuse3/__init__.pyx",
     "    cdef public bint cache_readdir\n",
     "    cdef public bint cache_readdir\n    cdef public bint noflush\n"),
    ("src/pyfuse3/__init__.pyx",
     "backing_id=0, cache_readdir=0):\n",
     "backing_id=0, cache_readdir=0, noflush=0):\n        self.noflush = noflush\n"),
    ("src/pyfuse3/__init__.pyx",
     "            out.cache_readdir = 0\n",
     "            out.cache_readdir = 0\n"
     "        if self.noflush:\n"
     "            out.noflush = 1\n"
     "        else:\n"
     "            out.noflush = 0\n"),
    # the session loop reads a request that is already queued at once: /dev/fuse is made
    # non-blocking, and only when it has nothing (EAGAIN) does a task take the read lock and
    # wait for it to become readable.  Each request used to cost the lock, an epoll
    # registration and two or three passes of trio's scheduler even when the kernel had
    # queued it long before; a task that keeps finding requests lets the others run every
    # 16 of them
    ("src/pyfuse3/__init__.pyx",
     "    session_fd = fuse_session_fd(session)\n",
     "    session_fd = fuse_session_fd(session)\n"
     "    os.set_blocking(session_fd, False)  # lakefuse: see _session_loop\n"),
    ("src/pyfuse3/internal.pxi",
     "    cdef int res\n    cdef fuse_buf buf\n",
     "    cdef int res\n    cdef fuse_buf buf\n    cdef int fast_reads = 0\n"),
    ("src/pyfuse3/internal.pxi",
     "        if not await _wait_fuse_readable():\n"
     "            break\n\n"
     "        res = fuse_session_receive_buf(session, &buf)\n",
     "        res = fuse_session_receive_buf(session, &buf)\n"
     "        if res == -errno.EAGAIN:  # nothing queued: wait for the next request\n"
     "            fast_reads = 0\n"
     "            if not await _wait_fuse_readable():\n"
     "                break\n"
     "            continue\n"
     "        fast_reads += 1\n"
     "        if fast_reads >= 16:  # found queued 16 times running: let the other tasks run\n"
     "            fast_reads = 0\n"
     "            await trio.lowlevel.checkpoint()\n"),
    # ... and takes the read lock, when no other task holds it, without the extra pass of the
    # scheduler trio's Lock.acquire makes (wait_readable right after is the checkpoint)
    ("src/pyfuse3/internal.pxi",
     "        async with worker_data.read_lock:\n",
     "        try:  # lakefuse: the lock taken without a pass of the scheduler when it is free\n"
     "            worker_data.read_lock.acquire_nowait()\n"
     "        except trio.WouldBlock:\n"
     "            await worker_data.read_lock.acquire()\n"
     "        try:\n"),
    ("src/pyfuse3/internal.pxi",
     "            #log.debug('%s: fuse fd readable, unparking next task.', name)\n",
     "            #log.debug('%s: fuse fd readable, unparking next task.', name)\n"
     "        finally:\n"
     "            worker_data.read_lock.release()\n"),
    ("src/pyfuse3/handlers.pxi",
     "        c.fi.fh = await operations.opendir(c.ino, ctx)\n",
     "        opened = await operations.opendir(c.ino, ctx)\n"
     "        if isinstance(opened, FileInfo):\n"
     "            (<FileInfo> opened)._copy_to_fuse(&c.fi)\n"
     "        else:\n"
     "            c.fi.fh = opened\n"),
    ("src/pyfuse3/__init__.pyx",
     "@async_wrapper\nasync def main(",
     "def passthrough_session_fd():\n"
     "    '''The /dev/fuse descriptor to register backing files on, or -1 if the\n"
     "    kernel did not grant passthrough (added by lakefuse's build).'''\n"
     "    if session == NULL or not passthrough_granted:\n"
     "        return -1\n"
     "    return session_fd\n\n\n"
     "def handles_killpriv_v2():\n"
     "    '''Whether the kernel left clearing set-user-ID and set-group-ID bits on\n"
     "    writes to the filesystem (FUSE_HANDLE_KILLPRIV_V2; added by lakefuse's build).'''\n"
     "    return killpriv_v2_granted\n\n\n"
     "@async_wrapper\nasync def main("),
    # a READDIRPLUS entry without attributes: node ID 0, so the kernel makes no inode for it
    # (nor takes a lookup count) and only reports the name, its inode number and type, which is
    # all a walk that stats nothing (``find``) needs, at a fraction of the kernel's cost of an
    # inode per entry; and the thread ID of the process listing, whose later lookups tell
    # whether it stats what it lists
    ("src/pyfuse3/__init__.pyx",
     "def readdir_reply(ReaddirToken token, name, EntryAttributes attr, off_t next_id):\n",
     "def readdir_caller(ReaddirToken token):\n"
     "    \"The thread ID of the process this readdir lists for (added by lakefuse's build).\"\n"
     "    return fuse_req_ctx(token.req).pid\n\n\n"
     "def readdir_reply_name(ReaddirToken token, name, fuse_ino_t ino, mode_t mode, off_t next_id):\n"
     "    \"An entry without attributes (name, inode number, file type; node ID 0): the kernel\"\n"
     "    \" makes no inode of it and takes no lookup count (added by lakefuse's build).\"\n"
     "    cdef fuse_entry_param entry\n"
     "    cdef size_t len_\n"
     "    if token.buf_start == NULL:\n"
     "        token.buf_start = <char*> calloc_or_raise(token.size, sizeof(char))\n"
     "        token.buf = token.buf_start\n"
     "    string.memset(&entry, 0, sizeof(fuse_entry_param))\n"
     "    entry.attr.st_ino = ino\n"
     "    entry.attr.st_mode = mode\n"
     "    len_ = fuse_add_direntry_plus(token.req, token.buf, token.size, PyBytes_AsString(name),\n"
     "                                  &entry, next_id)\n"
     "    if len_ > token.size:\n"
     "        return False\n"
     "    token.size -= len_\n"
     "    token.buf = &token.buf[len_]\n"
     "    return True\n\n\n"
     "def readdir_reply(ReaddirToken token, name, EntryAttributes attr, off_t next_id):\n"),
    # GETXATTR of a name in a namespace the operations object says it has nothing in
    # (``refused_xattr_prefixes``, read at FUSE_INIT) is answered ENOTSUP in C, as its handler
    # would: the kernel asks for ``security.capability`` before each write(2) it makes into a
    # passthrough file (once per small file created), and each of those round trips through
    # Python cost more than the write itself
    ("src/pyfuse3/__init__.pyx",
     "cdef bint killpriv_v2_granted = False\n",
     "cdef bint killpriv_v2_granted = False\ncdef tuple refused_xattr_prefixes = ()\n"),
    ("src/pyfuse3/handlers.pxi",
     "        killpriv_v2_granted = True\n",
     "        killpriv_v2_granted = True\n"
     "    global refused_xattr_prefixes\n"
     "    refused_xattr_prefixes = tuple(getattr(operations, 'refused_xattr_prefixes', ()))\n"),
    ("src/pyfuse3/handlers.pxi",
     "                         size_t size):\n    cdef _Container c = _Container()\n",
     "                         size_t size):\n"
     "    cdef int ret\n"
     "    cdef _Container c\n"
     "    if refused_xattr_prefixes and PyBytes_FromString(name).startswith(refused_xattr_prefixes):\n"
     "        ret = fuse_reply_err(req, errno.EOPNOTSUPP)\n"
     "        if ret != 0:\n"
     "            log.error('fuse_getxattr(): fuse_reply_err failed with %s', strerror(-ret))\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def xattr_prefixes_refused():\n"
     "    \"The name prefixes whose GETXATTR is answered ENOTSUP without calling the handler\"\n"
     "    \" (added by lakefuse's build).\"\n"
     "    return refused_xattr_prefixes\n\n\n"
     "def handles_killpriv_v2():\n"),
    # when /dev/fuse has nothing queued, the session loop first polls it for up to
    # ``spin_wait_ns`` (read from the operations object at FUSE_INIT), yielding the CPU between
    # polls and holding no GIL, and only then sleeps in trio.  Requests come in runs (a stat
    # loop, ``rsync``, ``git clone``, Spark opening files), each sent microseconds after the
    # last reply; a loop still polling reads it at once, where a sleeping one had to be woken
    # (on a virtual machine an interrupt to an idle CPU, tens of microseconds each way) and
    # went through trio's lock, epoll registration and scheduler passes first
    ("src/pyfuse3/__init__.pyx",
     "cdef tuple refused_xattr_prefixes = ()\n",
     "cdef tuple refused_xattr_prefixes = ()\ncdef long spin_wait_ns = 0\n"),
    ("src/pyfuse3/handlers.pxi",
     "    refused_xattr_prefixes = tuple(getattr(operations, 'refused_xattr_prefixes', ()))\n",
     "    refused_xattr_prefixes = tuple(getattr(operations, 'refused_xattr_prefixes', ()))\n"
     "    global spin_wait_ns\n"
     "    spin_wait_ns = max(0, min(int(getattr(operations, 'spin_wait_ns', 0)), 10000000))\n"),
    ("src/pyfuse3/internal.pxi",
     "@async_wrapper\nasync def _session_loop(nursery, int min_tasks, int max_tasks):\n",
     "cdef extern from '<poll.h>' nogil:\n"
     "    struct pollfd:\n"
     "        int fd\n"
     "        short events\n"
     "        short revents\n"
     "    int poll(pollfd *fds, unsigned long nfds, int timeout)\n"
     "    enum: POLLIN\n\n"
     "cdef extern from '<sched.h>' nogil:\n"
     "    int sched_yield()\n\n"
     "from posix.time cimport clock_gettime, CLOCK_MONOTONIC\n\n"
     "cdef bint _spin_for_request(int fd, long window_ns) noexcept:\n"
     "    # poll fd for up to window_ns, yielding the CPU between polls, without the GIL;\n"
     "    # whether a request is queued (added by lakefuse's build)\n"
     "    cdef pollfd p\n"
     "    cdef timespec start, now\n"
     "    cdef int ready = 0\n"
     "    p.fd = fd\n"
     "    p.events = POLLIN\n"
     "    with nogil:\n"
     "        clock_gettime(CLOCK_MONOTONIC, &start)\n"
     "        while True:\n"
     "            p.revents = 0\n"
     "            ready = poll(&p, 1, 0)\n"
     "            if ready != 0:\n"
     "                break\n"
     "            clock_gettime(CLOCK_MONOTONIC, &now)\n"
     "            if (now.tv_sec - start.tv_sec) * 1000000000 + (now.tv_nsec - start.tv_nsec) >= window_ns:\n"
     "                break\n"
     "            sched_yield()\n"
     "    return ready > 0 and (p.revents & POLLIN) != 0\n\n\n"
     "@async_wrapper\nasync def _session_loop(nursery, int min_tasks, int max_tasks):\n"),
    ("src/pyfuse3/internal.pxi",
     "        if res == -errno.EAGAIN:  # nothing queued: wait for the next request\n"
     "            fast_reads = 0\n",
     "        if res == -errno.EAGAIN:  # nothing queued: wait for the next request\n"
     "            if spin_wait_ns > 0 and _spin_for_request(session_fd, spin_wait_ns):\n"
     "                continue  # one came while polling: read it without sleeping\n"
     "            fast_reads = 0\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def request_spin_ns():\n"
     "    \"How long the session loop polls /dev/fuse for the next request before it sleeps,\"\n"
     "    \" in nanoseconds (0: never; ``spin_wait_ns`` of the operations object, read at\"\n"
     "    \" FUSE_INIT; added by lakefuse's build).\"\n"
     "    return spin_wait_ns\n\n\n"
     "def handles_killpriv_v2():\n"),
    # READ of a handle the operations object registered as a local file (``native_read_add``:
    # handle, descriptor, size) is answered in C from the page cache: a preadv2(RWF_NOWAIT)
    # into one reused buffer and the reply, with the GIL held throughout (so the descriptor
    # cannot be closed meanwhile: ``native_read_remove`` comes first, under the GIL), without
    # a coroutine, trio or the handler.  Anything else (bytes not all cached, an error) goes
    # to the handler as before, which also decides everything about unregistered handles.
    # Reading a small file costs an OPEN, a READ and a RELEASE; the READ's trip through Python
    # cost more than the pread itself
    ("src/pyfuse3/__init__.pyx",
     "cdef long spin_wait_ns = 0\n",
     "cdef long spin_wait_ns = 0\n"
     "cdef dict native_reads = {}\n"
     "cdef char *native_read_buffer = NULL\n"
     "cdef size_t native_read_buffer_size = 0\n"
     "cdef unsigned long long native_read_count = 0\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_read (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,\n"
     "                     fuse_file_info *fi):\n"
     "    cdef _Container c = _Container()\n",
     "cdef extern from '<sys/uio.h>' nogil:\n"
     "    struct iovec:\n"
     "        void *iov_base\n"
     "        size_t iov_len\n"
     "    ssize_t preadv2(int fd, const iovec *iov, int iovcnt, off_t offset, int flags)\n"
     "    enum: RWF_NOWAIT\n\n"
     "cdef int _read_natively(fuse_req_t req, uint64_t fh, size_t size, off_t off) except -1:\n"
     "    # 1 if READ was answered from the file registered for fh, all of it cached; else 0\n"
     "    # (added by lakefuse's build)\n"
     "    global native_read_buffer, native_read_buffer_size, native_read_count\n"
     "    cdef int fd\n"
     "    cdef unsigned long long file_size\n"
     "    cdef size_t want = 0\n"
     "    cdef ssize_t got\n"
     "    cdef iovec iov\n"
     "    cdef void *grown\n"
     "    cdef int ret\n"
     "    registered = native_reads.get(fh)\n"
     "    if registered is None:\n"
     "        return 0\n"
     "    fd, file_size = registered\n"
     "    if <unsigned long long> off < file_size:\n"
     "        want = <size_t> min(<unsigned long long> size, file_size - <unsigned long long> off)\n"
     "    if want > native_read_buffer_size:\n"
     "        grown = stdlib.realloc(native_read_buffer, want)\n"
     "        if grown == NULL:\n"
     "            return 0\n"
     "        native_read_buffer = <char*> grown\n"
     "        native_read_buffer_size = want\n"
     "    if want > 0:\n"
     "        iov.iov_base = native_read_buffer\n"
     "        iov.iov_len = want\n"
     "        got = preadv2(fd, &iov, 1, off, RWF_NOWAIT)\n"
     "        if got < 0 or <size_t> got != want:\n"
     "            return 0\n"
     "    ret = fuse_reply_buf(req, native_read_buffer, want)\n"
     "    if ret != 0:\n"
     "        log.error('fuse_read(): fuse_reply_buf failed with %s', strerror(-ret))\n"
     "    native_read_count += 1\n"
     "    return 1\n\n\n"
     "cdef void fuse_read (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,\n"
     "                     fuse_file_info *fi):\n"
     "    cdef _Container c\n"
     "    if native_reads and _read_natively(req, fi.fh, size, off):\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def native_read_add(fh, int fd, size):\n"
     "    \"Answer READ of handle fh in C from the file open as fd, size bytes long, when every\"\n"
     "    \" byte asked for is in the page cache (else the read handler is called as before);\"\n"
     "    \" until native_read_remove(fh), which must come before fd is closed (added by\"\n"
     "    \" lakefuse's build).\"\n"
     "    native_reads[fh] = (fd, size)\n\n\n"
     "def native_read_remove(fh):\n"
     "    \"Send READ of handle fh to the read handler again (added by lakefuse's build).\"\n"
     "    native_reads.pop(fh, None)\n\n\n"
     "def native_reads_answered():\n"
     "    \"How many READs were answered by native_read_add's rule (added by lakefuse's build).\"\n"
     "    return native_read_count\n\n\n"
     "def handles_killpriv_v2():\n"),
    # OPEN of a file the operations object registered as an immutable local file
    # (``native_open_add``: inode, path, size, read-ahead) is answered in C: the file is
    # registered with the kernel as the open's backing file (FUSE passthrough: the kernel then
    # reads it itself), shared by every handle of the inode open at once, and released with the
    # last of them, whose RELEASE is answered in C too (the handle carries native_open_fh).
    # Only read-only opens; anything else, and any failure (the file missing or not that size,
    # the kernel refusing), goes to the handler as before, and a failure takes the inode's
    # registration back first, so the handler decides every later open of it.  Reading a small
    # commit file costs an OPEN and a RELEASE, each a trip through trio and Python several
    # times longer than the system calls it makes.
    ("Include/fuse_lowlevel.pxd",
     "    int fuse_reply_open(fuse_req_t req, fuse_file_info *fi)\n",
     "    int fuse_reply_open(fuse_req_t req, fuse_file_info *fi)\n"
     "    int fuse_passthrough_open(fuse_req_t req, int fd)\n"
     "    int fuse_passthrough_close(fuse_req_t req, int backing_id)\n"),
    ("src/pyfuse3/__init__.pyx",
     "cdef dict native_reads = {}\n",
     "cdef dict native_reads = {}\n"
     "cdef dict native_opens = {}\n"
     "cdef dict native_open_files = {}\n"
     "cdef unsigned long long native_open_count = 0\n"
     "cdef unsigned long long native_open_fh = (<unsigned long long> 1) << 62  # in its handles\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_open (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c = _Container()\n",
     "cdef extern from '<fcntl.h>' nogil:\n"
     "    int lf_open 'open' (const char *path, int flags)\n"
     "    int lf_posix_fadvise 'posix_fadvise' (int fd, off_t offset, off_t length, int advice)\n"
     "    enum: O_ACCMODE\n"
     "    enum: O_RDONLY\n"
     "    enum: O_TRUNC\n"
     "    enum: O_CLOEXEC\n"
     "    enum: POSIX_FADV_WILLNEED\n\n"
     "cdef extern from '<sys/stat.h>' nogil:\n"
     "    int lf_fstat 'fstat' (int fd, struct_stat *buf)\n\n"
     "cdef int _open_natively(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) except -1:\n"
     "    # 1 if OPEN was answered with the backing file registered for ino; else 0, and a\n"
     "    # registration that failed is taken back (added by lakefuse's build)\n"
     "    global native_open_count\n"
     "    cdef int fd\n"
     "    cdef int backing_id\n"
     "    cdef int ret\n"
     "    cdef struct_stat st\n"
     "    cdef long long size\n"
     "    cdef long long read_ahead\n"
     "    if (fi.flags & O_ACCMODE) != O_RDONLY or (fi.flags & O_TRUNC):\n"
     "        return 0\n"
     "    opened = native_open_files.get(ino)\n"
     "    if opened is None:\n"
     "        registered = native_opens.get(ino)\n"
     "        if registered is None:\n"
     "            return 0\n"
     "        path, size, read_ahead = registered\n"
     "        fd = lf_open(<bytes> path, O_RDONLY | O_CLOEXEC)\n"
     "        if fd < 0:\n"
     "            del native_opens[ino]\n"
     "            return 0\n"
     "        backing_id = -1\n"
     "        if lf_fstat(fd, &st) == 0 and st.st_size == size:\n"
     "            if read_ahead > 0:\n"
     "                lf_posix_fadvise(fd, 0, read_ahead, POSIX_FADV_WILLNEED)\n"
     "            backing_id = fuse_passthrough_open(req, fd)\n"
     "        unistd.close(fd)\n"
     "        if backing_id <= 0:\n"
     "            del native_opens[ino]\n"
     "            return 0\n"
     "        opened = [backing_id, 0]\n"
     "        native_open_files[ino] = opened\n"
     "    opened[1] += 1\n"
     "    fi.fh = native_open_fh | ino\n"
     "    fi.backing_id = opened[0]\n"
     "    fi.direct_io = 0\n"
     "    fi.keep_cache = 0\n"
     "    fi.noflush = 1\n"
     "    ret = fuse_reply_open(req, fi)\n"
     "    if ret != 0:  # no RELEASE will come for this handle\n"
     "        log.error('fuse_open(): fuse_reply_open failed with %s', strerror(-ret))\n"
     "        _release_native_handle(req, ino)\n"
     "    native_open_count += 1\n"
     "    return 1\n\n\n"
     "cdef void _release_native_handle(fuse_req_t req, fuse_ino_t ino):\n"
     "    # one handle of ino opened by _open_natively is closed (added by lakefuse's build)\n"
     "    opened = native_open_files.get(ino)\n"
     "    if opened is None:\n"
     "        return\n"
     "    opened[1] -= 1\n"
     "    if opened[1] <= 0:\n"
     "        del native_open_files[ino]\n"
     "        fuse_passthrough_close(req, opened[0])\n\n\n"
     "cdef void fuse_open (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c\n"
     "    if native_opens and _open_natively(req, ino, fi):\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_release (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c = _Container()\n",
     "cdef void fuse_release (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c\n"
     "    cdef int ret\n"
     "    if fi.fh & native_open_fh:\n"
     "        _release_native_handle(req, ino)\n"
     "        ret = fuse_reply_err(req, 0)\n"
     "        if ret != 0:\n"
     "            log.error('fuse_release(): fuse_reply_err failed with %s', strerror(-ret))\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def native_open_add(ino, path, size, read_ahead=0):\n"
     "    \"Answer read-only OPENs of inode ino in C: the file at path (bytes), which must be\"\n"
     "    \" size bytes long, becomes the open's backing file (passthrough; the first open also\"\n"
     "    \" asks the kernel to read its first read_ahead bytes in).  Until native_open_remove(ino)\"\n"
     "    \" or a failure, which sends the open, and every later one, to the open handler\"\n"
     "    \" (added by lakefuse's build).\"\n"
     "    native_opens[ino] = (bytes(path), int(size), int(read_ahead))\n\n\n"
     "def native_open_remove(ino):\n"
     "    \"Send OPENs of inode ino to the open handler again (added by lakefuse's build).\"\n"
     "    native_opens.pop(ino, None)\n\n\n"
     "def native_opens_answered():\n"
     "    \"How many OPENs were answered by native_open_add's rule (added by lakefuse's build).\"\n"
     "    return native_open_count\n\n\n"
     "def handles_killpriv_v2():\n"),
    # FLUSH and FSYNC of a handle _open_natively made: nothing to write back (a read-only
    # handle of a file that never changes), answered in C; the handlers do not know the handle
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_flush (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c = _Container()\n",
     "cdef void fuse_flush (fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi):\n"
     "    cdef _Container c\n"
     "    if fi.fh & native_open_fh:\n"
     "        fuse_reply_err(req, 0)\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_fsync (fuse_req_t req, fuse_ino_t ino, int datasync,\n"
     "                      fuse_file_info *fi):\n"
     "    cdef _Container c = _Container()\n",
     "cdef void fuse_fsync (fuse_req_t req, fuse_ino_t ino, int datasync,\n"
     "                      fuse_file_info *fi):\n"
     "    cdef _Container c\n"
     "    if fi.fh & native_open_fh:\n"
     "        fuse_reply_err(req, 0)\n"
     "        return\n"
     "    c = _Container()\n"),
    # LOOKUP of a name that a directory the operations object registered with its whole list of
    # names (``native_names_add``: inode, names, timeout) does not have is answered in C: a
    # negative entry the kernel keeps for that timeout, without a coroutine, trio or the
    # handler.  A name the directory has, and any directory not registered, goes to the
    # handler as before; so does every LOOKUP once the registration's ``expires`` (a
    # CLOCK_MONOTONIC time, Python's ``time.monotonic()``; 0: never) has passed, and the
    # registration is dropped then (no answer's timeout outlives it).  ``native_names_insert``
    # adds a name to a registered directory's (a name about to be made in it, or one another
    # writer made).  A registration made with ``record`` remembers the names it answered with
    # a timeout (as many as ``native_names_record_most`` allows in all registrations; past
    # that it answers with timeout 0), so that the operations object can have the kernel drop
    # those entries when the directory changes (``native_names_insert`` says whether the name
    # was recorded; ``native_names_remove`` returns the record).  Hadoop's checksum filesystem
    # looks up a missing ``.<name>.crc`` beside every file it opens.
    ("src/pyfuse3/__init__.pyx",
     "cdef dict native_opens = {}\n",
     "cdef dict native_opens = {}\n"
     "cdef dict native_names = {}\n"
     "cdef unsigned long long native_miss_count = 0\n"
     "cdef Py_ssize_t native_recorded_count = 0  # names in every registration's record\n"
     "cdef Py_ssize_t native_recorded_most = 0\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void fuse_lookup (fuse_req_t req, fuse_ino_t parent,\n"
     "                       const_char *name):\n"
     "    cdef _Container c = _Container()\n",
     "cdef extern from '<time.h>' nogil:\n"
     "    int lf_clock_gettime 'clock_gettime' (int clock, timespec *now)\n"
     "    enum: LF_CLOCK_MONOTONIC 'CLOCK_MONOTONIC'\n\n"
     "cdef int _lookup_missing_natively(fuse_req_t req, fuse_ino_t parent, const_char *name) except -1:\n"
     "    # 1 if LOOKUP was answered with a negative entry: the directory registered for parent\n"
     "    # has no such name; else 0 (added by lakefuse's build)\n"
     "    global native_miss_count, native_recorded_count\n"
     "    cdef fuse_entry_param entry\n"
     "    cdef int ret\n"
     "    cdef timespec now\n"
     "    cdef const unsigned char *byte = <const unsigned char *> name\n"
     "    registered = native_names.get(parent)\n"
     "    if registered is None:\n"
     "        return 0\n"
     "    while byte[0]:  # names of ASCII only: the handler answers the rest (EILSEQ, ...)\n"
     "        if byte[0] >= 0x80:\n"
     "            return 0\n"
     "        byte += 1\n"
     "    names, timeout, expires, recorded = registered\n"
     "    if expires > 0:\n"
     "        lf_clock_gettime(LF_CLOCK_MONOTONIC, &now)\n"
     "        left = expires - (now.tv_sec + now.tv_nsec * 1e-9)\n"
     "        if left <= 0:\n"
     "            _drop_native_names(parent)\n"
     "            return 0\n"
     "        if timeout > left:  # the kernel keeps no answer past the registration\n"
     "            timeout = left\n"
     "    key = PyBytes_FromString(name)\n"
     "    if key in names or len(key) > 255 or key == b'.' or key == b'..':\n"
     "        return 0\n"
     "    if recorded is not None and timeout > 0:  # a negative entry the kernel keeps: recorded\n"
     "        if key not in recorded:\n"
     "            if native_recorded_count < native_recorded_most:\n"
     "                recorded.add(key)\n"
     "                native_recorded_count += 1\n"
     "            else:\n"
     "                timeout = 0  # no more records: an answer the kernel does not keep\n"
     "    string.memset(&entry, 0, sizeof(entry))\n"
     "    entry.attr_timeout = timeout\n"
     "    entry.entry_timeout = timeout\n"
     "    ret = fuse_reply_entry(req, &entry)\n"
     "    if ret != 0:\n"
     "        log.error('fuse_lookup(): fuse_reply_entry failed with %s', strerror(-ret))\n"
     "    native_miss_count += 1\n"
     "    return 1\n\n\n"
     "cdef object _drop_native_names(parent):\n"
     "    # end the registration of directory parent; its record (added by lakefuse's build)\n"
     "    global native_recorded_count\n"
     "    registered = native_names.pop(parent, None)\n"
     "    if registered is None or registered[3] is None:\n"
     "        return frozenset()\n"
     "    native_recorded_count -= len(registered[3])\n"
     "    return frozenset(registered[3])\n\n\n"
     "cdef void fuse_lookup (fuse_req_t req, fuse_ino_t parent,\n"
     "                       const_char *name):\n"
     "    cdef _Container c\n"
     "    if native_names and _lookup_missing_natively(req, parent, name):\n"
     "        return\n"
     "    c = _Container()\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def native_names_add(ino, names, timeout, expires=0.0, record=False):\n"
     "    \"Answer LOOKUP in directory ino of a name not in names (bytes: all of the\"\n"
     "    \" directory's) in C, with a negative entry the kernel keeps timeout seconds; until\"\n"
     "    \" native_names_remove(ino) or the time.monotonic() time expires (0: never; no entry\"\n"
     "    \" is kept past it).  record: remember the names answered so (native_names_remove),\"\n"
     "    \" as many as native_names_record_most allows in all, then answer with timeout 0\"\n"
     "    \" (added by lakefuse's build).\"\n"
     "    _drop_native_names(ino)\n"
     "    native_names[ino] = (set(names), float(timeout), float(expires), set() if record else None)\n\n\n"
     "def native_names_record_most(most):\n"
     "    \"How many names native_names_add's records may hold in all (added by lakefuse's build).\"\n"
     "    global native_recorded_most\n"
     "    native_recorded_most = max(0, int(most))\n\n\n"
     "def native_names_insert(ino, name):\n"
     "    \"Send LOOKUPs of name (bytes) in directory ino to the lookup handler from now on, if\"\n"
     "    \" the directory is registered; whether the kernel was given a recorded negative entry\"\n"
     "    \" for it, whose record this drops (added by lakefuse's build).\"\n"
     "    global native_recorded_count\n"
     "    registered = native_names.get(ino)\n"
     "    if registered is None:\n"
     "        return False\n"
     "    name = bytes(name)\n"
     "    registered[0].add(name)\n"
     "    recorded = registered[3]\n"
     "    if recorded is not None and name in recorded:\n"
     "        recorded.discard(name)\n"
     "        native_recorded_count -= 1\n"
     "        return True\n"
     "    return False\n\n\n"
     "def native_names_remove(ino):\n"
     "    \"Send every LOOKUP in directory ino to the lookup handler again; the names the kernel\"\n"
     "    \" was given recorded negative entries for, which may still hold (added by lakefuse's build).\"\n"
     "    return _drop_native_names(ino)\n\n\n"
     "def native_misses_answered():\n"
     "    \"How many LOOKUPs were answered by native_names_add's rule (added by lakefuse's build).\"\n"
     "    return native_miss_count\n\n\n"
     "def handles_killpriv_v2():\n"),
    # A thread that reads requests while the session loop sleeps (the idle reader; see
    # _idle_reader_loop below): a dataset read by two busy processes, whose every request the
    # binding answers in C, waited for the one event loop to be woken through trio's epoll and
    # scheduler; the idle reader is woken alone, blocked in read(2) on its own clone of
    # /dev/fuse (libfuse's channels: LIBFUSE_EDITS)
    ("src/pyfuse3/__init__.pyx",
     "cdef long spin_wait_ns = 0\n",
     "cdef long spin_wait_ns = 0\n"
     "from cpython.pythread cimport PyThread_get_thread_ident\n"
     "cdef unsigned long idle_reader_ident = 0\n"
     "cdef object idle_reader_retval = None\n"
     "cdef object idle_reader_thread = None\n"
     "cdef object idle_reader_armed = None\n"
     "cdef object handoff_event = None\n"
     "cdef object main_nursery = None\n"
     "cdef int recent_handler_requests = IDLE_READER_MOST\n"
     "cdef unsigned long long idle_reader_answered = 0\n"
     "cdef unsigned long long idle_reader_handed = 0\n"),
    ("src/pyfuse3/__init__.pyx",
     "cdef int session_fd\n",
     "cdef int session_fd\n"
     "# the idle reader (added by lakefuse's build): how the session loop tells requests that\n"
     "# call a handler from requests answered in C: +STEP per handler request, -1 per C answer,\n"
     "# within [0, MOST]; the idle reader reads only while it is below ARM_BELOW\n"
     "cdef enum:\n"
     "    IDLE_READER_STEP = 4\n"
     "    IDLE_READER_MOST = 32\n"
     "    IDLE_READER_ARM_BELOW = 8\n"),
    ("src/pyfuse3/internal.pxi",
     "cdef void save_retval(object val):\n"
     "    global py_retval\n",
     "cdef void save_retval(object val):\n"
     "    global py_retval, idle_reader_retval\n"
     "    if idle_reader_ident != 0 and PyThread_get_thread_ident() == idle_reader_ident:\n"
     "        idle_reader_retval = val  # a request the idle reader read (added by lakefuse's build)\n"
     "        return\n"),
    ("src/pyfuse3/internal.pxi",
     "    cdef int fast_reads = 0\n",
     "    cdef int fast_reads = 0\n"
     "    global recent_handler_requests\n"),
    ("src/pyfuse3/internal.pxi",
     "        fuse_session_process_buf(session, &buf)\n"
     "        if py_retval is not None:\n",
     "        fuse_session_process_buf(session, &buf)\n"
     "        _count_request(py_retval is not None)  # lakefuse: see _idle_reader_loop\n"
     "        if py_retval is not None:\n"),
    ("src/pyfuse3/internal.pxi",
     "            await trio.lowlevel.wait_readable(session_fd)\n",
     "            if idle_reader_ident != 0 and recent_handler_requests < IDLE_READER_ARM_BELOW:\n"
     "                await _sleep_until_handed()  # lakefuse: the idle reader reads meanwhile\n"
     "            else:\n"
     "                await trio.lowlevel.wait_readable(session_fd)\n"),
    ("src/pyfuse3/__init__.pyx",
     "    fuse_session_exit(session)\n"
     "    trio.lowlevel.notify_closing(session_fd)\n",
     "    fuse_session_exit(session)\n"
     "    trio.lowlevel.notify_closing(session_fd)\n"
     "    if handoff_event is not None:\n"
     "        handoff_event.set()\n"
     "    if idle_reader_armed is not None:\n"
     "        idle_reader_armed.set()\n"),
    ("src/pyfuse3/__init__.pyx",
     "    global trio_token\n"
     "    trio_token = trio.lowlevel.current_trio_token()\n",
     "    global trio_token, main_nursery\n"
     "    trio_token = trio.lowlevel.current_trio_token()\n"),
    ("src/pyfuse3/__init__.pyx",
     "            worker_data.task_count = 1\n"
     "            worker_data.task_serial = 1\n",
     "            main_nursery = nursery  # lakefuse: where the idle reader's handlers run\n"
     "            worker_data.task_count = 1\n"
     "            worker_data.task_serial = 1\n"),
    ("src/pyfuse3/__init__.pyx",
     "    log.debug('Calling fuse_session_destroy')\n"
     "    fuse_session_destroy(session)\n",
     "    if not _stop_idle_reader():  # lakefuse: it may still read; the session must outlive it\n"
     "        log.warning('the idle reader did not stop; the FUSE session is left as it is')\n"
     "        return\n"
     "    log.debug('Calling fuse_session_destroy')\n"
     "    fuse_session_destroy(session)\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "cdef extern from *:\n"
     '    """\n'
     "    struct fuse_chan;\n"
     "    struct fuse_chan *lakefuse_clone_chan(struct fuse_session *se);\n"
     "    int fuse_session_receive_buf_internal(struct fuse_session *se, struct fuse_buf *buf, struct fuse_chan *ch);\n"
     "    void fuse_session_process_buf_internal(struct fuse_session *se, const struct fuse_buf *buf,\n"
     "                                           struct fuse_chan *ch);\n"
     "    void fuse_chan_put(struct fuse_chan *ch);\n"
     "    void fuse_buf_free(struct fuse_buf *buf);\n"
     '    """\n'
     "    struct fuse_chan:\n"
     "        pass\n"
     "    fuse_chan *lakefuse_clone_chan(fuse_session *se)\n"
     "    int fuse_session_receive_buf_internal(fuse_session *se, fuse_buf *buf, fuse_chan *ch) nogil\n"
     "    void fuse_session_process_buf_internal(fuse_session *se, const fuse_buf *buf, fuse_chan *ch)\n"
     "    void fuse_chan_put(fuse_chan *ch)\n"
     "    void fuse_buf_free(fuse_buf *buf)\n"
     "\n"
     "cdef fuse_chan *idle_reader_chan = NULL  # the idle reader's clone of /dev/fuse\n"
     "\n"
     "\n"
     "cdef void _count_request(bint to_handler):\n"
     "    # a request processed: whether it went to a handler (under the GIL; added by lakefuse's build)\n"
     "    global recent_handler_requests\n"
     "    if to_handler:\n"
     "        recent_handler_requests = min(IDLE_READER_MOST, recent_handler_requests + IDLE_READER_STEP)\n"
     "    elif recent_handler_requests > 0:\n"
     "        recent_handler_requests -= 1\n"
     "\n"
     "\n"
     "async def _sleep_until_handed():\n"
     "    # the session loop's sleep while the idle reader reads: until it hands a request over (or\n"
     "    # the session ends; added by lakefuse's build)\n"
     "    global handoff_event\n"
     "    handoff_event = trio.Event()\n"
     "    if fuse_session_exited(session):\n"
     "        return\n"
     "    idle_reader_armed.set()\n"
     "    await handoff_event.wait()\n"
     "\n"
     "\n"
     "def _handed(coro):\n"
     "    # on the event loop: run the handler of a request the idle reader read, and wake the\n"
     "    # session loop, which reads the next requests itself (added by lakefuse's build)\n"
     "    main_nursery.start_soon(_await_handed, coro)\n"
     "    _wake_session_loop()\n"
     "\n"
     "\n"
     "async def _await_handed(coro):\n"
     "    await coro\n"
     "\n"
     "\n"
     "def _idle_reader_loop():\n"
     "    # The idle reader (added by lakefuse's build): a thread that reads requests from its own\n"
     "    # clone of /dev/fuse, blocking in read(2), while the session loop sleeps.  The kernel wakes\n"
     "    # one reader blocked in read(2) per request, where it wakes every waiter in poll(2) or\n"
     "    # epoll (the session loop's sleep in trio, and its cost: the event loop's wake-up and a\n"
     "    # pass of the scheduler before the request is even read).  It processes what it reads\n"
     "    # with the GIL, as the session loop does: the binding's C answers reply at once, on its\n"
     "    # descriptor; a request for a handler is handed to the event loop (its coroutine started\n"
     "    # there), and the reader stops reading until the session loop sleeps again (it reads the\n"
     "    # next requests itself meanwhile, without the hand-over's two wake-ups).  The session loop\n"
     "    # sleeps this way only while most recent requests were answered in C (_count_request):\n"
     "    # reading a dataset, yes; creating files, whose every request but the lookup goes to a\n"
     "    # handler, no: it sleeps in trio as before.\n"
     "    global idle_reader_ident, idle_reader_retval, idle_reader_answered, idle_reader_handed, idle_reader_chan\n"
     "    cdef fuse_buf buf\n"
     "    cdef int res\n"
     "    cdef fuse_chan *chan = idle_reader_chan\n"
     "    idle_reader_ident = PyThread_get_thread_ident()\n"
     "    buf.mem = NULL\n"
     "    buf.size = 0\n"
     "    buf.pos = 0\n"
     "    buf.flags = 0\n"
     "    armed = idle_reader_armed\n"
     "    try:\n"
     "        while not fuse_session_exited(session):\n"
     "            if not armed.is_set():\n"
     "                armed.wait()\n"
     "                continue\n"
     "            with nogil:\n"
     "                res = fuse_session_receive_buf_internal(session, &buf, chan)\n"
     "            if res == -errno.EINTR or res == -errno.EAGAIN:\n"
     "                continue\n"
     "            if res <= 0:\n"
     "                break  # the session ended (ENODEV: unmounted)\n"
     "            idle_reader_retval = None\n"
     "            fuse_session_process_buf_internal(session, &buf, chan)\n"
     "            coro = idle_reader_retval\n"
     "            _count_request(coro is not None)\n"
     "            if coro is None:\n"
     "                idle_reader_answered += 1\n"
     "                continue\n"
     "            idle_reader_retval = None\n"
     "            idle_reader_handed += 1\n"
     "            armed.clear()\n"
     "            trio_token.run_sync_soon(_handed, coro)\n"
     "    except BaseException:\n"
     "        log.exception('the idle reader failed; the session loop reads alone')\n"
     "    finally:\n"
     "        idle_reader_ident = 0\n"
     "        fuse_buf_free(&buf)\n"
     "        fuse_chan_put(chan)  # closes the clone\n"
     "        idle_reader_chan = NULL\n"
     "        token = trio_token\n"
     "        if token is not None:  # a session loop asleep until a hand-over reads again\n"
     "            try:\n"
     "                token.run_sync_soon(_wake_session_loop)\n"
     "            except Exception:\n"
     "                pass\n"
     "\n"
     "\n"
     "def _wake_session_loop():\n"
     "    if handoff_event is not None:\n"
     "        handoff_event.set()\n"
     "\n"
     "\n"
     "cdef bint _stop_idle_reader():\n"
     "    # at close: wake the idle reader and wait for it to end (unmounted, its read returns\n"
     "    # ENODEV); whether it ended (added by lakefuse's build)\n"
     "    global idle_reader_thread, idle_reader_armed\n"
     "    if idle_reader_thread is None:\n"
     "        return True\n"
     "    fuse_session_exit(session)\n"
     "    idle_reader_armed.set()\n"
     "    idle_reader_thread.join(5)\n"
     "    if idle_reader_thread.is_alive():\n"
     "        return False\n"
     "    idle_reader_thread = None\n"
     "    idle_reader_armed = None\n"
     "    return True\n"
     "\n"
     "\n"
     "def start_idle_reader():\n"
     '    "Start the idle reader (see _idle_reader_loop), after FUSE_INIT, on the event loop\'s"\n'
     '    " thread; whether it runs (added by lakefuse\'s build)."\n'
     "    global idle_reader_thread, idle_reader_armed, idle_reader_chan\n"
     "    import threading as _threading\n"
     "    if session == NULL or idle_reader_thread is not None:\n"
     "        return False\n"
     "    idle_reader_chan = lakefuse_clone_chan(session)\n"
     "    if idle_reader_chan == NULL:\n"
     "        return False\n"
     "    idle_reader_armed = _threading.Event()\n"
     "    idle_reader_thread = _threading.Thread(target=_idle_reader_loop, name='pyfuse3-idle-reader',\n"
     "                                           daemon=True)\n"
     "    idle_reader_thread.start()\n"
     "    return True\n"
     "\n"
     "\n"
     "def idle_reader_counts():\n"
     '    "(requests the idle reader answered in C, requests it handed to the event loop) (added"\n'
     '    " by lakefuse\'s build)."\n'
     "    return idle_reader_answered, idle_reader_handed\n"
     "\n"
     "\n"
     "def handles_killpriv_v2():\n"),
    # A read-only OPEN of a branch file the operations object registered with
    # ``native_branch_open_add`` (inode, path of an unmodified local object, size, read-ahead,
    # expiry) is answered in C without passthrough: the binding opens the file once per inode,
    # has the kernel start reading it in, answers the handle's READs from it
    # (``native_read_add``'s rule: bytes in the page cache; anything else goes to the read
    # handler) and its RELEASE.  Every handle of the inode shares one handle number
    # (``native_branch_fh_bit() | ino``).  ``native_branch_take(ino)`` ends the registration and
    # hands the handles open at that moment to the operations object (their count, and the
    # descriptor they read, now the operations object's to close): from then on every request
    # about that handle number goes to the handlers, which serve it as a handle they opened.
    # The operations object takes them before a change of the file through the mount (a
    # branch file's readers read a writer's newer bytes), so the binding only ever serves
    # bytes that are the file's.  Reading a small
    # branch file cost an OPEN and a RELEASE through the handlers, where a commit's cost none
    ("src/pyfuse3/__init__.pyx",
     "cdef dict native_open_files = {}\n",
     "cdef dict native_open_files = {}\n"
     "cdef dict native_branch_opens = {}\n"
     "cdef dict native_branch_files = {}\n"
     "cdef unsigned long long native_branch_fh = (<unsigned long long> 1) << 61  # in its handles\n"),
    ("src/pyfuse3/handlers.pxi",
     "cdef void _release_native_handle(fuse_req_t req, fuse_ino_t ino):\n",
     "cdef int _open_branch_natively(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) except -1:\n"
     "    # 1 if OPEN was answered with the file registered for ino, read by the binding; else 0,\n"
     "    # and a registration that failed or expired is dropped (added by lakefuse's build)\n"
     "    global native_open_count\n"
     "    cdef int fd\n"
     "    cdef int ret\n"
     "    cdef struct_stat st\n"
     "    cdef timespec now\n"
     "    cdef long long size\n"
     "    cdef long long read_ahead\n"
     "    cdef double expires\n"
     "    if (fi.flags & O_ACCMODE) != O_RDONLY or (fi.flags & O_TRUNC):\n"
     "        return 0\n"
     "    registered = native_branch_opens.get(ino)\n"
     "    if registered is None:\n"
     "        return 0\n"
     "    path, size, read_ahead, expires = registered\n"
     "    if expires > 0:\n"
     "        lf_clock_gettime(LF_CLOCK_MONOTONIC, &now)\n"
     "        if expires <= now.tv_sec + now.tv_nsec * 1e-9:\n"
     "            del native_branch_opens[ino]\n"
     "            return 0\n"
     "    opened = native_branch_files.get(ino)\n"
     "    if opened is None:\n"
     "        fd = lf_open(<bytes> path, O_RDONLY | O_CLOEXEC)\n"
     "        if fd < 0:\n"
     "            del native_branch_opens[ino]\n"
     "            return 0\n"
     "        if lf_fstat(fd, &st) != 0 or st.st_size != size:\n"
     "            unistd.close(fd)\n"
     "            del native_branch_opens[ino]\n"
     "            return 0\n"
     "        if read_ahead > 0:\n"
     "            lf_posix_fadvise(fd, 0, read_ahead, POSIX_FADV_WILLNEED)\n"
     "        opened = [fd, 0]\n"
     "        native_branch_files[ino] = opened\n"
     "        native_reads[native_branch_fh | ino] = (fd, size)\n"
     "    opened[1] += 1\n"
     "    fi.fh = native_branch_fh | ino\n"
     "    fi.backing_id = 0\n"
     "    fi.direct_io = 0\n"
     "    fi.keep_cache = 1  # registered only while the kernel can hold no other bytes of ino\n"
     "    fi.noflush = 1\n"
     "    ret = fuse_reply_open(req, fi)\n"
     "    if ret != 0:  # no RELEASE will come for this handle\n"
     "        log.error('fuse_open(): fuse_reply_open failed with %s', strerror(-ret))\n"
     "        _release_branch_handle(ino)\n"
     "    native_open_count += 1\n"
     "    return 1\n\n\n"
     "cdef int _release_branch_handle(fuse_ino_t ino):\n"
     "    # 1 if a handle of ino opened by _open_branch_natively was closed; 0 if the binding\n"
     "    # holds none (native_branch_take handed them to the handlers) (added by lakefuse's build)\n"
     "    opened = native_branch_files.get(ino)\n"
     "    if opened is None:\n"
     "        return 0\n"
     "    opened[1] -= 1\n"
     "    if opened[1] <= 0:\n"
     "        del native_branch_files[ino]\n"
     "        native_reads.pop(native_branch_fh | ino, None)\n"
     "        unistd.close(opened[0])\n"
     "    return 1\n\n\n"
     "cdef void _release_native_handle(fuse_req_t req, fuse_ino_t ino):\n"),
    ("src/pyfuse3/handlers.pxi",
     "    if native_opens and _open_natively(req, ino, fi):\n"
     "        return\n",
     "    if native_opens and _open_natively(req, ino, fi):\n"
     "        return\n"
     "    if native_branch_opens and _open_branch_natively(req, ino, fi):\n"
     "        return\n"),
    ("src/pyfuse3/handlers.pxi",
     "    if fi.fh & native_open_fh:\n"
     "        _release_native_handle(req, ino)\n",
     "    if fi.fh & native_branch_fh and _release_branch_handle(ino):\n"
     "        ret = fuse_reply_err(req, 0)\n"
     "        if ret != 0:\n"
     "            log.error('fuse_release(): fuse_reply_err failed with %s', strerror(-ret))\n"
     "        return\n"
     "    if fi.fh & native_open_fh:\n"
     "        _release_native_handle(req, ino)\n"),
    ("src/pyfuse3/__init__.pyx",
     "def handles_killpriv_v2():\n",
     "def native_branch_open_add(ino, path, size, read_ahead=0, expires=0.0):\n"
     "    \"Answer read-only OPENs of inode ino in C, without passthrough: the file at path\"\n"
     "    \" (bytes), which must be size bytes long, is opened once for every handle of ino, which\"\n"
     "    \" share the handle number native_branch_fh_bit() | ino, and their READs (when cached)\"\n"
     "    \" and RELEASEs are answered from it.  Until native_branch_take(ino), a failure, or the\"\n"
     "    \" time.monotonic() time expires (0: never) (added by lakefuse's build).\"\n"
     "    native_branch_opens[ino] = (bytes(path), int(size), int(read_ahead), float(expires))\n\n\n"
     "def native_branch_open_remove(ino):\n"
     "    \"Send later OPENs of inode ino to the open handler; the handles the binding opened\"\n"
     "    \" stay its own (added by lakefuse's build).\"\n"
     "    native_branch_opens.pop(ino, None)\n\n\n"
     "def native_branch_take(ino):\n"
     "    \"native_branch_open_remove(ino), and hand the handles of ino the binding holds to the\"\n"
     "    \" handlers: every later request about native_branch_fh_bit() | ino goes to them.\"\n"
     "    \" (how many kernel handles that number stands for, the descriptor of the file they\"\n"
     "    \" read, now the caller's to close, its size), or None if it holds none (added by\"\n"
     "    \" lakefuse's build).\"\n"
     "    native_branch_opens.pop(ino, None)\n"
     "    opened = native_branch_files.pop(ino, None)\n"
     "    if opened is None:\n"
     "        return None\n"
     "    fd, size = native_reads.pop(native_branch_fh | ino)\n"
     "    return opened[1], fd, size\n\n\n"
     "def native_branch_fh_bit():\n"
     "    \"The bit set in the handle numbers of native_branch_open_add's handles (added by\"\n"
     "    \" lakefuse's build).\"\n"
     "    return native_branch_fh\n\n\n"
     "def handles_killpriv_v2():\n"),
]


class BuildError(Exception):
    pass


def say(text: str) -> None:
    print(f"[{int(time.time() - STARTED):3d}s] {text}", flush=True)


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = BUILD_TIMEOUT,
        doing: str = "") -> None:
    """Run ``cmd`` with its output kept for the error; while it runs, say ``doing`` every 15 s."""
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            say(f"  ... still {doing}")

    if doing:
        threading.Thread(target=heartbeat, daemon=True).start()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(cmd[:3])} timed out after {timeout:.0f} s") from None
    finally:
        done.set()
    if proc.returncode != 0:
        tail = proc.stdout.strip().splitlines()[-15:]
        raise BuildError(f"{' '.join(cmd[:3])} failed:\n" + "\n".join(tail))


def debian_archive_uri() -> str:
    """The URI of the Debian archive this machine's apt already uses (read, never written down)."""
    proc = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI) $(ORIGIN)"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=APT_TIMEOUT)
    for line in proc.stdout.splitlines():
        uri, _, origin = line.partition(" ")
        if origin == "Debian" and not uri.rstrip("/").endswith("-security"):
            return uri.rstrip("/")
    # no index fetched yet: the sources files themselves (deb822 and one-line formats)
    texts = [path.read_text() for path in (Path("/etc/apt/sources.list.d/debian.sources"),
                                           Path("/etc/apt/sources.list")) if path.exists()]
    for text in texts:
        for match in re.finditer(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
            uri = match.group(1).rstrip("/")
            if not uri.endswith("-security") and "debian" in uri:
                return uri
    raise BuildError("no Debian archive in this machine's apt sources")


def fetch_libfuse_source(work: Path) -> Path:
    """The upstream libfuse tarball, fetched by apt-get source through a private configuration."""
    apt = work / "apt"
    (apt / "lists" / "partial").mkdir(parents=True)
    (apt / "source.sources").write_text(
        "Types: deb-src\n"
        f"URIs: {debian_archive_uri()}\n"
        f"Suites: {LIBFUSE_SUITE}\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    options = ["-q", "-o", f"Dir::Etc::SourceList={apt / 'source.sources'}", "-o", "Dir::Etc::SourceParts=/dev/null",
               "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", "APT::Sandbox::User=root"]
    say(f"fetching the libfuse {LIBFUSE_VERSION} source package (apt-get source, {LIBFUSE_SUITE})")
    doing = f"fetching the libfuse {LIBFUSE_VERSION} source package"
    run(["apt-get", *options, "update"], work, timeout=APT_TIMEOUT, doing=doing)
    run(["apt-get", *options, "source", "--download-only", f"fuse3={LIBFUSE_DEBIAN_VERSION}"], work,
        timeout=APT_TIMEOUT, doing=doing)
    tarball = work / f"fuse3_{LIBFUSE_VERSION}.orig.tar.gz"
    if hashlib.sha256(tarball.read_bytes()).hexdigest() != LIBFUSE_SHA256:
        raise BuildError(f"{tarball.name}: unexpected SHA-256")
    return tarball


def extract(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):  # refuses links and paths outside the target
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)


def build_libfuse(work: Path, prefix: Path) -> None:
    extract(fetch_libfuse_source(work), work)
    source = work / f"fuse-{LIBFUSE_VERSION}"
    apply_edits(source, LIBFUSE_EDITS, f"libfuse {LIBFUSE_VERSION}")
    say(f"building libfuse {LIBFUSE_VERSION} (meson, ninja)")
    doing = f"building libfuse {LIBFUSE_VERSION}"
    run(["meson", "setup", "build", f"--prefix={prefix}", "--libdir=lib", "-Dexamples=false", "-Dutils=false",
         "-Dtests=false", "-Ddisable-mtab=true"], source, doing=doing)
    run(["ninja", "-C", "build", "install"], source, doing=doing)


def apply_edits(source: Path, edits: list[tuple[str, str, str]], what: str) -> None:
    for relative, anchor, replacement in edits:
        path = source / relative
        text = path.read_text()
        if text.count(anchor) != 1:
            raise BuildError(f"{what}: {relative} changed; cannot add lakefuse's edits")
        path.write_text(text.replace(anchor, replacement))


def patch_pyfuse3(source: Path) -> None:
    apply_edits(source, EDITS, f"pyfuse3 {PYFUSE3_VERSION}")


def fetch_pyfuse3_source(work: Path) -> Path:
    """The pyfuse3 source tree, patched, and its build requirements installed as wheels into a
    directory the build sees on PYTHONPATH (so pip builds no isolated environment of its own)."""
    say(f"fetching the pyfuse3 {PYFUSE3_VERSION} source distribution and its build tools")
    doing = f"fetching pyfuse3 {PYFUSE3_VERSION}"
    run([*PIP, "install", "--target", str(work / "build-tools"), *PYFUSE3_BUILD_REQUIREMENTS], work, doing=doing)
    run([*PIP, "download", "--no-deps", "--no-build-isolation", "--no-binary", "pyfuse3",
         f"pyfuse3=={PYFUSE3_VERSION}", "-d", str(work)], work, build_tools_env(work), doing=doing)
    extract(work / f"pyfuse3-{PYFUSE3_VERSION}.tar.gz", work)
    source = work / f"pyfuse3-{PYFUSE3_VERSION}"
    patch_pyfuse3(source)
    return source


def build_tools_env(work: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(work / "build-tools"))


def build_pyfuse3_wheel(work: Path, source: Path, prefix: Path, wheel_dir: Path) -> None:
    """A wheel of the patched pyfuse3 in ``wheel_dir``, linked to the libfuse under ``prefix``."""
    say(f"building pyfuse3 {PYFUSE3_VERSION} with passthrough (Cython, then the C compiler)")
    library = prefix / "lib"
    env = dict(build_tools_env(work), PKG_CONFIG_PATH=str(library / "pkgconfig"),
               # before the system's library directory (which Debian's Python puts on the link
               # line), so -lfuse3 is this libfuse, found again at run time through the rpath
               LDFLAGS=f"-L{library} -Wl,-rpath,{library}",
               # Python's own flags (some builds replace rather than extend them with $CFLAGS),
               # without debug information: a fifth faster to compile, the same code
               CFLAGS=f"{sysconfig.get_config_var('CFLAGS') or '-O2'} -g0")
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheel_dir), str(source)], work, env,
        doing=f"building pyfuse3 {PYFUSE3_VERSION}")


def build(work: Path, prefix: Path, wheel_dir: Path) -> None:
    """libfuse builds while pyfuse3's source and build tools arrive (two cores), then pyfuse3."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pyfuse3_source = pool.submit(fetch_pyfuse3_source, work)
        build_libfuse(work, prefix)
        source = pyfuse3_source.result()
    build_pyfuse3_wheel(work, source, prefix, wheel_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_pyfuse3.py WHEEL_DIR", file=sys.stderr)
        return 2
    wheel_dir = Path(argv[0]).resolve()
    prefix = Path(sys.prefix) / "opt" / "libfuse"
    for tool in ("apt-get", "meson", "ninja", "pkg-config", "cc"):
        if shutil.which(tool) is None:
            print(f"build_pyfuse3: {tool} not found", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="lakefuse-pyfuse3-") as tmp:
        try:
            wheel_dir.mkdir(parents=True, exist_ok=True)
            build(Path(tmp), prefix, wheel_dir)
        except (BuildError, OSError) as exc:
            print(f"build_pyfuse3: {exc}", file=sys.stderr)
            return 1
    say(f"built pyfuse3 {PYFUSE3_VERSION} with passthrough, on libfuse {LIBFUSE_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
