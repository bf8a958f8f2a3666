"""Random-write correctness through a real kernel mount (issue 19): a long seeded random mix of
pread, pwrite (small, medium, past EOF: holes), O_APPEND writes, ftruncate (shrink, extend),
posix_fallocate, shared-mmap reads and writes, fsync, close/reopen (now and then with
O_TRUNC) and a second descriptor is applied to a file on a branch and to a reference file in a
local directory.  Every call must return the same (bytes, count or errno) on both, and every
few operations, at the end, after close and reopen, in the commit of the branch and through a
fresh mount, the whole file and its size must be the same.  An mmap only the mount refuses
changes neither file: the run goes on and fails at its end.

A failure names the seed and lists the last operations; ``LAKEFUSE_RANDOM_IO_SEED=N`` runs
that seed alone.  Operations are plain tuples (``RandomIO.apply`` replays a list of them), so a
failing sequence can be cut down by hand.  Every test runs on the module's mount and on one
with ``--writeback-cache``; ``LAKEFUSE_RANDOM_IO_MOUNT_ARGS="--an-option"`` runs them on one
mount with those options instead.

Also here: a sparse file (a hole of 64 MiB between two writes), and two short cases the mix
finds now and then (a reader beside a writer reads the hole the writer made; a file being
written maps MAP_SHARED through any descriptor)."""

from __future__ import annotations

import errno
import mmap
import os
import random
import time
from pathlib import Path

import pytest

from lakemount import MountedLake, mounted

KIB = 1024
MIB = 1024 * KIB
OPERATIONS = 1200          # per seed
CHECK_EVERY = 50           # whole-file comparison after this many operations
MAX_SIZE = 6 * MIB         # offsets and sizes stay about below this
SEEDS = ([int(os.environ["LAKEFUSE_RANDOM_IO_SEED"])] if os.environ.get("LAKEFUSE_RANDOM_IO_SEED")
         else [19, 2019])
#: the mount options each test runs with (none: the module's mount)
MOUNT_ARGS = ([tuple(os.environ["LAKEFUSE_RANDOM_IO_MOUNT_ARGS"].split())]
              if os.environ.get("LAKEFUSE_RANDOM_IO_MOUNT_ARGS") is not None else [(), ("--writeback-cache",)])


@pytest.fixture(scope="module", params=MOUNT_ARGS, ids=lambda args: " ".join(args) or "default")
def io_lake(request, lake_home, lake, tmp_path_factory):
    """The mount these tests write through: the module's, or one with these options."""
    if not request.param:
        yield lake
        return
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("mnt-io") / "lake", args=request.param).start()
    yield mount
    mount.stop()


@pytest.fixture
def io_branch(branch, io_lake):
    """The test's fresh branch, in ``io_lake``."""
    return io_lake / f"sales/{branch.name}"


def payload(data_seed: int, length: int) -> bytes:
    return random.Random(data_seed).randbytes(length)


def outcome(fn):
    """What ``fn()`` returned, or ("errno", name) of the OSError it raised."""
    try:
        return fn()
    except OSError as exc:
        return ("errno", errno.errorcode.get(exc.errno, exc.errno))


