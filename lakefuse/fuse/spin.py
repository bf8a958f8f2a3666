"""How the session loop waits for the next request: polling between requests, and the idle
reader while it sleeps.

Polling: when /dev/fuse has nothing queued, the session loop polls it for a short window
before it goes to sleep.  This module owns the window's default (``DEFAULT_SPIN_SECONDS``, the
mount's ``--spin-us``), and starting the idle reader (``start_idle_reader``, below).  The polling
itself is in the pyfuse3 that scripts/install builds (``scripts/build_pyfuse3.py``): the loop
calls ``poll(2)`` on /dev/fuse with a zero timeout and ``sched_yield(2)`` between calls, holding
no GIL, until a request is queued or the window (``LakeOperations.spin_wait_ns``, read at
FUSE_INIT) is over; then it sleeps in trio as before.  A stock pyfuse3 never polls.

Why: requests come in runs (a ``stat`` loop, ``rsync``, ``git clone``, Spark opening one file
after another), the next one sent microseconds after the last reply.  A loop that is asleep
must be woken for it: on a virtual machine that is an interrupt to an idle CPU, tens of
microseconds each way, more than lakefuse spends on the request, and the wake-up then goes
through trio's lock, epoll registration and scheduler passes.  On this project's 2-core VM a
null pyfuse3 filesystem answered a ``stat`` of a missing name in 77 µs asleep and 45 µs
polling (a C libfuse one in 49 µs).

What it costs: up to the window of CPU time after the last request of a run.  The yields
hand that CPU to any thread or process that wants it (the client, the spool's writer and
hashing threads, Spark's JVM); the GIL is free meanwhile.  An earlier spinner, a trio task
looping through the scheduler with the GIL held, took the client's core and made a Spark job
slower; it is gone (docs/mount.md, "Runs of requests").
"""

from __future__ import annotations

#: how long the loop polls for the next request before it sleeps (``--spin-us``)
DEFAULT_SPIN_SECONDS = 50e-6


def start_idle_reader() -> bool:
    """Start the idle reader of lakefuse's pyfuse3 (after FUSE_INIT, on the event loop's
    thread); whether it runs (False: a stock pyfuse3, or the kernel refused a clone of
    /dev/fuse).

    The idle reader is a thread that reads requests while the session loop sleeps, blocked in
    read(2) on its own clone of /dev/fuse: the kernel wakes one such reader per request, where
    a sleeping event loop is woken through epoll and trio's scheduler before it even reads the
    request.  It answers what the binding answers in C (missing names, opens and releases of
    local objects, cached reads) with the GIL, as the session loop would, and hands any other
    request to the event loop, which then reads the next requests itself until it sleeps
    again.  The loop sleeps so only while most of its recent requests were answered in C
    (reading a dataset); while they go to handlers (creating files) it sleeps in trio as
    before, because a hand-over costs two wake-ups (``scripts/build_pyfuse3.py``,
    ``_idle_reader_loop``; docs/mount.md, "Runs of requests")."""
    import pyfuse3  # here: the CLI reads this module's default without loading the binding

    start = getattr(pyfuse3, "start_idle_reader", None)
    return bool(start is not None and start())


def idle_reader_counts() -> tuple[int, int] | None:
    """(requests the idle reader answered in the binding, requests it handed to the event
    loop), or None with a stock pyfuse3."""
    import pyfuse3

    counts = getattr(pyfuse3, "idle_reader_counts", None)
    return tuple(counts()) if counts is not None else None
