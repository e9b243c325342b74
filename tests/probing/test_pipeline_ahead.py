"""The probe loop's read-ahead (kgprobe.probing.pipeline.Ahead): results in the items' order
whatever order the threads finish in, never more than ``depth`` items ahead of the consumer,
up to ``threads`` computed at once, and a worker's error raised on the consumer as itself."""

from __future__ import annotations

import threading
import time

import pytest

from kgprobe.probing.pipeline import Ahead


def test_results_come_in_order_though_later_items_finish_first() -> None:
    def slow_first(i: int) -> int:
        time.sleep(0.2 if i % 2 == 0 else 0.0)  # even items take longer than the odd after them
        return i * 10

    assert list(Ahead(slow_first, range(7), depth=2, threads=2)) == [0, 10, 20, 30, 40, 50, 60]


def test_two_items_are_computed_at_once_and_never_more_than_depth_ahead() -> None:
    lock = threading.Lock()
    now = peak = started = 0

    def work(i: int) -> int:
        nonlocal now, peak, started
        with lock:
            now += 1
            started += 1
            peak = max(peak, now)
        time.sleep(0.05)
        with lock:
            now -= 1
        return i

    ahead = Ahead(work, range(20), depth=3, threads=2)
    seen = []
    for consumed, v in enumerate(ahead, start=1):
        time.sleep(0.02)
        with lock:
            # at most depth items submitted beyond the ones consumed (the one in hand included)
            assert started <= consumed + 3
        seen.append(v)
    assert seen == list(range(20))
    assert peak == 2


def test_depth_zero_runs_on_the_consumers_thread() -> None:
    where = []
    list(Ahead(lambda i: where.append(threading.current_thread()), range(3), depth=0, threads=2))
    assert where == [threading.current_thread()] * 3


def test_a_workers_error_is_raised_on_the_consumer_as_itself() -> None:
    boom = ValueError("graph gone")

    def work(i: int) -> int:
        if i == 3:
            raise boom
        return i

    got = []
    with pytest.raises(ValueError) as info:
        for v in Ahead(work, range(10), depth=2, threads=2):
            got.append(v)
    assert info.value is boom
    assert got == [0, 1, 2]


def test_stopping_early_stops_the_reading() -> None:
    started = []

    def work(i: int) -> int:
        started.append(i)
        time.sleep(0.01)
        return i

    for v in Ahead(work, range(1000), depth=2, threads=2):
        if v == 4:
            break
    time.sleep(0.1)
    assert len(started) <= 4 + 1 + 2  # the ones consumed, the one in hand, at most depth ahead
