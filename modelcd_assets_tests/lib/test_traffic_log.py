"""The traffic log: bounded, rotating, sampled at its ratio (0 is off), and read past a torn last line."""

import json
import random
import threading

import pytest

from modelcd_assets.lib import traffic_log
from modelcd_assets.lib.traffic_log import CURRENT, PREVIOUS, LiveDrift, TrafficLog, has_records, window


def texts(log_folder):
    return [r.text for r in window(log_folder, "m", 10_000)]


def lines(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_the_log_keeps_at_most_max_records_newest_last_rotating_by_halves(tmp_path):
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=10)
    sent = [f"ticket {i}" for i in range(23)]
    for i, t in enumerate(sent):
        log.append("3", [t], ts=float(i))
        assert len(texts(tmp_path)) <= 10
        assert lines(log.folder / CURRENT) <= 5 and lines(log.folder / PREVIOUS) <= 5
    # 23 = 4 full files of 5 + 3: previous holds 16..20, current 21..23; everything older was rotated out.
    assert texts(tmp_path) == sent[15:]
    assert [r.ts for r in window(tmp_path, "m", 3)] == [20.0, 21.0, 22.0]
    assert {r.version for r in window(tmp_path, "m", 100)} == {"3"}


def test_a_request_with_more_texts_than_the_bound_keeps_only_its_newest(tmp_path):
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=10)
    log.append("1", ["old"])
    sent = [f"t{i}" for i in range(64)]
    log.append("2", sent)
    got = texts(tmp_path)
    assert 5 <= len(got) <= 10 and got == sent[-len(got):]  # rotation is by halves: the newest half at least, the bound at most


def test_ratio_zero_samples_nothing_and_a_ratio_samples_that_share(tmp_path):
    off = TrafficLog(tmp_path, "m", ratio=0.0, max_records=10, rng=random.Random(0))
    assert not off.enabled and not any(off.chosen() for _ in range(10_000))
    assert not (tmp_path / traffic_log.TRAFFIC_DIR).exists() and not has_records(tmp_path, "m")
    tenth = TrafficLog(tmp_path, "m", ratio=0.1, max_records=10, rng=random.Random(0))
    share = sum(tenth.chosen() for _ in range(10_000)) / 10_000
    assert 0.09 < share < 0.11, share  # binomial sd 0.003
    assert all(TrafficLog(tmp_path, "m", ratio=1.0, max_records=10).chosen() for _ in range(1000))


def test_a_torn_last_line_is_skipped_and_the_next_append_stays_whole(tmp_path):
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=100)
    log.append("1", ["a", "b", "c"])
    with open(log.folder / CURRENT, "ab") as f:
        f.write(b'{"ts": 1.0, "version": "1", "te')  # a writer stopped mid-line
    assert texts(tmp_path) == ["a", "b", "c"]
    log.append("1", ["d"])
    assert texts(tmp_path) == ["a", "b", "c", "d"]
    (log.folder / PREVIOUS).write_bytes(b'{"ts": 0, "version": "1", "text": "z"}\nnot json\n[1, 2]\n')
    assert texts(tmp_path) == ["z", "a", "b", "c", "d"]


def test_concurrent_writers_in_threads_and_separate_logs_stay_bounded_and_whole(tmp_path):
    """Two TrafficLog objects stand for two server processes: each counts what the other appended (flock, not memory)."""
    logs = [TrafficLog(tmp_path, "m", ratio=1.0, max_records=40) for _ in range(2)]

    def write(log, k):
        for i in range(60):
            log.append("1", [f"w{k}-{i}"])

    threads = [threading.Thread(target=write, args=(logs[k % 2], k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    folder = logs[0].folder
    # 240 records in files of 20: exactly full current and previous only if every append counted the other log's lines.
    assert lines(folder / CURRENT) == 20 and lines(folder / PREVIOUS) == 20
    for name in (CURRENT, PREVIOUS):
        for line in (folder / name).read_bytes().splitlines():
            assert json.loads(line)["text"].startswith("w")
    got = texts(tmp_path)
    assert len(got) == 40 and len(set(got)) == 40


def test_the_live_drift_verdict_round_trips_and_a_bad_file_is_named(tmp_path):
    assert traffic_log.read_live_drift(tmp_path, "m") is None
    verdict = LiveDrift(time="2026-01-01T00:00:00+00:00", version="2", judged=True, detected=True, input_drifted_share=0.6,
                        descriptors=["digit_share", "n_chars", "n_tokens"], records=500, reason="drifted")
    path = traffic_log.write_live_drift(tmp_path, "m", verdict)
    assert path == traffic_log.live_drift_path(tmp_path, "m") and traffic_log.read_live_drift(tmp_path, "m") == verdict
    path.write_text('{"share": 1}')
    with pytest.raises(ValueError, match="live_drift.json is not a live drift verdict"):
        traffic_log.read_live_drift(tmp_path, "m")
