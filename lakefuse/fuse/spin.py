"""Polling between requests: after each request the event loop keeps looking at /dev/fuse for
a short window instead of going to sleep in ``epoll_wait``.

Owns ``RequestSpinner``.  Why: a small request (the LOOKUP of a ``stat``, a GETATTR, the next
READ of a stream) costs the kernel little and lakefuse tens of microseconds, but waking a
sleeping daemon thread costs more than both on a virtual machine (an inter-processor
interrupt, a scheduler round trip).  Requests come in runs - ``ls``, ``find``, ``rsync``, a
Spark listing, a sequential read - so the next one usually arrives within microseconds of the
last reply; a loop that is still polling picks it up with no wake-up at all.

How: the handlers call ``beat()`` as they finish (an integer add).  ``run()`` is a trio task
that, while beats keep coming less than ``window`` seconds apart, yields to the scheduler
in a loop (``trio.sleep(0)``: every pass polls the file descriptors without blocking); after
``window`` seconds without a request it parks until the next ``beat()``.  An idle mount
costs nothing; a busy one at most ``window`` of one core's time after each request.  Off by
default (see ``DEFAULT_WINDOW_SECONDS``): on a small machine that core is the client's.

Not after writes: a handler whose work goes on in other threads (a big write is answered once
its bytes are queued for the spool's writer and hashing threads) calls ``hush()`` instead, and
the loop parks at once.  Those threads need the core the spinning would take: ``cp`` of 1 GiB
into a branch was about 8% slower with the loop spinning between its writes.
"""

from __future__ import annotations

import time

import trio

#: default window: none.  On a 2-core machine the polling core is the one the client needs:
#: a Spark job reading 20,000 small files ran 1.16-1.28x bindfs's time without spinning and
#: 1.27-1.49x with a 100 us window, and a Python loop of stat+read 2.2-2.6x against 3.1-4.2x
#: (docs/mount.md, "Runs of requests"); a single-threaded stat or create loop gained nothing
#: measurable from it.  ``--spin-us`` turns it on where a core is free.
DEFAULT_WINDOW_SECONDS = 0.0


class RequestSpinner:
    def __init__(self, window: float = DEFAULT_WINDOW_SECONDS):
        self.window = window
        self.beats = 0
        self._parked: trio.Event | None = None
        self._hushed = False

    @property
    def parked(self) -> bool:
        """Whether the loop is asleep until the next request (not spinning)."""
        return self._parked is not None

    def beat(self) -> None:
        """A request was answered (called on the trio thread)."""
        self.beats += 1
        self._hushed = False
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked.set()

    def hush(self) -> None:
        """A request was answered whose work goes on in other threads: stop spinning now
        (called on the trio thread)."""
        self._hushed = True

    async def run(self) -> None:
        """Spin after each burst of requests; returns only when cancelled."""
        if self.window <= 0:
            return
        clock = time.monotonic
        while True:
            seen = self.beats
            deadline = clock() + self.window
            while True:
                await trio.sleep(0)
                if self._hushed:
                    self._hushed = False
                    break
                if self.beats != seen:
                    seen = self.beats
                    deadline = clock() + self.window
                elif clock() >= deadline:
                    break
            parked = self._parked = trio.Event()
            await parked.wait()
