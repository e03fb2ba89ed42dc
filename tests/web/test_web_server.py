"""The worker's web server against the real broker, read with a real HTTP client.

- ``/ready`` is 503 while a task restores (held deterministically by an open transaction on
  the changelog, which a read_committed restore cannot pass) and flips to 200 once it commits;
  ``/metrics``, parsed with prometheus_client's own parser, counts exactly the records the test
  sent, dead-lettered, restored and committed;
- ``/tables`` answers for keys owned by each of two workers (the other worker's keys through a
  307 to its address, learnt from the group's assignment), a windowed table with the key's
  windows;
- no endpoint of a worker whose settings carry secrets (SASL password, postgres_dsn) shows them.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import murmur2
from prometheus_client.parser import text_string_to_metric_families

from streams_app import App
from streams_app.runtime.worker import Worker
from streams_app.testing.secure import SecureKafka
from tests.runtime.helpers import running_worker, wait_until

pytestmark = pytest.mark.kafka


def table_app(unique: str, bootstrap: str, partitions: int = 2, **settings: Any) -> App:
    app = App(f"web-{unique}", broker=bootstrap, topic_partitions=partitions, **settings)
    source = app.topic(f"web-in-{unique}", key_type=str, value_type=int)
    out = app.topic(f"web-out-{unique}", key_type=str, value_type=int)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    hourly = app.Table("hourly", default=int, key_type=str, value_type=int).tumbling(3600)

    @app.agent(source)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            counts[key] += value
            hourly[key] += value
            await out.send(key=key, value=counts[key])

    @app.page("/count/{key}")
    async def one_count(web, request, key):  # type: ignore[no-untyped-def]
        found = dict(counts.local_items())
        return web.json({"key": key, "local": found.get(key)})

    @app.page("/owned/{key}")
    async def owned_count(web, request, key):  # type: ignore[no-untyped-def]
        return web.json({"key": key, "local": dict(counts.local_items()).get(key)})

    # Faust's @app.table_route(counts, match_info="key") (the Faust-compatibility work, issue
    # 11, adds the decorator): the tag it puts on the view, set by hand, which the server reads.
    owned_count.__streams_app_route__ = SimpleNamespace(  # type: ignore[attr-defined]
        kind="table", target=counts, match_info="key", query_param=None
    )

    return app


async def create_topics(bootstrap: str, specs: list[tuple[str, int, dict[str, str]]]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, n, 1, topic_configs=configs) for name, n, configs in specs]
        )
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, parsed by prometheus_client's parser."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "app"))
            samples[(sample.name, labels)] = sample.value
    return samples


@asynccontextmanager
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


async def test_ready_flips_after_restore_and_metrics_count_the_records(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = table_app(unique, bootstrap_servers)
    source, output = f"web-in-{unique}", f"web-out-{unique}"
    counts = app.tables["counts"]
    changelog = counts.changelog_topic_name
    await create_topics(
        bootstrap_servers,
        [(source, 2, {}), (output, 2, {}), (changelog, 2, {"cleanup.policy": "compact"})],
    )
    # The table as a previous worker left it: 1,000 committed values, then a transaction left
    # open on partition 1 (its owner is "still alive"): restore cannot get past it.
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, transactional_id=f"web-writer-{unique}"
    )
    poison = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await producer.start()
    await poison.start()
    try:
        async with producer.transaction():
            for i in range(1000):  # in the partition of records keyed so, as the table's are
                key = f"old{i}"
                await producer.send(
                    changelog,
                    key=counts.key_codec.dumps(key),
                    value=b"%d" % i,
                    partition=(murmur2(key.encode()) & 0x7FFFFFFF) % 2,
                )
        await producer.begin_transaction()
        held_partition = (murmur2(b"late") & 0x7FFFFFFF) % 2  # where a record keyed late goes
        await producer.send_and_wait(
            changelog, key=counts.key_codec.dumps("late"), value=b"7", partition=held_partition
        )

        async with running_worker(app, tmp_path / "s") as worker, http() as session:
            url = worker.web_url
            assert url is not None and url.startswith("http://127.0.0.1:")
            status, body = await get(session, f"{url}/health")
            assert (status, body["status"]) == (200, "ok")

            async def restoring() -> bool:
                status, body = await get(session, f"{url}/ready")
                assert status == 503, body  # never ready while the changelog is held
                return body["reason"] == "restoring"

            await wait_until(restoring, timeout=60)
            held_key = (
                "streams_app_restore_remaining_records",
                (("partition", str(held_partition)), ("topic", changelog)),
            )

            async def held_by_the_transaction() -> bool:
                held = metric_samples((await get(session, f"{url}/metrics"))[1])
                assert held[("streams_app_ready", ())] == 0
                # The open transaction's record: read_committed restore cannot get past it.
                return held.get(held_key, 0) >= 1

            await wait_until(held_by_the_transaction, timeout=60)
            status, body = await get(session, f"{url}/tables/counts/old3")
            assert status == 503 and "restoring" in body["error"]

            await producer.commit_transaction()

            async def ready() -> bool:
                return (await get(session, f"{url}/ready"))[0] == 200

            await wait_until(ready, timeout=60)
            restored_ends = await end_offsets(bootstrap_servers, changelog, 2)
            status, body = await get(session, f"{url}/tables/counts/late")
            assert (status, body["value"], body["partition"]) == (200, 7, held_partition)
            assert (await get(session, f"{url}/tables/counts/old998"))[1]["value"] == 998
            assert (await get(session, f"{url}/tables/counts/nothing"))[0] == 404
            assert (await get(session, f"{url}/tables/nope/x"))[0] == 404
            status, body = await get(session, f"{url}/tables/counts/a%2Fb")  # a key with a '/'
            assert (status, body["key"], body["error"]) == (404, "a/b", "no committed value")

            # Process: 300 records and one that does not decode (dead-lettered).
            keys = [f"k{i % 17}" for i in range(300)]
            async with app.producer() as feeder:
                for key in keys:
                    await feeder.send(source, key=key, value=1)
            await poison.send_and_wait(source, key=b"bad", value=b"{not json", partition=0)
            # And one three hours old: late for the windowed table (dropped, counted).
            three_hours_ago = int(time.time() * 1000) - 3 * 3_600_000
            await poison.send_and_wait(
                source, key=b"lateone", value=b"1", timestamp_ms=three_hours_ago
            )

            async def all_processed() -> bool:
                return worker.records_processed == len(keys) + 1 and worker.dead_lettered == 1

            await wait_until(all_processed, timeout=60)

            ends = await end_offsets(bootstrap_servers, source, 2)

            async def all_committed() -> bool:
                _, body = await get(session, f"{url}/assignment")
                positions = {
                    (p["topic"], p["partition"]): (p["position"], p["committed"], p["lag"])
                    for task in body["tasks"]
                    for p in task["partitions"]
                }
                return positions == {(source, p): (ends[p], ends[p], 0) for p in range(2)}

            await wait_until(all_committed, timeout=30)
            status, body = await get(session, f"{url}/assignment")
            assert status == 200 and body["url"] == url and body["standbys"] == []
            assert body["hosts"] == {url: {source: [0, 1]}}
            assert {t["id"]: t["tables"][0]["table"] for t in body["tasks"]} == {
                "0_0": "counts",
                "0_1": "counts",
            }
            # How each table partition came up here: an empty store restored from offset 0
            # to the end of its changelog (records and markers) as it stood.
            for task in body["tasks"]:
                (table,) = [t for t in task["tables"] if t["table"] == "counts"]
                restored = table["restored"]
                assert restored["records"] > 0, restored
                assert {**restored, "records": 1} == {
                    "stored_offset": None,
                    "from_offset": 0,
                    "to_offset": restored_ends[table["partition"]],
                    "records": 1,
                    "wiped": False,
                }

            status, text = await get(session, f"{url}/metrics")
            assert status == 200
            samples = metric_samples(text)
            committed = worker.producer.transactions_committed
            for p in range(2):
                labels = (("partition", str(p)), ("topic", source))
                assert samples[("streams_app_consumer_lag", labels)] == 0
                assert samples[("streams_app_committed_offset", labels)] == ends[p]
                assert samples[("streams_app_end_offset", labels)] == ends[p]
                assert samples[("streams_app_last_stable_offset", labels)] == ends[p]
            assert samples[("streams_app_records_in_total", (("topic", source),))] == len(keys) + 1
            assert samples[("streams_app_records_processed_total", ())] == len(keys) + 1
            assert samples[("streams_app_dead_letters_total", (("topic", source),))] == 1
            assert samples[("streams_app_records_out_total", (("topic", output),))] == len(keys) + 1
            assert samples[("streams_app_late_records_total", (("table", "hourly"),))] == 1
            assert samples[("streams_app_windows_emitted_total", ())] == 0
            assert samples[("streams_app_records_out_total", (("topic", f"{source}.dlq"),))] == 1
            assert samples[("streams_app_transactions_committed_total", ())] == committed >= 1
            assert samples[("streams_app_transactions_aborted_total", ())] == 0
            assert samples[("streams_app_commit_seconds_count", ())] == worker.committer.commits
            assert samples[("streams_app_batch_seconds_count", ())] >= 1
            assert samples[("streams_app_producer_batch_records_count", ())] >= 1
            assert samples[("streams_app_rebalances_total", ())] == 1
            assert samples[("streams_app_ready", ())] == 1
            assert samples[("streams_app_tasks", (("state", "running"),))] == 2
            # Restore read every offset of the changelog as it stood (records and markers).
            restored = samples[("streams_app_restored_records_total", (("topic", changelog),))]
            read = sum(r.to_offset - r.from_offset for r in worker.tasks.restores.values())
            assert restored == read and 1002 <= read <= sum(restored_ends.values())
            assert ("streams_app_restore_remaining_records", ()) not in samples
            assert samples[("process_resident_memory_bytes", ())] > 0
            # The state budgets (docs/memory.md): the worker's own counters, as they stand.
            memory = worker.memory.cache
            assert samples[("streams_app_state_cache_hits_total", ())] == memory.hits
            assert samples[("streams_app_state_cache_misses_total", ())] == memory.misses >= 1
            assert samples[("streams_app_state_cache_max_bytes", ())] == 64 * 1024 * 1024
            assert 0 < samples[("streams_app_state_cache_bytes", ())] <= 64 * 1024 * 1024
            assert samples[("streams_app_state_cache_evictions_total", ())] == 0
            assert samples[("streams_app_early_commits_total", ())] == 0

            status, body = await get(session, f"{url}/count/k3")
            assert (status, body) == (200, {"key": "k3", "local": Counter(keys)["k3"]})
    finally:
        await producer.stop()
        await poison.stop()


async def test_tables_answer_for_keys_owned_by_each_of_two_workers(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = table_app(unique, bootstrap_servers)
    source = f"web-in-{unique}"
    await create_topics(bootstrap_servers, [(source, 2, {})])
    keys = [f"user{i}" for i in range(12)]
    sent = Counter(keys * 3)
    async with (
        running_worker(app, tmp_path / "a") as first,
        running_worker(app, tmp_path / "b") as second,
        http() as session,
    ):
        workers: list[Worker] = [first, second]
        urls = [w.web_url for w in workers]
        assert None not in urls and urls[0] != urls[1]

        async def both_hold_one_partition() -> bool:
            for w in workers:
                status, body = await get(session, f"{w.web_url}/ready")
                if status != 200 or body["tasks"] != 1:
                    return False
            return all(len(w.consumer.partition_hosts()) == 2 for w in workers)

        await wait_until(both_hold_one_partition, timeout=90)
        owner_of = {
            key: urls[0]
            if (
                first.tasks.by_tp.get(
                    _tp(source, first.transport.partition_for_key(key.encode(), 2))
                )
            )
            else urls[1]
            for key in keys
        }
        assert set(owner_of.values()) == set(urls)  # each worker owns some of the keys

        async with app.producer() as feeder:
            for key in keys * 3:
                await feeder.send(source, key=key, value=1)

        async def counted() -> bool:
            return sum(w.records_processed for w in workers) == len(keys) * 3

        await wait_until(counted, timeout=60)
        for url in urls:
            for key in keys:

                async def committed(url: str = str(url), key: str = key) -> bool:
                    status, body = await get(session, f"{url}/tables/counts/{key}")
                    return status == 200 and body["value"] == sent[key]

                await wait_until(committed, timeout=30)
                async with session.get(f"{url}/tables/counts/{key}") as response:
                    body = await response.json()
                    redirected = [r.status for r in response.history]
                assert body["owner"] == owner_of[key]
                assert str(response.url).startswith(owner_of[key])
                # Asked the owner: answered at once; asked the other: one redirect to the owner.
                assert redirected == ([] if url == owner_of[key] else [307])
                # A table_route page: run by the key's owner, wherever it was asked.
                async with session.get(f"{url}/owned/{key}") as response:
                    body = await response.json()
                    redirected = [r.status for r in response.history]
                assert body == {"key": key, "local": sent[key]}
                assert str(response.url).startswith(owner_of[key])
                assert redirected == ([] if url == owner_of[key] else [307])
            # A missing key: answered by its owner, after at most one redirect.
            assert (await get(session, f"{url}/tables/counts/nobody"))[0] == 404
            # A windowed table: every committed window of the key, from its owner.
            for key in keys:
                status, body = await get(session, f"{url}/tables/hourly/{key}")
                assert status == 200 and body["owner"] == owner_of[key]
                windows = body["windows"]
                assert all(w["end"] - w["start"] == 3_600_000 for w in windows)
                assert [w["start"] for w in windows] == sorted(w["start"] for w in windows)
                assert sum(w["value"] for w in windows) == sent[key]  # one window per record
            assert (await get(session, f"{url}/tables/hourly/nobody"))[0] == 404


def _tp(topic: str, partition: int) -> Any:
    from streams_app.transport.base import TopicPartition

    return TopicPartition(topic, partition)


async def test_no_secret_in_any_endpoint_or_log_line(
    secure_kafka: SecureKafka, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = secure_kafka.sasl_settings("alice", "SCRAM-SHA-512")
    password = settings["sasl_password"]
    dsn_password = f"pg-{unique}-hunter2"
    dsn = f"postgresql://shop:{dsn_password}@127.0.0.1:5432/shop"
    app = table_app(unique, settings.pop("broker"), postgres_dsn=dsn, **settings)
    source = f"web-in-{unique}"
    caplog.set_level(logging.DEBUG)
    async with running_worker(app, tmp_path / "s") as worker, http() as session:
        url = worker.web_url
        async with app.producer() as feeder:
            for i in range(20):
                await feeder.send(source, key=f"k{i}", value=1)

        async def ready_and_committed() -> bool:
            status, _ = await get(session, f"{url}/ready")
            committed, _ = await get(session, f"{url}/tables/counts/k1")
            return status == committed == 200 and worker.records_processed == 20

        await wait_until(ready_and_committed, timeout=90)
        paths = [
            "/health",
            "/ready",
            "/metrics",
            "/assignment",
            "/tables/counts/k1",
            "/tables/counts/missing",
            "/tables/counts/k1?forwarded=1",
            "/tables/none/k1",
            "/count/k1",
            "/nothing-here",
        ]
        answers = []
        for path in paths:
            async with session.get(f"{url}{path}") as response:
                answers.append(
                    (path, response.status, dict(response.headers), await response.text())
                )
        assert [status for _, status, _, _ in answers] == [
            200,
            200,
            200,
            200,
            200,
            404,
            200,
            404,
            200,
            404,
        ]
    for secret in (password, dsn_password, dsn):
        for path, _, headers, text in answers:
            assert secret not in text and secret not in json.dumps(headers), path
        assert not [r for r in caplog.records if secret in r.getMessage()]
    assert "streams_app_records_in_total" in answers[2][3]  # the scan read real answers
