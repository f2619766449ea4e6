"""The floor for scrape latency: aiohttp (on the same event loop as the exporter) serving one
constant byte string. The exporter's figures are compared against it, so the table shows what our
code adds on top of the HTTP framework and this machine's noise."""

from __future__ import annotations

import argparse
import asyncio
import gzip
from pathlib import Path

from aiohttp import web

from exporter.app import _event_loop_runner


async def serve(port: int, body: bytes) -> None:
    packed = gzip.compress(body, 6)
    plain_headers = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    gzip_headers = {**plain_headers, "Content-Encoding": "gzip"}

    async def metrics(request: web.Request) -> web.Response:
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=packed, headers=gzip_headers)
        return web.Response(body=body, headers=plain_headers)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/readyz", lambda r: web.Response(text="ready\n"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", required=True)
    args = parser.parse_args()
    _event_loop_runner()(serve(args.port, Path(args.body).read_bytes()))


if __name__ == "__main__":
    main()
