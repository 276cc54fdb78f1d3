"""Gate verdicts for the admin API, from a `modelcd verdict NAME --stdin` helper process.

The serving process imports no Dagster; the one reader of gate results (gate_results.read_gates) runs in a
helper it starts once and keeps, so an admin call costs an event-log read, not a Dagster import. Anything
but a clear answer (the helper failing to start, dying, answering late or with an error) is a refusal.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import threading

log = logging.getLogger("modelcd.serve")
START_TIMEOUT_S, ANSWER_TIMEOUT_S = 180.0, 60.0


class GateVerdicts:
    """Callable: version -> why it has not passed its gates ([] when it has)."""

    def __init__(self, model: str, environ: dict):
        self.model, self.environ = model, dict(environ)
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the helper ahead of the first admin call (it takes seconds to import Dagster and load the code location)."""
        threading.Thread(target=self._warm, name="verdicts-start", daemon=True).start()

    def _warm(self) -> None:
        with self._lock:
            try:
                self._ensure()
            except Exception as e:  # reported again, as a refusal, on the first admin call
                log.warning("the gate-verdict helper did not start: %s", e)
                self._stop()

    def _ensure(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        self._lines = queue.Queue()
        self._proc = subprocess.Popen([sys.executable, "-m", "modelcd_assets.cli", "verdict", self.model, "--stdin"], env=self.environ,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        lines, stdout = self._lines, self._proc.stdout
        threading.Thread(target=lambda: ([lines.put(line) for line in stdout], lines.put(None)), name="verdicts-read", daemon=True).start()
        if not json.loads(self._next(START_TIMEOUT_S)).get("ready"):
            raise RuntimeError("the helper did not say it was ready")
        return self._proc

    def _next(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer within {timeout:.0f} s") from None
        if line is None:
            raise RuntimeError(f"the helper exited with {self._proc.wait() if self._proc else '?'}")
        return line

    def __call__(self, version: str) -> list[str]:
        with self._lock:
            try:
                proc = self._ensure()
                proc.stdin.write(f"{version}\n")
                proc.stdin.flush()
                answer = json.loads(self._next(ANSWER_TIMEOUT_S))
                if "error" in answer or str(answer.get("version")) != str(version):
                    raise RuntimeError(answer.get("error") or f"an answer for version {answer.get('version')}")
                return [] if answer["promotable"] is True else [str(p) for p in answer["problems"]] or ["not promotable"]
            except Exception as e:
                self._stop()
                return [f"the gate results of version {version} could not be read ({type(e).__name__}: {e}); nothing was loaded"]

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        with self._lock:
            self._stop()
