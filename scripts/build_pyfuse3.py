"""Build pyfuse3 with FUSE passthrough into the virtual environment (called by scripts/install).

Debian 12 ships libfuse 3.14; FUSE passthrough (the kernel reads and writes a registered local
file directly, so an open file's bytes never travel through the daemon) needs libfuse >= 3.16,
and pyfuse3 exposes no passthrough API.  So this script:

1. builds libfuse 3.17.2 (Debian's copy of the upstream release tarball, SHA-256 pinned) into
   ``.venv/opt/libfuse`` with meson and ninja;
2. downloads the pyfuse3 source distribution, adds three things to its Cython sources:
   ``FileInfo(backing_id=...)`` (copied into the open reply), asking for ``FUSE_CAP_PASSTHROUGH``
   in FUSE_INIT when the operations object says ``enable_passthrough = True``, and
   ``pyfuse3.passthrough_session_fd()`` (the /dev/fuse descriptor to register backing files on,
   -1 when the kernel did not grant passthrough);
3. builds and installs that pyfuse3 linked to the new libfuse (rpath, so nothing system-wide
   changes: the system's libfuse, fusermount3 and mount helpers stay as they are).

Run with the venv's Python: ``.venv/bin/python scripts/build_pyfuse3.py``.  Exits 0 when the
patched pyfuse3 is installed, 1 with a one-line reason otherwise (scripts/install then falls
back to the stock pyfuse3, which mounts without passthrough).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

LIBFUSE_VERSION = "3.17.2"
LIBFUSE_URL = f"https://deb.debian.org/debian/pool/main/f/fuse3/fuse3_{LIBFUSE_VERSION}.orig.tar.gz"
LIBFUSE_SHA256 = "3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f"
PYFUSE3_VERSION = "3.5.0"
DOWNLOAD_TIMEOUT = 120  # seconds per download

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
     "      FUSE_CAP_HANDLE_KILLPRIV\n      FUSE_CAP_PASSTHROUGH\n"),
    ("src/pyfuse3/handlers.pxi",
     "        conn.want |= FUSE_CAP_POSIX_ACL\n",
     "        conn.want |= FUSE_CAP_POSIX_ACL\n"
     "    global passthrough_granted\n"
     "    passthrough_granted = False\n"
     "    if (getattr(operations, 'enable_passthrough', False) and\n"
     "        conn.capable & FUSE_CAP_PASSTHROUGH):\n"
     "        conn.want |= FUSE_CAP_PASSTHROUGH\n"
     "        conn.max_backing_stack_depth = 0  # backing files on a plain filesystem\n"
     "        passthrough_granted = True\n"),
    ("src/pyfuse3/__init__.pyx",
     "cdef int session_fd\n",
     "cdef int session_fd\ncdef bint passthrough_granted = False\n"),
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
    ("src/pyfuse3/__init__.pyx",
     "@async_wrapper\nasync def main(",
     "def passthrough_session_fd():\n"
     "    '''The /dev/fuse descriptor to register backing files on, or -1 if the\n"
     "    kernel did not grant passthrough (added by lakefuse's build).'''\n"
     "    if session == NULL or not passthrough_granted:\n"
     "        return -1\n"
     "    return session_fd\n\n\n"
     "@async_wrapper\nasync def main("),
]


class BuildError(Exception):
    pass


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = proc.stdout.strip().splitlines()[-15:]
        raise BuildError(f"{' '.join(cmd[:3])} failed:\n" + "\n".join(tail))


def download(url: str, sha256: str, target: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            data = response.read()
    except OSError as exc:
        raise BuildError(f"cannot download {url}: {exc}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise BuildError(f"{url}: unexpected SHA-256")
    target.write_bytes(data)


def extract(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):  # refuses links and paths outside the target
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)


def build_libfuse(work: Path, prefix: Path) -> None:
    tarball = work / "libfuse.tar.gz"
    download(LIBFUSE_URL, LIBFUSE_SHA256, tarball)
    extract(tarball, work)
    source = work / f"fuse-{LIBFUSE_VERSION}"
    run(["meson", "setup", "build", f"--prefix={prefix}", "--libdir=lib", "-Dexamples=false", "-Dutils=false",
         "-Dtests=false", "-Ddisable-mtab=true"], source)
    run(["ninja", "-C", "build", "install"], source)


def patch_pyfuse3(source: Path) -> None:
    for relative, anchor, replacement in EDITS:
        path = source / relative
        text = path.read_text()
        if text.count(anchor) != 1:
            raise BuildError(f"pyfuse3 {PYFUSE3_VERSION}: {relative} changed; cannot add passthrough")
        path.write_text(text.replace(anchor, replacement))


def build_pyfuse3(work: Path, prefix: Path) -> None:
    run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
         "--no-binary", ":all:", f"pyfuse3=={PYFUSE3_VERSION}", "-d", str(work)], work)
    extract(work / f"pyfuse3-{PYFUSE3_VERSION}.tar.gz", work)
    source = work / f"pyfuse3-{PYFUSE3_VERSION}"
    patch_pyfuse3(source)
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"),
               LDFLAGS=f"-Wl,-rpath,{prefix / 'lib'}")
    run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--force-reinstall", str(source)], work, env)


def main() -> int:
    venv = Path(sys.prefix)
    prefix = venv / "opt" / "libfuse"
    for tool in ("meson", "ninja", "pkg-config", "cc"):
        if shutil.which(tool) is None:
            print(f"build_pyfuse3: {tool} not found", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="lakefuse-pyfuse3-") as tmp:
        try:
            build_libfuse(Path(tmp), prefix)
            build_pyfuse3(Path(tmp), prefix)
        except BuildError as exc:
            print(f"build_pyfuse3: {exc}", file=sys.stderr)
            return 1
    print(f"build_pyfuse3: pyfuse3 {PYFUSE3_VERSION} with passthrough, on libfuse {LIBFUSE_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
