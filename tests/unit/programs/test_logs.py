"""The shared logging set-up: a record is one line whatever its data, in text and in JSON."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gpu_scheduling import logs


@pytest.fixture
def capture():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()

    def configure(fmt: str, level: str = "DEBUG") -> io.StringIO:
        logs.configure(level, fmt, stream=stream)
        return stream

    yield configure
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


FORGED = "pod-1\n2026-11-22 23:00:00,000 INFO gpu_scheduling.webhook: admitted evil\r\x1b[2J\t\x00\u2028\x85 end\\n"


def test_escape():
    assert (
        logs.escape("a\nb\rc\td\\e\x1b\x00\x7f\u2028\u2029\x85")
        == "a\\nb\\rc\\td\\\\e\\x1b\\x00\\x7f\\u2028\\u2029\\x85"
    )
    assert logs.escape("plain text, ünïcode ok") == "plain text, ünïcode ok"


def test_text_keeps_a_record_on_one_line(capture):
    stream = capture("text")
    logging.getLogger("gpu_scheduling.webhook").info("denied %s: %s", FORGED, "bad map")
    out = stream.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")
    line = out[:-1]
    assert " INFO gpu_scheduling.webhook: denied pod-1\\n2026-11-22" in line
    assert "\\r\\x1b[2J\\t\\x00\\u2028\\x85 end\\\\n: bad map" in line
    assert "\x1b" not in line and "\r" not in line and "\u2028" not in line


def test_text_traceback_is_one_line(capture):
    stream = capture("text")
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("x").exception("failed for %s", "a\nb")
    out = stream.getvalue()
    assert out.count("\n") == 1
    assert "failed for a\\nb\\nTraceback (most recent call last):" in out and "ValueError: bad\\nvalue" in out


def test_json_one_object_per_line(capture):
    stream = capture("json")
    log = logging.getLogger("gpu_scheduling.scheduler")
    log.warning("pod %s: %d problems", FORGED, 3)
    try:
        {}["missing"]
    except KeyError:
        log.exception("boom")
    log.debug("quiet")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and all(line.isascii() for line in lines)
    first, second, third = (json.loads(line) for line in lines)
    assert first["msg"] == f"pod {FORGED}: 3 problems"
    assert first["level"] == "WARNING" and first["logger"] == "gpu_scheduling.scheduler"
    assert first["time"].endswith("Z") and "T" in first["time"] and "exc" not in first
    assert second["msg"] == "boom" and "KeyError: 'missing'" in second["exc"]
    assert third["level"] == "DEBUG"


def test_level_filters_and_reconfigure_does_not_duplicate(capture):
    capture("text", "WARNING")
    stream = capture("text", "WARNING")
    logging.getLogger("y").info("hidden")
    logging.getLogger("y").warning("shown")
    assert stream.getvalue().count("shown") == 1 and "hidden" not in stream.getvalue()


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError):
        logs.formatter("xml")


def test_flags_and_environment(monkeypatch):
    import argparse

    monkeypatch.setenv("LOG_FORMAT", "json")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    p = argparse.ArgumentParser()
    logs.add_arguments(p)
    args = p.parse_args([])
    assert (args.log_format, args.log_level) == ("json", "debug")
    assert p.parse_args(["--log-format", "text"]).log_format == "text"
    with pytest.raises(SystemExit):
        p.parse_args(["--log-format", "xml"])
