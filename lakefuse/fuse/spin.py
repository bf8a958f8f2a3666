"""Polling between requests: when /dev/fuse has nothing queued, the session loop polls it for
a short window before it goes to sleep.

Owns the window's default (``DEFAULT_SPIN_SECONDS``, the mount's ``--spin-us``).  The polling
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
