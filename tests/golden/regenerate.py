"""Rewrites the golden expositions from a fresh in-process scrape of the simulated node:
`.venv/bin/python -m tests.golden.regenerate` (what `make golden` runs). Review the diff: it is
what users' scrapes gain or lose."""

from __future__ import annotations

import logging

from tests.golden.node_scrape import REPO, write


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    for path in write():
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
