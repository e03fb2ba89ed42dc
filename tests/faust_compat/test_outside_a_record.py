"""A table read outside of any record (a page, a timer, a task) against the real broker: a read
of the committed state of the worker's partitions, never an error, and never a write of the
transaction still open. Writes there are refused with a TopologyError."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streams_app import App
from streams_app.cli.main import main_for_app
from tests.runtime.helpers import running_worker, wait_until

pytestmark = pytest.mark.kafka


async def _get(url: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(url) as response,
    ):
        return response.status, json.loads(await response.text())


async def test_pages_timers_and_tasks_read_the_committed_table(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    # Commits only when the test asks for one (Worker.request_commit): between two, the
    # transaction is open with the table's writes pending in it.
    app = App(
        f"outside-{unique}",
        broker=bootstrap_servers,
        topic_partitions=2,
        commit_interval=60,
        transaction_timeout=120,
    )
    source = app.topic(f"outside-in-{unique}", key_type=str, value_type=int)
    counts = app.Table("counts", default=int)
    by_timer: list[int] = []
    by_task: list[int] = []

    @app.agent(source)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            counts[key] += value

    @app.page("/count/{key}")
    @app.table_route(table=counts, match_info="key")
    async def one(web, request, key):  # type: ignore[no-untyped-def]
        return web.json(
            {
                "value": counts[key],
                "in": key in counts,
                "get": counts.get(key),
                "keys": sorted(counts),
                "len": len(counts),
                "items": sorted(counts.items()),
            }
        )

    @app.page("/write/{key}")
    async def write(web, request, key):  # type: ignore[no-untyped-def]
        counts[key] = 100
        return web.json({"written": key})

    @app.timer(0.05)
    async def watch() -> None:
        by_timer.append(counts["a"])

    @app.task
    async def poll() -> None:
        while not app.should_stop:
            by_task.append(counts["a"])
            await asyncio.sleep(0.05)

    async with running_worker(app, tmp_path / "s") as worker, app.producer() as feeder:
        url = f"{worker.web_url}/count"

        async def page(key: str = "a") -> Any:
            status, body = await _get(f"{url}/{key}")
            assert status == 200, body
            return body

        async def reads_after(processed: int) -> tuple[list[int], list[int]]:
            """Once the worker processed ``processed`` records: a few reads by the timer and
            the task made after that, with the writes pending in the open transaction."""
            await wait_until(lambda: worker.records_processed == processed)
            timer_mark, task_mark = len(by_timer), len(by_task)
            await wait_until(
                lambda: len(by_timer) > timer_mark + 3 and len(by_task) > task_mark + 3
            )
            return by_timer[timer_mark:], by_task[task_mark:]

        # Nothing committed yet: the default, not an error.
        empty = {"value": 0, "in": False, "get": None, "keys": [], "len": 0, "items": []}
        assert await page() == empty
        for value in (1, 2):
            await feeder.send(source, key="a", value=value)
        await feeder.send(source, key="b", value=5)
        timer_reads, task_reads = await reads_after(3)
        # Processed, written, not committed: not seen.
        assert await page() == empty
        assert set(timer_reads) == {0} and set(task_reads) == {0}

        worker.request_commit()

        async def committed(expected: int) -> bool:
            return bool((await page())["value"] == expected)

        await wait_until(lambda: committed(3), timeout=30)
        assert await page() == {
            "value": 3,
            "in": True,
            "get": 3,
            "keys": ["a", "b"],
            "len": 2,
            "items": [["a", 3], ["b", 5]],
        }
        await feeder.send(source, key="a", value=10)
        timer_reads, task_reads = await reads_after(4)
        assert (await page())["value"] == 3
        assert set(timer_reads) == {3} and set(task_reads) == {3}

        worker.request_commit()
        await wait_until(lambda: committed(13), timeout=30)
        await wait_until(lambda: by_timer[-1] == 13 and by_task[-1] == 13)
        # A write outside of any record has no transaction to join: refused, nothing changed.
        assert await _get(f"{worker.web_url}/write/a") == (500, {"error": "TopologyError"})
        assert (await page())["value"] == 13
        assert worker.records_processed == 4


async def test_a_command_reads_the_default(
    bootstrap_servers: str, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python app.py <command>``: a client, not a worker. It holds no table partition, so a
    read finds nothing, as in a Faust command (which starts no worker): the default."""
    app = App(f"outside-cmd-{unique}", broker=bootstrap_servers)
    counts = app.Table("counts", default=int)

    @app.command()
    async def show() -> None:
        print(f"COUNT {counts['a']} {'a' in counts} {counts.get('a')} {len(counts)}")

    # The command line runs its own event loop (asyncio.run), as `python app.py show` does.
    assert await asyncio.to_thread(main_for_app, app, ["show"]) == 0
    assert capsys.readouterr().out.splitlines() == ["COUNT 0 False None 0"]
