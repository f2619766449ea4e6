"""Log output as logfmt or JSON lines, one event per line, for node-level log collectors."""

from __future__ import annotations

import json
import logging
import sys
import time

from kube_gpu_exporter.exporter.errors import escaped

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        f".{int(record.msecs):03d}Z"
    )


def _logfmt_value(value: str) -> str:
    # Logfmt readers end a record at \r as well as \n, and a terminal runs escape sequences: every
    # character that is not printable is escaped, not only the newline.
    if value and value.isprintable() and not any(c in value for c in ' ="\\'):
        return value
    return f'"{escaped(value)}"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        fields = {
            "ts": _timestamp(record),
            "level": record.levelname.lower().replace("warning", "warn"),
            "logger": record.name,
            "msg": message,
        }
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": _timestamp(record),
            "level": record.levelname.lower().replace("warning", "warn"),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    # aiohttp logs every request at INFO; an exporter scraped every 15 s does not need that.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The kubernetes client's urllib3 logs each of its own retries of a refused connection, three
    # lines per watch per try; the watcher logs the failure itself, once, on one line.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
