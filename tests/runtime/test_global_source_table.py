"""A GlobalTable built from a topic stores what processing would, on the real broker.

Its changelog is the source topic, written by producers outside the app: the restore at start
and the background reader both pass its records through the table's ``restore_filter``
(runtime/global_tables.py), so a key written with other JSON spacing is the row a lookup
finds and an undecodable value is skipped (logged, not dead-lettered), as restore, standbys and
processing of a partitioned table built from a topic do.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import streams_app
from streams_app.runtime.global_tables import GlobalTables
from streams_app.state import RocksDBStore
from streams_app.topology.contract import MISSING
from streams_app.transport.kafka import KafkaTransport
from tests.runtime.helpers import wait_until
from tests.runtime.test_standby_updater import SOURCE_RECORDS
from tests.state.test_restore import Changelog, create_topic

pytestmark = pytest.mark.kafka


def check(
    tables: GlobalTables, table: Any, part: Any, names: dict[int, str], *, missing: int
) -> None:
    """Each id's lookup gives its name, ``missing``'s finds nothing, and the store holds exactly
    those rows, key and value as the table's codecs write them (compact JSON)."""
    for id_, name in names.items():
        assert tables.lookup(table, {"id": id_}) == {"name": name}
    assert tables.lookup(table, {"id": missing}) is MISSING
    assert dict(part.items()) == {
        f'{{"id":{i}}}'.encode(): f'{{"name":"{n}"}}'.encode() for i, n in names.items()
    }


async def test_a_global_table_built_from_a_topic_skips_bad_records_and_normalises_keys(
    bootstrap_servers: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, both paths stored the topic's raw bytes: a key written with spaces was a row
    no lookup found (``{"id": 6}`` missing, ``{"id": 1}`` still ``bea`` after ``eve``), and
    the lookup of a key whose last value was undecodable raised (``{"id": 2}``, ``{"id": 4}``)
    instead of giving the valid value before it."""
    topic = f"global-source-{unique}"
    await create_topic(bootstrap_servers, topic)
    app = streams_app.App(f"global-source-{unique}", broker=f"kafka://{bootstrap_servers}")
    source = app.topic(topic, key_serializer="json", value_serializer="json")
    table = app.GlobalTable("customers", source=source)
    assert table.changelog_is_source and table.changelog_topic_name == topic
    writer = Changelog(bootstrap_servers, topic, f"global-source-{unique}")
    await writer.producer.start()
    transport = KafkaTransport(bootstrap_servers)
    admin = transport.admin()
    await admin.start()
    store = RocksDBStore("customers", tmp_path / "customers")
    part = store.partition(0)
    tables = GlobalTables(
        [table],
        {"customers": store},
        {"customers": topic},
        {"customers": 1},
        owned=lambda tp: False,  # a GlobalTable from a topic: no task ever owns its partitions
    )
    try:
        spaced = (b'{"id":  6}', b'{"name": "fay"}')  # only ever spelled with spaces
        await writer.transaction([*SOURCE_RECORDS, spaced], commit=True)  # 0-5, marker 6
        with caplog.at_level(logging.WARNING, logger="streams_app.runtime.global_tables"):
            await tables.start(transport, admin, app.conf.id, timeout=30)

        # After the restore at start.
        assert part.changelog_offset == 7
        check(tables, table, part, {6: "fay", 1: "bea", 2: "carl"}, missing=3)
        assert tables.rejected == 2
        warned = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert warned == [
            f"global table customers: skipped 2 record(s) of {topic}[0] at offsets 3-4 that "
            "cannot be decoded or have no valid timestamp (not dead-lettered: the global "
            "tables' reader is outside any transaction)"
        ]
        assert "not json" not in caplog.text  # where, never what

        # Live records, applied by the background reader.
        await writer.transaction(
            [
                (b'{ "id" : 4 }', b'{"name": "dan"}'),
                (b'{"id": 1}', b'{"name": "eve"}'),
                (b'{"id":4}', b"{not json"),  # skipped: dan stays
                (b'{"id": 5}', b"\xfe"),
            ],
            commit=True,
        )  # offsets 7-10, marker 11
        await wait_until(lambda: part.changelog_offset == 11, timeout=30)
        check(tables, table, part, {1: "eve", 4: "dan", 2: "carl", 6: "fay"}, missing=5)
        assert tables.rejected == 4
        assert tables.applied == 2
    finally:
        await tables.stop()
        await admin.close()
        await writer.producer.stop()
        store.close()
