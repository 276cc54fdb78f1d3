"""The traffic log: bounded, rotating, sampled at its ratio (0 is off), and read past a torn last line."""

import json
import random
import threading

import pytest

from modelcd_assets.lib import layout
from modelcd_assets.lib.operations import traffic_log
from modelcd_assets.lib.operations.traffic_log import CURRENT, PREVIOUS, LiveDrift, TrafficLog, has_records, window


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
    assert 5 <= len(got) <= 10 and got == sent[-len(got) :]  # rotation is by halves: the newest half at least, the bound at most


def test_ratio_zero_samples_nothing_and_a_ratio_samples_that_share(tmp_path):
    off = TrafficLog(tmp_path, "m", ratio=0.0, max_records=10, rng=random.Random(0))
    assert not off.enabled and not any(off.chosen() for _ in range(10_000))
    assert not (tmp_path / layout.TRAFFIC_DIR).exists() and not has_records(tmp_path, "m")
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
    verdict = LiveDrift(
        time="2026-01-01T00:00:00+00:00",
        version="2",
        judged=True,
        detected=True,
        input_drifted_share=0.6,
        descriptors=["digit_share", "n_chars", "n_tokens"],
        records=500,
        reason="drifted",
    )
    path = traffic_log.write_live_drift(tmp_path, "m", verdict)
    assert path == traffic_log.live_drift_path(tmp_path, "m") and traffic_log.read_live_drift(tmp_path, "m") == verdict
    path.write_text('{"share": 1}')
    with pytest.raises(ValueError, match="live_drift.json is not a live drift verdict"):
        traffic_log.read_live_drift(tmp_path, "m")


def size(folder):
    return sum((folder / name).stat().st_size for name in (CURRENT, PREVIOUS) if (folder / name).exists())


def test_the_log_is_bounded_in_bytes_as_well_as_records(tmp_path):
    """A 10-record log used to hold 45 MiB: the record bound alone says nothing about long texts."""
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=10_000, max_bytes=2**20)
    sent = [f"{i:04d} " + "x" * 50_000 for i in range(60)]
    for t in sent:
        log.append("1", [t])
        assert size(log.folder) <= 2**20
    got = texts(tmp_path)
    assert got == sent[-len(got) :] and len(got) >= 9  # the newest half at least: a file of 512 KiB holds 10 of these


def test_a_record_longer_than_its_bound_is_left_out_and_counted(tmp_path):
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=10, max_bytes=2**20, max_record_bytes=1000)
    assert log.append("1", ["short", "y" * 5 * 2**20, "also short"]) == 1
    assert texts(tmp_path) == ["short", "also short"] and size(log.folder) < 1000
    with pytest.raises(ValueError, match="max_record_bytes < max_bytes // 2"):
        TrafficLog(tmp_path, "m", ratio=1.0, max_records=10, max_bytes=2**20, max_record_bytes=2**19)


def test_a_record_at_the_bound_of_its_chars_fits(tmp_path):
    worst = "\x01" * 1000  # JSON writes each as \u0001: the largest a character gets
    log = TrafficLog(tmp_path, "m", ratio=1.0, max_records=10, max_bytes=2**20, max_record_bytes=traffic_log.record_bytes_bound(1000))
    assert log.append("12345", [worst, "\U0001f600" * 1000]) == 0
    assert texts(tmp_path) == [worst, "\U0001f600" * 1000]


def test_files_are_private_to_the_server_user_and_an_open_log_is_tightened(tmp_path):
    """The log, its lock and the live drift verdict held client texts and verdicts readable by every user (0644 in 0755)."""
    folder = traffic_log.folder(tmp_path, "m")
    folder.mkdir(parents=True, mode=0o755)
    folder.chmod(0o755)
    folder.parent.chmod(0o755)
    (folder / CURRENT).write_bytes(b'{"ts": 0, "version": "1", "text": "old"}\n')
    (folder / CURRENT).chmod(0o644)
    TrafficLog(tmp_path, "m", ratio=1.0, max_records=10).append("1", ["new"])
    traffic_log.write_live_drift(
        tmp_path,
        "m",
        LiveDrift(time="t", version="1", judged=False, detected=False, input_drifted_share=None, descriptors=[], records=0, reason="r"),
    )
    window(tmp_path, "m", 10)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in (folder.parent, folder)} == {layout.TRAFFIC_DIR: "0o700", "m": "0o700"}
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir()} == {
        n: "0o600" for n in (CURRENT, traffic_log.LOCK, traffic_log.LIVE_DRIFT_FILE)
    }
    fresh = tmp_path / "fresh"
    traffic_log.write_live_drift(fresh, "m", traffic_log.read_live_drift(tmp_path, "m"))
    assert oct(traffic_log.folder(fresh, "m").stat().st_mode & 0o777) == "0o700"
    assert oct(traffic_log.live_drift_path(fresh, "m").stat().st_mode & 0o777) == "0o600"


def test_a_window_reads_from_the_end_within_its_byte_budget(tmp_path, monkeypatch):
    """window() used to read both files whole: a huge line (a log from before the byte bound, or a stray file) went into memory."""
    folder = traffic_log.folder(tmp_path, "m")
    folder.mkdir(parents=True)
    records = b"".join(json.dumps({"ts": i, "version": "1", "text": f"r{i}"}).encode() + b"\n" for i in range(5))
    (folder / PREVIOUS).write_bytes(b'{"ts": 0, "version": "1", "text": "' + b"z" * (20 * 2**20) + b'"}\n' + records)
    (folder / CURRENT).write_bytes(records.replace(b'"r', b'"c'))
    read = []
    pread = traffic_log.os.pread

    def counting(fd, n, offset):
        read.append(n)
        return pread(fd, n, offset)

    monkeypatch.setattr(traffic_log.os, "pread", counting)
    assert [r.text for r in window(tmp_path, "m", 3)] == ["c2", "c3", "c4"]
    assert [r.text for r in window(tmp_path, "m", 8)] == ["r2", "r3", "r4", "c0", "c1", "c2", "c3", "c4"]
    read.clear()
    got = window(tmp_path, "m", 100, max_bytes=2**20)
    assert [r.text for r in got] == [f"r{i}" for i in range(5)] + [f"c{i}" for i in range(5)]  # the huge line lies beyond the budget
    assert sum(read) <= 2**20
