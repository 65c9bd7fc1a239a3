"""Log safety (anything that looks like a key is masked when contents are logged), and the JSON lines
handler: the lines it writes without a record are the formatter's, written in order by its own thread."""

from __future__ import annotations

import calendar
import io
import json
import logging
import threading
import time
from types import MappingProxyType

import pytest

from proxy.observe import logs
from proxy.observe.logs import JsonFormatter, JsonLines, configure_logging, log_event, redact
from tests.support.waiting import wait_for


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer sk-abcdefghijklmnop", "Authorization: Bearer [REDACTED]"),
        ("my key is sk-proj-abcdefghijkl1234", "my key is [REDACTED]"),
        ("use lw-acme-7f3a9c11 here", "use [REDACTED] here"),
        ('{"api_key": "abcdef123456"}', '{"api_key": "[REDACTED]"}'),
        ("x-loopwarden-key=lw-secret-value", "x-loopwarden-key=[REDACTED]"),
        ("nothing secret here, just skills and sky-high hopes", "nothing secret here, just skills and sky-high hopes"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected


# -- the JSON lines handler -----------------------------------------------------------------


class _Stream(io.StringIO):
    """A stderr that notes which threads wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[str] = set()

    def write(self, text: str) -> int:
        self.writers.add(threading.current_thread().name)
        return super().write(text)


@pytest.fixture
def stream(monkeypatch):
    """The proxy's logger configured onto a fresh stream, restored after the test."""
    written = _Stream()
    monkeypatch.setattr("sys.stderr", written)
    before = logs.logger.handlers[:], logs.logger.level, logs._sink
    configure_logging("info")
    yield written
    logs._sink.close()
    logs.logger.handlers[:], _, logs._sink = before
    logs.logger.setLevel(before[1])


def _lines(stream: _Stream) -> list[dict]:
    logs._sink.flush()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize(
    ("event", "fields", "level"),
    [
        ("request", {"route": "chat.completions", "status": 200, "duration_ms": 1.25}, logging.INFO),
        ("step", {"tools": ["a", "b"], "shadow": [], "nested": {"x": None}}, logging.INFO),
        ("session_index_error", {"tenant": "t", "error": "ResponseError"}, logging.WARNING),
        ("empty", {}, logging.ERROR),
        ("quoted \"event\"", {"text": "a \"quote\" and \u00e9"}, logging.INFO),
        ("overridden", {"event": "inner", "level": "custom", "n": 1}, logging.INFO),
        ("mapping", MappingProxyType({"n": 1}), logging.INFO),
        ("odd level", {"n": 1}, 25),
    ],
)
def test_a_line_written_without_a_record_is_the_line_the_formatter_writes_for_its_record(stream, event, fields, level):
    log_event(event, fields, level)
    written = _lines(stream)[0]

    record = logs.logger.makeRecord("loopwarden", level, __file__, 1, event, (), None, extra={"fields": fields})
    record.created = time_of(written["ts"])
    assert written == json.loads(JsonFormatter().format(record))


def time_of(stamp: str) -> float:
    """The epoch seconds a line's ``ts`` names (to the millisecond, plus half of one)."""
    whole, millis = stamp.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + (int(millis) + 0.5) / 1000


def test_a_line_goes_through_records_when_another_handler_listens(stream, log_records):
    log_event("request", {"status": 200})

    assert [(r.getMessage(), r.fields) for r in log_records] == [("request", {"status": 200})]
    assert [(line["event"], line["status"]) for line in _lines(stream)] == [("request", 200)]


def test_lines_are_written_in_order_by_the_writer_thread_not_the_caller(stream):
    for n in range(500):
        log_event("step", {"n": n})
    logs.logger.warning("plain record")

    lines = _lines(stream)
    assert [line.get("n") for line in lines] == [*range(500), None]
    assert lines[-1]["event"] == "plain record"


def test_the_writer_thread_writes_the_lines_not_the_caller(stream):
    log_event("request", {"status": 200})

    assert wait_for(lambda: stream.getvalue())
    assert stream.writers == {"loopwarden-log"}


def test_closing_writes_every_queued_line_and_stops_the_writer(stream):
    for n in range(100):
        log_event("step", {"n": n})
    writer = logs._sink._writer
    logs._sink.close()

    assert not writer.is_alive()
    assert [json.loads(line)["n"] for line in stream.getvalue().splitlines()] == list(range(100))


def test_a_line_after_closing_is_written_at_once(stream):
    logs._sink.close()
    log_event("late", {})

    assert json.loads(stream.getvalue())["event"] == "late"


def test_a_closed_stream_loses_the_lines_without_failing_the_caller():
    closed = io.StringIO()
    closed.close()
    handler = JsonLines(closed)
    handler.put("{}\n")
    handler.close()  # no exception: there is nobody left to tell


class _Stuck(io.StringIO):
    """A stderr whose reader went away: writes block until released."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    def write(self, text: str) -> int:
        self.released.wait(60)
        return super().write(text)


def test_lines_for_a_stderr_nobody_reads_are_bounded_and_the_drop_is_told(monkeypatch):
    monkeypatch.setattr(logs, "MAX_QUEUED_LINES", 10)
    stuck = _Stuck()
    handler = JsonLines(stuck)
    handler.put('{"n":0}\n')  # the writer takes it and blocks writing it
    assert wait_for(lambda: handler._lines.qsize() == 0)
    for n in range(1, 26):
        handler.put(f'{{"n":{n}}}\n')

    stuck.released.set()
    handler.close()

    lines = [json.loads(line) for line in stuck.getvalue().splitlines()]
    assert [line["n"] for line in lines if "n" in line] == list(range(11))
    assert [(line["event"], line["count"]) for line in lines if "event" in line] == [("log_lines_dropped", 15)]


def test_a_line_written_later_keeps_when_it_happened(log_records):
    from proxy.observe.logs import JsonFormatter, log_event

    log_event("step", {"session": "s1"}, at=1_800_000_000.25)

    line = JsonFormatter().format(log_records[-1])
    assert line.startswith('{"ts":"2027-01-15T08:00:00.250Z","level":"info","event":"step","session":"s1"')
