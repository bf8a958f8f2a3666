"""The request spinner: polls for a window after each answered request, then parks."""

from __future__ import annotations

import time

import pytest

trio = pytest.importorskip("trio")

from lakefuse.fuse.spin import RequestSpinner  # noqa: E402


def run_spinning(window: float, check) -> None:
    """Run ``await check(spinner)`` on a trio loop while a spinner of ``window`` seconds runs."""
    async def main():
        spinner = RequestSpinner(window=window)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spinner.run)
            await check(spinner)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_spins_for_its_window_after_a_request_then_parks():
    async def check(spinner):
        await trio.sleep(0.01)
        assert not spinner.parked  # still inside the first window
        await trio.sleep(0.1)
        assert spinner.parked  # no request for longer than the window
        spinner.beat()
        assert not spinner.parked
        await trio.sleep(0.02)
        assert not spinner.parked
        for _ in range(5):  # requests keep coming: the window keeps moving
            await trio.sleep(0.03)
            spinner.beat()
        await trio.sleep(0.02)
        assert not spinner.parked
        await trio.sleep(0.1)
        assert spinner.parked

    run_spinning(0.05, check)


def test_spinning_costs_cpu_time_and_a_parked_spinner_none():
    async def cpu_seconds_while_sleeping(seconds: float) -> float:
        started = time.process_time()
        await trio.sleep(seconds)
        return time.process_time() - started

    async def check(spinner):
        # the loop kept polling: a good part of a core even when other processes (the suite's
        # other worker) share the two cores, and far more than when parked
        spinning = await cpu_seconds_while_sleeping(0.5)
        spinner.window = 0.001
        spinner.beat()
        await trio.sleep(0.05)
        assert spinner.parked
        parked = await cpu_seconds_while_sleeping(0.5)
        assert parked < 0.05  # asleep in epoll_wait
        assert spinning > max(0.1, 5 * parked), (spinning, parked)

    run_spinning(10.0, check)


def test_hush_parks_at_once_and_the_next_beat_spins_again():
    async def check(spinner):
        await trio.sleep(0.01)
        assert not spinner.parked
        spinner.hush()  # a write whose bytes other threads are writing: give them the core
        await trio.sleep(0.01)
        assert spinner.parked  # long before the 10 s window
        spinner.hush()  # while parked: nothing changes
        spinner.beat()  # a lookup: spin again
        await trio.sleep(0.05)
        assert not spinner.parked

    run_spinning(10.0, check)


def test_a_zero_window_never_spins():
    async def main():
        spinner = RequestSpinner(window=0)
        with trio.move_on_after(1) as scope:
            await spinner.run()  # returns at once
        assert not scope.cancelled_caught
        spinner.beat()  # harmless

    trio.run(main)