def read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, offset = [], 0
    while True:  # until EOF: a file longer than its st_size would show
        chunk = os.pread(fd, max(size - offset, 0) + 4096, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def read_path(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_all(fd)
    finally:
        os.close(fd)


def describe(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return repr(value)


def first_difference(got: bytes, expected: bytes) -> str:
    text = f"mount has {len(got)} bytes, local {len(expected)}"
    for i, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            end = i
            while end < min(len(got), len(expected)) and got[end] != expected[end]:
                end += 1
            return (f"{text}; first difference at offset {i} (differs for {end - i} bytes): "
                    f"mount {got[i:i + 16].hex()} local {expected[i:i + 16].hex()}")
    return text + "; one is a prefix of the other"


class Side:
    """The descriptors of one of the two files (the mount's or the local reference):
    ``fd`` (O_RDWR), ``append`` (O_WRONLY | O_APPEND) and ``fd2`` (O_RDWR or O_RDONLY)."""

    def __init__(self, path: Path):
        self.path = path
        self.fds: dict[str, int] = {"fd": os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)}

    def close(self, name: str) -> None:
        fd = self.fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        for name in list(self.fds):
            self.close(name)


class Mismatch(AssertionError):
    pass


class RandomIO:
    """The same operations on the mount's file and on the local one.

    An operation is a tuple; ``apply`` runs it on both files and raises ``Mismatch`` when they
    answer differently:

    - ``("pread", fd, length, offset)``, ``("pwrite", fd, offset, length, data_seed)``,
      ``("write", fd, length, data_seed)`` (at the descriptor's position: appends for ``append``);
    - ``("open", fd, flags)`` (closes it first if open), ``("close", fd)``;
    - ``("ftruncate", size)``, ``("fallocate", offset, length)``, ``("fsync",)``,
      ``("fstat", fd)``;
    - ``("mmap", length, steps)`` with steps ``("w", start, end, data_seed)`` and
      ``("r", start, end)``: MAP_SHARED of ``fd``, then msync and close.

    ``fd`` names ``"fd"``, ``"append"`` or ``"fd2"``; an operation on a descriptor that is not
    open is skipped (so a cut-down sequence still runs).
    """

    def __init__(self, seed: int, mount_path: Path, local_path: Path):
        self.seed = seed
        self.rng = random.Random(seed)
        self.sides = (Side(mount_path), Side(local_path))
        self.log: list[tuple] = []
        self.fd2_writable = False
        self.pending: list[tuple] = []  # chosen, not yet applied
        #: (operation number, what, the operations before) of calls only one file refused
        #: without a change to either (an mmap): the run goes on, and fails at its end
        self.refusals: list[tuple[int, str, str]] = []

    @property
    def size(self) -> int:
        return os.fstat(self.sides[1].fds["fd"]).st_size

    # --- comparing ------------------------------------------------------------------------

    def same(self, what: str, got, expected) -> None:
        if got != expected:
            raise Mismatch(f"{what}: mount {describe(got)}, local {describe(expected)}")

    def both(self, what: str, fn):
        """``fn(side)`` on the mount and on the local file: the same result (or errno)."""
        got, expected = (outcome(lambda side=side: fn(side)) for side in self.sides)
        self.same(what, got, expected)
        return expected

    def check_whole(self, when: str, fresh: bool = False) -> None:
        mount, local = self.sides
        l_size = os.fstat(local.fds["fd"]).st_size
        self.same(f"{when}: fstat st_size", os.fstat(mount.fds["fd"]).st_size, l_size)
        self.same(f"{when}: stat st_size", os.stat(mount.path).st_size, l_size)
        expected = read_all(local.fds["fd"])
        got = read_all(mount.fds["fd"])
        if got != expected:
            raise Mismatch(f"{when}: contents differ: {first_difference(got, expected)}")
        if fresh:  # through a descriptor of its own, too
            got = outcome(lambda: read_path(mount.path))
            if got != expected:
                raise Mismatch(f"{when}: contents read through a new descriptor differ: "
                               f"{first_difference(got, expected) if isinstance(got, bytes) else got}")

    # --- applying -------------------------------------------------------------------------

    def apply(self, op: tuple) -> None:
        self.log.append(op)
        kind, args = op[0], op[1:]
        local = self.sides[1]
        if kind == "open":
            name, flags = args
            for side in self.sides:
                side.close(name)
                side.fds[name] = os.open(side.path, flags)
            return
        if kind == "close":
            for side in self.sides:
                side.close(args[0])
            return
        if kind in ("pread", "pwrite", "write", "fstat") and args[0] not in local.fds:
            return
        if kind == "pread":
            name, length, offset = args
            self.both(op_text(op), lambda s: os.pread(s.fds[name], length, offset))
        elif kind == "pwrite":
            name, offset, length, data_seed = args
            data = payload(data_seed, length)
            self.both(op_text(op), lambda s: os.pwrite(s.fds[name], data, offset))
        elif kind == "write":
            name, length, data_seed = args
            data = payload(data_seed, length)
            self.both(op_text(op), lambda s: os.write(s.fds[name], data))
        elif kind == "fstat":
            self.both(op_text(op), lambda s: os.fstat(s.fds[args[0]]).st_size)
        elif kind == "ftruncate":
            self.both(op_text(op), lambda s: os.ftruncate(s.fds["fd"], args[0]))
        elif kind == "fallocate":
            self.both(op_text(op), lambda s: os.posix_fallocate(s.fds["fd"], *args))
        elif kind == "fsync":
            self.both(op_text(op), lambda s: os.fsync(s.fds["fd"]))
        elif kind == "mmap":
            self.apply_mmap(*args)
        else:
            raise ValueError(op)

    def apply_mmap(self, length: int, steps: list[tuple]) -> None:
        if length == 0 or length > self.size:
            return
        maps = [outcome(lambda side=side: mmap.mmap(side.fds["fd"], length, flags=mmap.MAP_SHARED,
                                                    prot=mmap.PROT_READ | mmap.PROT_WRITE))
                for side in self.sides]
        try:
            if not all(isinstance(m, mmap.mmap) for m in maps):
                if maps[0] != maps[1]:  # nothing changed either file: noted, and the run goes on
                    what = (f"mmap(fd, {length}, MAP_SHARED, PROT_READ | PROT_WRITE): "
                            f"mount {describe(maps[0])}, local {describe(maps[1])}")
                    self.refusals.append((len(self.log), what, self.tail()))
                return
            for step in steps:
                if step[0] == "w":
                    _, start, end, data_seed = step
                    data = payload(data_seed, end - start)
                    for m in maps:
                        m[start:end] = data
                else:
                    _, start, end = step
                    self.same(f"read of the map [{start}:{end}]", maps[0][start:end], maps[1][start:end])
            for m in maps:
                m.flush()  # msync(MS_SYNC)
        finally:
            for m in maps:
                if isinstance(m, mmap.mmap):
                    m.close()

    # --- choosing -------------------------------------------------------------------------

    def offset(self, size: int, past_eof: int = 64 * KIB) -> int:
        """Mostly within the file or up to ``past_eof`` after it; often at or just before its end."""
        r = self.rng.random()
        if r < 0.1:
            return size
        if r < 0.2 and size:
            return self.rng.randrange(max(size - 8 * KIB, 0), size)
        return self.rng.randrange(0, max(min(size + past_eof, MAX_SIZE), 1))

    def small(self) -> int:
        return self.rng.choice((1, 2, 3, 511, 512, 513, 4095, 4096, 4097, self.rng.randint(1, 8 * KIB)))

    def data_seed(self) -> int:
        return self.rng.getrandbits(32)

    def choose(self) -> tuple:
        """The next operation, by weight."""
        if self.pending:
            return self.pending.pop(0)
        rng, size = self.rng, self.size
        fds = self.sides[1].fds
        kind = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        if kind in ("pwrite_medium", "truncate_extend", "hole") and size > MAX_SIZE - 1 * MIB:
            kind = "truncate_shrink"  # keep the file modest
        if kind == "pread":
            reader = "fd2" if "fd2" in fds and rng.random() < 0.3 else "fd"
            return ("pread", reader, rng.choice((self.small(), rng.randint(0, 256 * KIB))),
                    self.offset(size, 256 * KIB))
        if kind == "pwrite_small":
            return ("pwrite", "fd", self.offset(size), self.small(), self.data_seed())
        if kind == "pwrite_medium":
            return ("pwrite", "fd", self.offset(size), rng.randint(8 * KIB, 1 * MIB), self.data_seed())
        if kind == "hole":
            return ("pwrite", "fd", size + rng.randint(1, 512 * KIB), self.small(), self.data_seed())
        if kind == "append":
            if "append" not in fds:
                return ("open", "append", os.O_WRONLY | os.O_APPEND)
            if rng.random() < 0.15:
                return ("close", "append")
            return ("write", "append", rng.choice((self.small(), rng.randint(1, 64 * KIB))), self.data_seed())
        if kind == "truncate_shrink":
            return ("ftruncate", rng.randint(0, size) if rng.random() < 0.9 else 0)
        if kind == "truncate_extend":
            return ("ftruncate", size + rng.randint(0, 512 * KIB))
        if kind == "fallocate":
            return ("fallocate", self.offset(size, 256 * KIB), rng.randint(1, 256 * KIB))
        if kind == "mmap":
            if size == 0:
                return ("pwrite", "fd", 0, self.small(), self.data_seed())
            if rng.random() < 0.5 and len(fds) > 1:  # now and then the only descriptor, opened afresh
                self.pending += [("close", "append"), ("close", "fd2"), ("open", "fd", os.O_RDWR)]
            steps = []
            for _ in range(rng.randint(1, 12)):
                start = rng.randrange(0, size)
                end = min(start + rng.choice((1, rng.randint(1, 4096), rng.randint(1, 64 * KIB))), size)
                steps.append(("w", start, end, self.data_seed()) if rng.random() < 0.6 else ("r", start, end))
            self.pending.append(("mmap", size, steps))
            return self.pending.pop(0)
        if kind == "reopen":
            return ("open", "fd", os.O_RDWR | (os.O_TRUNC if rng.random() < 0.1 else 0))
        if kind == "fsync":
            return ("fsync",)
        # the second descriptor: opened, written through one and read through the other, closed
        if "fd2" not in fds:
            self.fd2_writable = rng.random() < 0.5
            return ("open", "fd2", os.O_RDWR if self.fd2_writable else os.O_RDONLY)
        r = rng.random()
        if r < 0.1:
            return ("close", "fd2")
        if r < 0.2:
            return ("fstat", "fd2")
        if r < 0.55:
            writer = "fd2" if self.fd2_writable and rng.random() < 0.5 else "fd"
            length = rng.choice((self.small(), rng.randint(1, 128 * KIB)))
            offset = size + rng.randint(1, 128 * KIB) if rng.random() < 0.2 else self.offset(size)  # a hole
            return ("pwrite", writer, offset, length, self.data_seed())
        last = next((op for op in reversed(self.log) if op[0] == "pwrite"), None)
        reader = "fd2" if last is None or last[1] == "fd" else "fd"
        if last is not None and rng.random() < 0.8:  # around what was written last, or before it
            start = max(last[2] - rng.choice((rng.randint(0, 4 * KIB), rng.randint(0, 128 * KIB))), 0)
            return ("pread", reader, last[2] - start + last[3] + rng.randint(0, 8 * KIB), start)
        return ("pread", reader, rng.randint(0, 64 * KIB), self.offset(size, 64 * KIB))

    def run(self, operations: int) -> None:
        try:
            for i in range(1, operations + 1):
                self.apply(self.choose())
                if i % CHECK_EVERY == 0:
                    self.check_whole(f"check after operation {i}", fresh=i % (4 * CHECK_EVERY) == 0)
            while self.pending:
                self.apply(self.pending.pop(0))
            self.check_whole("at the end", fresh=True)
            return
        except Mismatch as exc:
            self.fail(len(self.log), str(exc), self.tail())

    def tail(self, count: int = 40) -> str:
        return "\n  ".join(op_text(op) for op in self.log[-count:])

    def fail(self, number: int, problem: str, tail: str) -> None:
        pytest.fail(f"seed {self.seed} (LAKEFUSE_RANDOM_IO_SEED={self.seed}), operation {number}: "
                    f"{problem}\nlast operations:\n  {tail}{self.refused()}", pytrace=False)

    def refused(self) -> str:
        if not self.refusals:
            return ""
        number, problem, tail = self.refusals[0]
        return (f"\n{len(self.refusals)} calls only the mount refused; the first, operation {number}: "
                f"{problem}\nthe operations before it:\n  {tail}")

    def assert_nothing_refused(self) -> None:
        """After every comparison passed: calls only the mount refused fail the run too."""
        if self.refusals:
            pytest.fail(f"seed {self.seed} (LAKEFUSE_RANDOM_IO_SEED={self.seed}): the files stayed "
                        f"the same, but{self.refused()}", pytrace=False)


WEIGHTS = {
    "pread": 16, "pwrite_small": 22, "pwrite_medium": 3, "hole": 4, "append": 8,
    "truncate_shrink": 3, "truncate_extend": 3, "fallocate": 4, "mmap": 6, "reopen": 3,
    "fsync": 2, "second": 12,
}

FLAG_NAMES = ((os.O_WRONLY, "O_WRONLY"), (os.O_RDWR, "O_RDWR"), (os.O_APPEND, "O_APPEND"),
              (os.O_TRUNC, "O_TRUNC"))


def op_text(op: tuple) -> str:
    kind = op[0]
    if kind == "open":
        flags = " | ".join(name for bit, name in FLAG_NAMES if op[2] & bit) or "O_RDONLY"
        return f"{op[1]} = open({flags})"
    if kind == "pwrite":
        return f"pwrite({op[1]}, <{op[3]} bytes>, {op[2]})"
    if kind == "write":
        return f"write({op[1]}, <{op[2]} bytes>)"
    if kind == "pread":
        return f"pread({op[1]}, {op[2]}, {op[3]})"
    if kind == "fallocate":
        return f"posix_fallocate(fd, {op[1]}, {op[2]})"
    if kind == "ftruncate":
        return f"ftruncate(fd, {op[1]})"
    if kind == "mmap":
        steps = "; ".join(f"m[{s[1]}:{s[2]}]" + (" = <bytes>" if s[0] == "w" else "") for s in op[2])
        return f"m = mmap(fd, {op[1]}, MAP_SHARED); {steps}; msync; munmap"
    return f"{kind}({', '.join(map(str, op[1:])) or 'fd'})"


def sync_dir(path: Path) -> None:
    """fsync(2) of a directory: stages every closed file of its branch."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_long_random_operation_mix_reads_what_a_local_file_reads(seed, io_branch, io_lake, lake_home,
                                                                   tmp_path):
    branch, lake = io_branch, io_lake
    name = f"random-{seed}.bin"
    print(f"random I/O seed {seed} (LAKEFUSE_RANDOM_IO_SEED={seed})")
    started = time.monotonic()
    run = RandomIO(seed, branch / name, tmp_path / name)
    try:
        run.run(OPERATIONS)
    finally:
        for side in run.sides:
            side.close_all()
    print(f"{len(run.log)} operations in {time.monotonic() - started:.1f} s")
    expected = (tmp_path / name).read_bytes()
    where = f"seed {seed} (LAKEFUSE_RANDOM_IO_SEED={seed}), {len(expected)} bytes"

    # closed, then read by path and through a new descriptor
    assert os.stat(branch / name).st_size == len(expected), f"{where}: size after close"
    assert (branch / name).read_bytes() == expected, f"{where}: contents after close"
    assert read_path(branch / name) == expected, f"{where}: contents after reopen"

    # committed: in the commit's directory and in the catalog
    sync_dir(branch)
    commit = lake_home.catalog.commit("sales", branch.name, f"random io, seed {seed}", "tests")
    assert lake_home.catalog.read_object("sales", commit.id, name) == expected, f"{where}: committed object"
    in_commit = lake / "sales" / commit.id / name
    assert os.stat(in_commit).st_size == len(expected), f"{where}: size in the commit's directory"
    assert in_commit.read_bytes() == expected, f"{where}: contents in the commit's directory"

    # a fresh mount of the repository
    with mounted(lake_home, tmp_path / "mnt2", "lakefs://sales", io_lake.args) as again:
        for path in (again / branch.name / name, again / commit.id / name):
            assert os.stat(path).st_size == len(expected), f"{where}: size of {path} in a new mount"
            assert path.read_bytes() == expected, f"{where}: contents of {path} in a new mount"
    run.assert_nothing_refused()


def test_a_sparse_file_reads_zeros_in_its_hole_and_keeps_a_rewrite_in_it(io_branch, lake_home):
    branch = io_branch
    rng = random.Random(64)
    head, tail = rng.randbytes(3 * MIB), rng.randbytes(1 * MIB + 123)
    hole_start, tail_at = len(head), 64 * MIB
    middle_at, middle = 32 * MIB + 1000, rng.randbytes(4 * KIB)  # unaligned, in the middle of the hole
    size = tail_at + len(tail)
    path = branch / "sparse.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert os.pwrite(fd, head, 0) == len(head)
        assert os.pwrite(fd, tail, tail_at) == len(tail)
        assert os.fstat(fd).st_size == size
    finally:
        os.close(fd)

    def check(rewritten: bool, when: str) -> None:
        assert os.stat(path).st_size == size, f"{when}: size"
        fd = os.open(path, os.O_RDONLY)
        try:
            assert os.pread(fd, len(head), 0) == head, f"{when}: the head"
            assert os.pread(fd, len(tail) + 4096, tail_at) == tail, f"{when}: the tail (and EOF after it)"
            offset, chunk = hole_start, 4 * MIB
            while offset < tail_at:
                got = os.pread(fd, min(chunk, tail_at - offset), offset)
                assert len(got) == min(chunk, tail_at - offset), f"{when}: short read at {offset}"
                want = bytearray(len(got))
                if rewritten and offset < middle_at + len(middle) and middle_at < offset + len(got):
                    lo, hi = max(middle_at, offset), min(middle_at + len(middle), offset + len(got))
                    want[lo - offset:hi - offset] = middle[lo - middle_at:hi - middle_at]
                if got != want:
                    pytest.fail(f"{when}: the hole at [{offset}, {offset + len(got)}): "
                                f"{first_difference(got, bytes(want))}", pytrace=False)
                offset += len(got)
            # unaligned reads across the edges of the hole
            assert os.pread(fd, 10, hole_start - 5) == head[-5:] + bytes(5), f"{when}: across its start"
            assert os.pread(fd, 10, tail_at - 5) == bytes(5) + tail[:5], f"{when}: across its end"
        finally:
            os.close(fd)

    check(False, "after close")
    fd = os.open(path, os.O_RDWR)
    try:
        assert os.pwrite(fd, middle, middle_at) == len(middle)
        assert os.pread(fd, len(middle) + 2, middle_at - 1) == b"\0" + middle + b"\0"
    finally:
        os.close(fd)
    check(True, "after rewriting 4 KiB in the hole and closing")

    sync_dir(branch)
    commit = lake_home.catalog.commit("sales", branch.name, "sparse", "tests")
    committed = lake_home.catalog.read_object("sales", commit.id, "sparse.bin")
    assert len(committed) == size
    assert committed[:len(head)] == head and committed[tail_at:] == tail
    assert committed[middle_at:middle_at + len(middle)] == middle
    assert committed[hole_start:middle_at].count(0) == middle_at - hole_start
    assert committed[middle_at + len(middle):tail_at].count(0) == tail_at - middle_at - len(middle)


# Two cases the random mix finds now and then, on their own: both compared with a local file.

def test_a_reader_opened_beside_a_writer_reads_the_hole_the_writer_made(io_branch, tmp_path):
    """A read-only descriptor opened while the file is open for writing; the writer writes past
    the end (a hole before its bytes): reads of the hole through the reader return zeros, as
    many as asked for, like on a local disk."""
    branch = io_branch
    answers = {}
    for root in (branch, tmp_path):
        path = root / "beside.bin"
        writer = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        reader = os.open(path, os.O_RDONLY)
        try:
            os.pwrite(writer, b"w" * 511, 1987763)
            answers[root] = [("fstat", os.fstat(reader).st_size)]
            for length, offset in ((9957, 1935817), (1000, 0), (1000, 1000000), (100, 1987700)):
                data = os.pread(reader, length, offset)
                answers[root].append((f"pread(reader, {length}, {offset})", len(data), data.count(0)))
        finally:
            os.close(reader)
            os.close(writer)
        whole = (root / "beside.bin").read_bytes()
        answers[root].append(("after close", len(whole), whole == bytes(1987763) + b"w" * 511))
    assert answers[branch] == answers[tmp_path], f"mount {answers[branch]}\nlocal {answers[tmp_path]}"


def test_a_file_being_written_can_be_mapped_shared_through_any_descriptor(io_branch, tmp_path):
    """MAP_SHARED of a file open for writing, through a read-only descriptor opened beside the
    writer and through a read-write one opened after it (and beside a ``cp``-style writer, a
    write-only descriptor that truncated the file): it maps, and a store through the map is
    read back through the file, like on a local disk."""
    def scenario(root: Path, name: str, first_flags: int) -> list:
        path = root / name
        first = os.open(path, first_flags | os.O_CREAT, 0o644)
        os.pwrite(first, b"a" * 8192, 0)
        reader = os.open(path, os.O_RDONLY)
        other = os.open(path, os.O_RDWR)
        out = []
        try:
            for label, fd, prot in (("reader", reader, mmap.PROT_READ),
                                    ("read-write", other, mmap.PROT_READ | mmap.PROT_WRITE)):
                def mapped(fd=fd, prot=prot):
                    m = mmap.mmap(fd, 8192, flags=mmap.MAP_SHARED, prot=prot)
                    try:
                        if prot & mmap.PROT_WRITE:
                            m[100:103] = b"xyz"
                            m.flush()
                        return m[98:105]
                    finally:
                        m.close()
                out.append((label, outcome(mapped)))
            out.append(("pread", os.pread(other, 7, 98)))
        finally:
            for fd in (other, reader, first):
                os.close(fd)
        return out

    branch = io_branch
    for name, flags in (("mapped-rw.bin", os.O_RDWR | os.O_TRUNC),
                        ("mapped-cp.bin", os.O_WRONLY | os.O_TRUNC)):
        got, expected = scenario(branch, name, flags), scenario(tmp_path, name, flags)
        assert got == expected, f"{name}: mount {got}, local {expected}"
