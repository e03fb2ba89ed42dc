"""A standby of a stream-stream join buffer restored from its input topic
(``changelog="input"``), promoted on the real broker: the buffer it brings is the one
processing built, so the payments that come after the failover find their orders.

Two workers of ``tests.joins.input_changelog_app`` with ``table_standby_replicas=1``: each
holds a standby of the other's buffers, whose changelogs are the ``orders`` and ``payments``
topics themselves (the standby applies each input record as processing puts it into the
buffer: ``TaskManager.source_filters``, the join's ``buffer_restore_filter``). The orders are
processed; one worker stops; the other takes its tasks over from its standby's stores (not
wiped, nothing left to read: the standby stood at the committed offset), and then every
payment is paired with its order, each pair once. A standby that stored the input records as
they came, or left them out, would pair none of the moved partitions' payments.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path

import pytest

from streams_app.readback import read_topics, wait_committed
from tests.joins import input_changelog_app
from tests.joins.data import Rec
from tests.joins.test_enrichment_standby import fail_over_to_standby
from tests.joins.test_input_changelog_kafka import rec, send_inputs
from tests.runtime.helpers import KafkaObserver, app_workers, wait_until
from tests.windows.data import BASE
from tests.windows.test_vs_kafka_streams import create_topics

pytestmark = pytest.mark.kafka

ORDERS = 40
T = BASE  # recent, as tests/windows/data.py says why
#: The orders side's buffer (the join is named ``paid``; its stores ``paid-left``/``-right``).
BUFFER = "paid-left"


async def test_a_promoted_standby_of_a_buffer_restored_from_its_input_pairs_every_payment(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app_id, prefix = f"ics-{unique}", f"icsb-{unique}-"
    orders, payments = prefix + "orders", prefix + "payments"
    await create_topics(bootstrap_servers, [orders, payments], 2)

    def send(records: list[Rec]) -> Awaitable[None]:
        return send_inputs(bootstrap_servers, prefix, records)

    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "STREAMS_APP_SESSION_TIMEOUT": "3",
        "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
        "STREAMS_APP_TABLE_STANDBY_REPLICAS": "1",
        "JOIN_TEST_APP": app_id,
        "JOIN_TEST_INPUTS": prefix,
    }
    leaving, staying = app_workers(
        "tests.joins.input_changelog_app", tmp_path, env, "leaving", "staying"
    )
    await send([rec("orders", n, f"o{n}", T + n * 1_000) for n in range(ORDERS)])
    async with KafkaObserver(bootstrap_servers) as observer:
        try:
            moved = await fail_over_to_standby(observer, leaving, staying, app_id, orders, BUFFER)
            assert all(end > 0 for end in moved.values()), moved

            # Every payment after the failover: the moved partitions' orders are only in the
            # promoted standby's buffer (nothing was read from the topic at the takeover).
            await send([rec("payments", n, f"p{n}", T + 100_000 + n) for n in range(ORDERS)])
            await wait_until(
                lambda: observer.committed_equals_end(app_id, payments), timeout=120, interval=0.2
            )
            assert staying.terminate() == 0, staying.tail()
        finally:
            for worker in (leaving, staying):
                if worker.running:
                    worker.kill()
    await wait_committed(bootstrap_servers, app_id, [orders, payments], outputs=[prefix + "paid"])
    out = (await read_topics(bootstrap_servers, [prefix + "paid"]))[prefix + "paid"]
    paid = input_changelog_app.paid
    got = sorted(
        (paid.key_codec.loads(r.key or b""), paid.value_codec.loads(r.value or b""), r.timestamp)
        for r in out
    )
    want = sorted((f"k{n}", f"o{n}+p{n}", T + 100_000 + n) for n in range(ORDERS))
    assert got == want, staying.tail()
