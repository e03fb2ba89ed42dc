"""What a conformance driver works with: the running app, the broker, and clean-up after it.

Faust's examples hard-code their topic names and app ids, so the faust-streaming run and the
streams_app run of an example use the same topics on the same broker, one after the other.
:func:`isolated` deletes every topic a run created (the group's offsets on them go with them),
so each run starts from nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import ReadRecord, read_topics
from tests.faust_conformance.runner import STREAMS_APP, AppProcess, wait_for


class Context:
    def __init__(
        self,
        system: str,
        source: Path,
        workdir: Path,
        bootstrap: str,
        *,
        module_style: bool = False,
        extra_files: Iterable[Path] = (),
    ) -> None:
        self.system = system
        self.bootstrap = bootstrap
        self.app = AppProcess(
            system,
            source,
            workdir,
            bootstrap,
            module_style=module_style,
            extra_files=list(extra_files),
        )

    # -- the app ------------------------------------------------------------------------------

    def start(self) -> None:
        self.app.start()

    def stop(self, *, kill_faust: bool = False) -> None:
        """SIGTERM. streams_app must stop cleanly (exit 0); faust-streaming is given 30 s, or
        with ``kill_faust`` (for a driver whose observation is made) SIGKILLed at once: its
        worker of examples/advanced/rpc.py ignores SIGTERM, waiting forever to acknowledge RPC
        replies, and would take the whole 30 s."""
        if self.system == STREAMS_APP:
            code = self.app.stop()
            assert code == 0, f"streams_app exited with {code} on SIGTERM:\n{self.app.tail()}"
        elif kill_faust:
            self.app.kill()
        else:
            self.app.stop(timeout=30)

    def printed(self, prefix: str = "") -> list[str]:
        return [line for line in self.app.printed() if line.startswith(prefix)]

    def logged(self, text: str) -> bool:
        return text in self.app.output()

    def command(self, *args: str, timeout: float = 120.0) -> str:
        done = self.app.run_command(*args, timeout=timeout)
        assert done.returncode == 0, (
            f"{self.system}: command {args} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout

    async def command_printing(self, *args: str, text: str, timeout: float = 120.0) -> str:
        """Run an app command until it prints ``text`` (faust-streaming's ``x100`` command of
        examples/advanced/rpc.py prints its answer and then never exits: its client waits for
        the reply message to be acknowledged). Returns what it printed."""
        out_path = self.app.workdir / f"command-{args[0]}.out"
        with open(out_path, "wb") as out:
            process = subprocess.Popen(
                self.app._argv(*args),
                stdout=out,
                stderr=subprocess.DEVNULL,
                env=self.app.env,
                cwd=self.app.workdir,
            )
        try:
            deadline = time.monotonic() + timeout
            while text not in out_path.read_text(errors="replace"):
                if process.poll() is not None and text not in out_path.read_text():
                    raise AssertionError(
                        f"{self.system}: command {args} exited {process.returncode} without "
                        f"printing {text!r}: {out_path.read_text()[-2000:]}"
                    )
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.system}: command {args} printed no {text!r}")
                await asyncio.sleep(0.1)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
        return out_path.read_text(errors="replace")

    async def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 120.0) -> None:
        await wait_for(predicate, timeout, what, self.app)

    # -- the app's web server -----------------------------------------------------------------

    async def page(self, path: str) -> tuple[int, Any]:
        """GET one of the app's pages from the worker's own web server: (status, the body as
        JSON, or as text when it is not JSON). Redirects (``table_route``) are followed."""
        assert self.app.web_port is not None, "the worker was not started"
        url = f"http://127.0.0.1:{self.app.web_port}{path}"
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.get(url) as response,
        ):
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text

    async def serving(self, path: str = "/") -> bool:
        """The web server answers (any status): the worker got that far."""
        try:
            await self.page(path)
        except (aiohttp.ClientError, OSError):
            return False
        return True

    # -- the broker ---------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        records: Iterable[
            tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, int]
        ],
    ) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all"
        )
        await producer.start()
        try:
            futures = []
            for record in records:
                key, value, *partition = record
                futures.append(
                    await producer.send(
                        topic, key=key, value=value, partition=partition[0] if partition else None
                    )
                )
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    async def read(self, topic: str) -> list[ReadRecord]:
        return (await read_topics(self.bootstrap, [topic]))[topic]

    async def table(self, changelog: str) -> dict[tuple[int, Any], Any]:
        """A changelog's last value per (partition, key), keys and values JSON-decoded."""
        state: dict[tuple[int, Any], Any] = {}
        for record in await self.read(changelog):
            key = _json_or_bytes(record.key)
            if record.value is None:
                state.pop((record.partition, key), None)
            else:
                state[(record.partition, key)] = _json_or_bytes(record.value)
        return state

    async def committed_all(self, group: str, topics: Iterable[str]) -> bool:
        """The group committed every record of ``topics`` (committed offset == end offset)."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            names = list(topics)
            described = await admin.describe_topics(names)
            tps = [
                TopicPartition(t["topic"], p["partition"])
                for t in described
                if not t.get("error_code")
                for p in t["partitions"]
            ]
            if not tps:
                return False
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        except KafkaError:
            return False  # e.g. the group coordinator is not there yet
        finally:
            await admin.close()
        ends = await _end_offsets(self.bootstrap, tps)
        offsets = {tp: c.offset for tp, c in committed.items() if c.offset >= 0}
        self.lagging = {
            tp: (offsets.get(tp), end) for tp, end in ends.items() if offsets.get(tp, 0) < end
        }
        return not self.lagging


async def _end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


def _json_or_bytes(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


async def create_topics(bootstrap: str, topics: dict[str, int], *, compact: bool = False) -> None:
    if not topics:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    configs = {"cleanup.policy": "compact"} if compact else {}
    try:
        existing = set(await admin.list_topics())
        new = [
            NewTopic(n, p, 1, topic_configs=configs) for n, p in topics.items() if n not in existing
        ]
        if new:
            await admin.create_topics(new)
    finally:
        await admin.close()


async def _delete_group(
    admin: AIOKafkaAdminClient, bootstrap: str, group: str, timeout: float = 90.0
) -> None:
    """DeleteGroups, retried until the group is empty. The run's workers are gone by now, but
    a killed one stays a member until its session times out: its membership is ended at once
    by a LeaveGroup on its behalf."""
    from aiokafka.protocol.admin import DeleteGroupsRequest

    deadline = time.monotonic() + timeout
    while True:
        try:
            node = await admin.find_coordinator(group)
            response = await admin._send_request(DeleteGroupsRequest([group]), node)
            codes = [code for _, code in response.results]
            if NON_EMPTY_GROUP in codes:
                await _remove_members(admin, bootstrap, group, node)
        except KafkaError:
            codes = [-1]
        if all(code in (0, 69) for code in codes):  # deleted, or no such group
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"consumer group {group!r} could not be deleted: {codes}")
        await asyncio.sleep(1.0)


NON_EMPTY_GROUP = 68


async def _remove_members(
    admin: AIOKafkaAdminClient, bootstrap: str, group: str, node: int
) -> None:
    from aiokafka.protocol.group import LeaveGroupRequest

    async with OpsAdmin(bootstrap) as ops:
        members = (await ops.describe_group(group)).members
    for member in members:
        await admin._send_request(LeaveGroupRequest(group, member.member_id), node)


@contextlib.asynccontextmanager
async def isolated(bootstrap: str) -> AsyncIterator[None]:
    """Delete every topic and consumer group created inside the block (and wait until the
    topics are gone): the next run starts from nothing, committed offsets included."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        before = set(await admin.list_topics())
        groups_before = {g[0] for g in await admin.list_consumer_groups()}
        yield
    finally:
        for group in sorted({g[0] for g in await admin.list_consumer_groups()} - groups_before):
            await _delete_group(admin, bootstrap, group)
        created: list[str] = []
        for _ in range(3):
            after = set(await admin.list_topics())
            created = sorted(t for t in after - before if not t.startswith("__"))
            if not created:
                break
            with contextlib.suppress(Exception):
                await admin.delete_topics(created)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                left = set(await admin.list_topics()) & set(created)
                if not left:
                    break
                await asyncio.sleep(0.2)
        await admin.close()


FLOAT = re.compile(r"\d+\.\d+(e-?\d+)?")


def shape(text: str) -> str:
    """``text`` with every float replaced by ``<float>`` (random values differ between runs)."""
    return FLOAT.sub("<float>", text)
