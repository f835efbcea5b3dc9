#!/usr/bin/env python3
"""A TCP forwarder that holds every chunk from the client for a fixed delay before passing it on: a
stand-in for a slow storage server in scripts/bench-step.sh. Usage: delay_proxy.py LISTEN_PORT TARGET_HOST:PORT
DELAY_MS. It prints nothing and runs until killed."""
import asyncio
import sys


async def pipe(reader, writer, delay):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    port, target, delay_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    host, tport = target.rsplit(":", 1)

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection(host, int(tport))
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter, delay_ms / 1000.0), pipe(sreader, cwriter, 0))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
