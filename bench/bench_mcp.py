"""MCP: what the client's own event loop costs next to the SDK used directly.

Against the real ``mcp-server-time`` over stdio: the start of a session, one call (nbagent's
sync call, its async call from another loop, the SDK's ``Client.call_tool`` on its own loop),
20 calls at once, and closing. Prints figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from nbagent import BasicMCPClient, McpToolSpec

ARGS = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
N = 50


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median_of(fn: object, n: int = N) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_nbagent() -> None:
    client = BasicMCPClient(SERVER[0], SERVER[1:], timeout=30)
    t0 = time.perf_counter()
    tools = {t.name: t for t in McpToolSpec(client).to_tool_list()}
    print(f"session start + tool listing:          {ms(time.perf_counter() - t0)}")
    convert = tools["convert_time"]
    convert.call(**ARGS)  # warm: jsonschema's first import, the server's first call
    print(f"one call, sync (tool.call):            {ms(median_of(lambda: convert.call(**ARGS)))} (median of {N})")

    async def one() -> None:
        await convert.acall(**ARGS)

    loop = asyncio.new_event_loop()
    print(f"one call, awaited on another loop:     {ms(median_of(lambda: loop.run_until_complete(one())))}")

    async def many() -> None:
        await asyncio.gather(*(convert.acall(**ARGS) for _ in range(20)))

    t0 = time.perf_counter()
    loop.run_until_complete(many())
    print(f"20 calls at once on one session:       {ms(time.perf_counter() - t0)}")
    loop.close()
    t0 = time.perf_counter()
    client.close()
    print(f"close (the server process stops):      {ms(time.perf_counter() - t0)}")


def bench_sdk() -> None:
    from mcp import Client, StdioServerParameters

    async def main() -> None:
        params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
        async with Client(params) as client:
            await client.call_tool("convert_time", ARGS)
            times = []
            for _ in range(N):
                t0 = time.perf_counter()
                await client.call_tool("convert_time", ARGS)
                times.append(time.perf_counter() - t0)
            print(f"one call, the SDK on its own loop:     {ms(statistics.median(times))} (median of {N})")

    asyncio.run(main())


if __name__ == "__main__":
    bench_nbagent()
    bench_sdk()
