"""Bounded reads of small files under a proc root that may be hostile.

A proc root is a path the exporter is given, not the kernel's word: a FIFO in it would block
open() until something writes to it (freezing process accounting for good), and a character
device such as /dev/zero never ends. So a file is opened without blocking, must be a regular
file (procfs files are), and is read up to a byte cap."""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFile(OSError):
    """The path is something other than a regular file; the message names what it is."""

    def __init__(self, path: Path, mode: int) -> None:
        kind = next((name for test, name in _KINDS if test(mode)), f"file type {mode:o}")
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path = path


def read_head(path: Path, limit: int) -> str:
    """At most `limit` bytes of a regular file, decoded leniently (a process's cgroup path may
    hold any byte). Raises NotRegularFile at once for anything else, OSError as open() does."""
    # os.open and os.read skip the file object: this runs for every GPU process on every sweep.
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; a regular
    # file ignores it. O_NOCTTY: a terminal in the tree must not become our controlling one.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, mode)
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            chunks.append(chunk)
            # procfs answers a read with all it has up to the size asked, so a short read is
            # the end; stopping there saves the extra read that would return nothing.
            if len(chunk) < left:
                break
            left -= len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")
