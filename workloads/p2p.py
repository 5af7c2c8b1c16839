"""Asynchronous pipeline P2P for one rank: posted off the compute thread, completion stamped.

Why: the what-if dependency model lets a stage block only on data it needs
(nothing waits for a send; a recv follows the previous compute). With gloo a
send completes only when the peer posted its recv, and posting an isend or
irecv of an activation costs ~0.4 ms of CPU. Done on the compute thread, both
turn into untraced gaps between computes (launch delay), which the model then
removes, so simulated and actual step time drift apart. So, like a GPU's
communication stream:

* one poster thread issues every isend/irecv in program order (gloo matches
  a pair's messages in order);
* one watcher thread per channel (kind, peer) waits for completions in
  posting order and stamps each completion time into the trace;
* the compute thread only enqueues, and waits for a recv's event when it
  needs the tensor.

`quiesce()` waits until everything posted so far is on the wire (call before
collectives on the same process group); `drain()` waits for every completion
and re-raises the first failure (e.g. a timeout because the peer died).

    p2p = AsyncP2P(timeout)
    p2p.send(tensor, peer, on_done=lambda t: tracer.set_end(row, t))
    event = p2p.recv(buf, peer, on_done=...)
"""

from __future__ import annotations

import datetime
import queue
import threading
from collections.abc import Callable

import torch.distributed as dist

from stragglerlab.workloads.tracer import now


class AsyncP2P:
    """A poster thread plus one FIFO completion watcher per channel."""

    def __init__(self, timeout: datetime.timedelta,
                 before_send: Callable[[], None] | None = None) -> None:
        self.timeout = timeout
        self.before_send = before_send  # e.g. an injected network delay, on this thread
        self.error: BaseException | None = None
        self._post_q: queue.Queue = queue.Queue()
        self._watch_qs: dict[tuple, queue.Queue] = {}
        self._threads = [threading.Thread(target=self._post_loop, daemon=True, name="p2p-post")]
        self._threads[0].start()

    # -- compute thread ------------------------------------------------------------
    def send(self, tensor, peer: int, on_done: Callable[[float], None]) -> None:
        """Enqueue an isend of tensor to peer."""
        self._post_q.put(("send", tensor, peer, on_done, None))

    def recv(self, buf, peer: int, on_done: Callable[[float], None]) -> threading.Event:
        """Enqueue an irecv into buf; the returned event is set once the data arrived."""
        event = threading.Event()
        self._post_q.put(("recv", buf, peer, on_done, event))
        return event

    def quiesce(self) -> None:
        """Wait until every enqueued op has been posted."""
        self._post_q.join()
        self._raise()

    def drain(self) -> None:
        """Wait until every posted op completed; raise the first failure."""
        self.quiesce()
        for q in list(self._watch_qs.values()):
            q.join()
        self._raise()

    def close(self) -> None:
        """Stop the threads (after a drain, or when giving up)."""
        self._post_q.put(None)
        for q in list(self._watch_qs.values()):
            q.put(None)
        for t in self._threads:
            t.join(timeout=1.0)

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"a pipeline P2P op failed: {self.error}") from self.error

    # -- helper threads --------------------------------------------------------------
    def _post_loop(self) -> None:
        while True:
            item = self._post_q.get()
            try:
                if item is None:
                    return
                kind, tensor, peer, on_done, event = item
                if self.error is None:
                    if kind == "send" and self.before_send is not None:
                        self.before_send()
                    op = dist.isend if kind == "send" else dist.irecv
                    self._watch((kind, peer), (op(tensor, peer), tensor, on_done, event))
            except BaseException as e:  # noqa: BLE001 - handed to the compute thread
                self.error = e
            finally:
                self._post_q.task_done()

    def _watch(self, channel: tuple, item: tuple) -> None:
        q = self._watch_qs.get(channel)
        if q is None:
            q = self._watch_qs[channel] = queue.Queue()
            t = threading.Thread(target=self._watch_loop, args=(q,), daemon=True,
                                 name=f"p2p-watch-{channel[0]}-{channel[1]}")
            self._threads.append(t)
            t.start()
        q.put(item)

    def _watch_loop(self, q: queue.Queue) -> None:
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                work, _tensor, on_done, event = item  # _tensor stays alive until completion
                if self.error is None:
                    work.wait(self.timeout)
                    on_done(now())
                    if event is not None:
                        event.set()
            except BaseException as e:  # noqa: BLE001 - handed to the compute thread
                self.error = e
            finally:
                q.task_done()
