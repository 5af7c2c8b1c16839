"""wait_for_news: the wait between two looks ends once a status lands and settles."""

from __future__ import annotations

import threading
import time

from stragglerlab.monitor.news import NEWS_EVERY_S, status_mark, wait_for_news
from stragglerlab.util.atomic import atomic_write_text


def _timed(*args) -> float:
    t = time.monotonic()
    wait_for_news(*args)
    return time.monotonic() - t


def test_nothing_new_waits_the_whole_poll(tmp_path):
    (tmp_path / "status").mkdir()
    took = _timed(threading.Event(), 0.4, lambda: status_mark(tmp_path))
    assert 0.38 <= took < 1.0


def test_a_status_landing_ends_the_wait_once_it_settles(tmp_path):
    (tmp_path / "status").mkdir()
    landed = {}

    def write() -> None:
        time.sleep(0.2)
        for r in range(8):  # a step's statuses, one after another
            atomic_write_text(tmp_path / "status" / f"rank{r}.json", "{}")
        landed["at"] = time.monotonic()

    writer = threading.Thread(target=write)
    t0 = time.monotonic()
    writer.start()
    wait_for_news(threading.Event(), 5.0, lambda: status_mark(tmp_path))
    done = time.monotonic()
    writer.join()
    assert done >= landed["at"] - 2 * NEWS_EVERY_S  # not before the statuses changed
    assert done - t0 < 1.5  # long before the 5-s poll


def test_stop_ends_the_wait_and_a_missing_folder_changes_nothing(tmp_path):
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert _timed(stop, 5.0, lambda: status_mark(tmp_path)) < 1.0
    assert status_mark(tmp_path) is None
