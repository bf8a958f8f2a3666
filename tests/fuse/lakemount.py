"""Helpers of the kernel mount tests (imported by tests/fuse/conftest.py and the tests): a
lakefuse home with the core over it, and mounts served by a real
``python -m lakefuse.fuse mount -f`` subprocess.

Readiness is awaited through ``$NOTIFY_SOCKET`` (the same ``READY=1`` systemd gets), bounded;
teardown always unmounts (SIGTERM, then ``fusermount3 -uz`` and SIGKILL if needed).  Without
/dev/fuse the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require_binding(attribute: str, what: str) -> None:
    """Skip the calling test unless the installed pyfuse3 has ``attribute`` (added by
    scripts/build_pyfuse3.py); under CI=true, where the build must have run, fail instead."""
    import pyfuse3

    if not hasattr(pyfuse3, attribute):
        reason = f"pyfuse3 without {what} (scripts/build_pyfuse3.py did not run)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


READY_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def fuse_unavailable_reason() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed"
    try:
        import pyfuse3  # noqa: F401
        import trio  # noqa: F401
    except ImportError as exc:
        return f"pyfuse3/trio not importable: {exc}"
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as exc:
        return f"/dev/fuse cannot be opened: {exc.strerror}"
    return None


def require_fuse() -> None:
    reason = fuse_unavailable_reason()
    if reason:
        if in_ci():
            pytest.fail(f"FUSE tests cannot run under CI=true: {reason}")
        pytest.skip(reason)


def is_mounted(path: str) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


class LakeHome:
    """A LAKEFUSE_HOME and the core over it (in this process)."""

    def __init__(self, path: Path, config_yaml: str | None = None):
        self.path = path
        if config_yaml is not None:
            (path / "config.yaml").write_text(config_yaml)
        self.env = dict(os.environ)
        self.env["LAKEFUSE_HOME"] = str(path)
        for var in ("LAKEFUSE_CONFIG", "LAKEFUSE_DATABASE_URL", "LAKEFUSE_CACHE_DIR"):
            self.env.pop(var, None)
        from lakefuse.app import App
        from lakefuse.config import load_config

        self.app = App(load_config(environ={"LAKEFUSE_HOME": str(path)}))
        self.catalog = self.app.catalog

    def create_repository(self, name: str) -> None:
        self.catalog.create_repository(name, self.app.default_namespace(name))

    def close(self) -> None:
        self.app.close()


def run_cli(monkeypatch, capsys, lake_home: LakeHome, *argv: str) -> str:
    """``lakefuse ARGV`` in this process, on the mounted home; its stdout (exit 0 asserted)."""
    from lakefuse.cli.main import main

    monkeypatch.setenv("LAKEFUSE_HOME", str(lake_home.path))
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, f"lakefuse {' '.join(argv)} exited {code}: {err}"
    return out


class MountedLake:
    """One ``lakefuse mount -f`` subprocess."""

    def __init__(self, home: LakeHome, mountpoint: Path, uri: str | None = None, args: tuple[str, ...] = ()):
        self.home = home
        self.mountpoint = mountpoint
        self.uri = uri
        self.args = args
        self.proc: subprocess.Popen | None = None
        self._stderr = None
        self.log_path = home.path / f"mount-{mountpoint.name}.log"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "lakefuse.fuse", "mount", "-f", "--log-level", "DEBUG",
               "--log-file", str(self.log_path), *self.args, str(self.mountpoint)]
        if self.uri:
            cmd.append(self.uri)
        return cmd

    def start(self) -> "MountedLake":
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        sock_dir = tempfile.mkdtemp(prefix="lfn-")
        sock_path = os.path.join(sock_dir, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        env = dict(self.home.env, NOTIFY_SOCKET=sock_path)
        try:
            self._stderr = open(self.log_path.with_suffix(".stderr"), "wb")
            self.proc = subprocess.Popen(self.command(), env=env, stdout=subprocess.DEVNULL, stderr=self._stderr)
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stop()
                    raise AssertionError(f"mount not ready within {READY_TIMEOUT} s:\n{self.logs()}")
                sock.settimeout(min(0.5, remaining))
                try:
                    message = sock.recv(4096).decode()
                except socket.timeout:
                    if self.proc.poll() is not None:
                        raise AssertionError(f"mount exited with {self.proc.returncode}:\n{self.logs()}")
                    continue
                if "READY=1" in message:
                    break
        finally:
            sock.close()
            shutil.rmtree(sock_dir, ignore_errors=True)
        assert is_mounted(str(self.mountpoint))
        return self

    def logs(self) -> str:
        out = []
        for path in (self.log_path, self.log_path.with_suffix(".stderr")):
            if path.exists():
                out.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(out)

    def stop(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        if is_mounted(str(self.mountpoint)):
            subprocess.run(["fusermount3", "-uz", str(self.mountpoint)], capture_output=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if self._stderr is not None:
            self._stderr.close()
        return proc.returncode

    def __truediv__(self, other: str) -> Path:
        return self.mountpoint / other


@contextlib.contextmanager
def mounted(home: LakeHome, mountpoint: Path, uri: str | None = None, args: tuple[str, ...] = ()):
    mount = MountedLake(home, mountpoint, uri, args).start()
    try:
        yield mount
    finally:
        mount.stop()
