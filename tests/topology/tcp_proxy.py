"""A byte-for-byte TCP forwarder: the tests' stand-in for the TLS stream proxy of
deployments/storage/nginx-s3.conf (the one port of the object store published beyond loopback).

    python -m tests.topology.tcp_proxy LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main(listen_host: str, listen_port: int, host: str, port: int) -> None:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(host, port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))

    server = await asyncio.start_server(handle, listen_host, listen_port, reuse_address=True)
    print(f"forwarding {listen_host}:{listen_port} -> {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    lh, lp, th, tp = sys.argv[1:5]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(lh, int(lp), th, int(tp)))
