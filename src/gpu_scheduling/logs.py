"""Logging set-up shared by every program: `configure(level, fmt)` with `fmt` "text" (one escaped line per record)
or "json" (one JSON object per line). Both forms keep one record on one line whatever the data in it: a pod name,
a uid or an annotation that carries a newline or an escape sequence can never forge a log line or drive a terminal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, TextIO

from gpu_scheduling import constants

if TYPE_CHECKING:
    from types import TracebackType

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Every C0 control character, DEL and the C1 controls, and the Unicode line and paragraph separators, which some
# readers treat as line breaks. Backslash is escaped too, so that an escaped sequence cannot be forged either.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update(
    {
        ord("\\"): "\\\\",
        ord("\n"): "\\n",
        ord("\r"): "\\r",
        ord("\t"): "\\t",
        0x2028: "\\u2028",
        0x2029: "\\u2029",
        0x85: "\\x85",
    }
)


def escape(text: str) -> str:
    """`text` on one line: control characters written as backslash escapes (`\\n`, `\\r`, `\\t`, `\\x1b`...)."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """The usual `time LEVEL logger: message` line, with the message and the traceback escaped: a record is one
    line (a traceback's lines are joined with a visible `\\n`)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(
        self, ei: tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
    ) -> str:
        return escape(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return escape(super().formatStack(stack_info))

    def format(self, record: logging.LogRecord) -> str:
        # logging.Formatter joins message and traceback with a newline; keep the record on one line.
        return super().format(record).replace("\n", "\\n")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, msg, and exc when an exception is logged."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # ensure_ascii: every control and non-ASCII character is a \u escape, so the line is plain ASCII.
        return json.dumps(out, ensure_ascii=True, default=str)


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "text":
        return TextFormatter()
    if fmt == "json":
        return JSONFormatter()
    raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def configure(level: str | int, fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send every logger's records at `level` and above to `stream` (default stderr) in format `fmt`; replaces
    the handlers the root logger had, so that calling it again (tests) does not duplicate lines."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--log-level` (default $LOG_LEVEL or INFO) and `--log-format` (default $LOG_FORMAT or text)."""
    p.add_argument(
        "--log-level",
        default=os.environ.get(constants.LOG_LEVEL_ENV, "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (default: $LOG_LEVEL or INFO)",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default=_env_format(),
        help="text: one escaped line per record; json: one JSON object per line (default: $LOG_FORMAT or text)",
    )


def _env_format() -> str:
    value = os.environ.get(constants.LOG_FORMAT_ENV, "text").strip().lower()
    return value if value in FORMATS else "text"
