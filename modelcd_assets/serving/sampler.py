"""The traffic log's writer for a server: sampled request texts written off the request path, for live drift."""

from __future__ import annotations

import logging
import queue
import threading

from modelcd_assets.lib.operations.traffic_log import TrafficLog

SAMPLE_QUEUE = 64  # sampled requests waiting for the traffic log's writer; each at most serving.max_body_bytes
log = logging.getLogger("modelcd.serve")


class Sampler:
    """The traffic log's writer thread behind a bounded queue: a sample that finds the queue full is dropped and counted.

    A sample that cannot be written costs the sample, never the request; the first failure is logged.
    """

    def __init__(self, traffic: TrafficLog, dropped, size: int = SAMPLE_QUEUE):
        self.traffic, self.dropped = traffic, dropped
        self._queue: queue.Queue[tuple[str, list[str]] | None] = queue.Queue(maxsize=size)
        self._closed, self._failed = False, False
        self._thread = threading.Thread(target=self._run, name="traffic-log", daemon=True)
        self._thread.start()

    def submit(self, version: str, texts: list[str]) -> None:
        if self._closed:  # the server is stopping
            return
        try:
            self._queue.put_nowait((version, texts))
        except queue.Full:
            self.dropped.inc(len(texts))

    def close(self) -> None:
        """Write the samples already taken (each one small append), then stop."""
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self.traffic.close()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._write(*item)

    def _write(self, version: str, texts: list[str]) -> None:
        try:
            if too_long := self.traffic.append(version, texts):
                self.dropped.inc(too_long)
        except OSError as e:
            if not self._failed:
                self._failed = True
                log.warning(
                    "sampled traffic cannot be written to %s (%s); requests are served as before, but live drift cannot be judged "
                    "until it can: check the folder's space and permissions, or set serving.sample_ratio to 0",
                    self.traffic.folder,
                    e,
                )
        except Exception:  # a bug, not the disk: said once, loudly, and still never the request's problem
            if not self._failed:
                self._failed = True
                log.exception("sampling traffic into %s failed", self.traffic.folder)
