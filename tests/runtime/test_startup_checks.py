"""A worker that cannot run correctly refuses to start, and says why and how to fix it."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_app import App, BrokerUnavailable, ConfigError, TopologyError
from streams_app.broker import free_port
from tests.runtime.helpers import running_worker
from tests.windows.test_vs_kafka_streams import create_topics


def simple_app(app_id: str, bootstrap: str, **settings: object) -> App:
    app = App(app_id, broker=bootstrap, **settings)
    source = app.topic(f"{app_id}-in", key_type=str, value_type=int)

    @app.agent(source)
    async def consume(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    return app


async def test_unreachable_broker_is_named_with_its_address(tmp_path: Path) -> None:
    port = free_port()
    app = simple_app("nobroker", f"kafka://127.0.0.1:{port}")
    with pytest.raises(BrokerUnavailable, match=f"127.0.0.1:{port}"):
        await app.worker(state_dir=tmp_path).run()


async def test_topic_that_cannot_be_created_stops_the_worker(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    # Three replicas on a one-broker cluster: the broker refuses to create the topic.
    app = simple_app(f"norepl-{unique}", bootstrap_servers, topic_replication_factor=3)
    with pytest.raises(TopologyError, match=f"norepl-{unique}-in"):
        await app.worker(state_dir=tmp_path).run()


async def test_tables_must_be_co_partitioned_with_their_topics(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = simple_app(f"copart-{unique}", bootstrap_servers, topic_partitions=4)
    app.Table("totals", default=int, partitions=5)
    with pytest.raises(TopologyError, match="co-partitioned"):
        await app.worker(state_dir=tmp_path).run()


async def test_existing_topic_with_other_partition_count_is_refused(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    first = simple_app(f"parts-{unique}", bootstrap_servers, topic_partitions=2)
    async with running_worker(first, tmp_path / "a"):
        pass
    second = App(f"parts2-{unique}", broker=bootstrap_servers)
    topic = second.topic(f"parts-{unique}-in", partitions=6)

    @second.agent(topic)
    async def consume(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    with pytest.raises(TopologyError, match="exists with 2 partitions"):
        await second.worker(state_dir=tmp_path / "b").run()


async def test_two_workers_cannot_share_a_state_directory(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = simple_app(f"lock-{unique}", bootstrap_servers)
    async with running_worker(app, tmp_path):
        with pytest.raises(ConfigError) as info:
            await app.worker(state_dir=tmp_path).run()
    assert info.value.setting == "state_dir"


def test_transaction_timeout_below_commit_interval_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        App("t", commit_interval=20, transaction_timeout=10)
    assert info.value.setting == "transaction_timeout"


@pytest.mark.parametrize(
    ("settings", "setting", "broker_value"),
    [
        # The embedded broker keeps Kafka's defaults for these three (test broker: the session
        # minimum is lowered to 1 s, see streams_app.broker.cluster.default_settings).
        (
            {"transaction_timeout": 1000, "restore_timeout": 2000},
            "transaction_timeout",
            "transaction.max.timeout.ms (900000 ms)",
        ),
        (
            {"session_timeout": 0.5, "heartbeat_interval": 0.1},
            "session_timeout",
            "1000 ms..1800000 ms",
        ),
        ({"session_timeout": 2000}, "session_timeout", "1000 ms..1800000 ms"),
        ({"max_request_size": 2_000_000}, "max_request_size", "message.max.bytes (1048588)"),
    ],
)
async def test_settings_beyond_the_brokers_limits_stop_the_worker_at_start(
    bootstrap_servers: str,
    unique: str,
    tmp_path: Path,
    settings: dict[str, object],
    setting: str,
    broker_value: str,
) -> None:
    app = simple_app(f"limits-{unique}", bootstrap_servers, **settings)
    with pytest.raises(ConfigError) as info:
        await app.worker(state_dir=tmp_path).run()
    assert info.value.setting == setting
    assert broker_value in str(info.value)
    assert f"the broker at {bootstrap_servers}" in str(info.value)


async def test_output_topic_with_a_smaller_message_limit_is_named(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = simple_app(f"topiclimit-{unique}", bootstrap_servers)
    app.topic(f"small-{unique}", config={"max.message.bytes": "100000"})
    with pytest.raises(ConfigError) as info:
        await app.worker(state_dir=tmp_path).run()
    assert info.value.setting == "max_request_size"
    assert f"small-{unique}" in str(info.value) and "100000" in str(info.value)


async def test_inputs_that_restore_a_store_are_checked_as_the_broker_has_them(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    # The app declares the customers topic compacted, so its table restores from it; the topic
    # exists already, made with the broker's default (delete): a restore would lose keys.
    customers_topic = f"cust-{unique}"
    await create_topics(bootstrap_servers, [customers_topic], 1)
    app = App(f"srcchk-{unique}", broker=bootstrap_servers, topic_partitions=1)
    customers = app.topic(
        customers_topic, key_type=str, value_type=dict, config={"cleanup.policy": "compact"}
    )
    orders = app.topic(f"ord-{unique}", key_type=str, value_type=dict)
    orders.join(app.Table("customers", source=customers)).to(app.topic(f"out-{unique}"))
    with pytest.raises(ConfigError, match=f"cleanup.policy of topic '{customers_topic}'"):
        await app.worker(state_dir=tmp_path).run()
