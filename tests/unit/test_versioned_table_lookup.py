"""``streams-app tables`` on a versioned table, broker-free: its changelog partition decoded
into a key's versions (composite ``(key, valid_from)`` keys, the stream time entry, a version
replaced at the same time, a tombstone version, an expired version's changelog tombstone), and
what the command prints from that or from a worker's ``/tables`` answer.

The real-broker case is tests/ops/test_tables_command.py; tests/joins/test_stream_table_driver.py
checks the changelog's answer against the owner's ``/tables`` on the worker's own store.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import streams_app
from streams_app import readback
from streams_app.app.table import Table
from streams_app.ops import app_report, table_lookup
from streams_app.readback import KeyRead, ReadRecord
from streams_app.state import versioned
from streams_app.state.composite import STREAM_TIME, StreamTime
from streams_app.state.versioned import VersionedRecord
from tests.ops.support import run_cli

# Modules, not names, are imported: on the code before versioned tables were read (which
# lacks the new functions) each test fails on its own.

CHANGELOG = "vt-prices-changelog"


def versioned_app() -> tuple[streams_app.App, Table]:
    app = streams_app.App("vt", broker="kafka://127.0.0.1:1")
    source = app.topic("prices", key_type=str, value_type=int)
    app.Table("plain", key_type=str, value_type=int)
    return app, app.Table("prices", source=source, versioned=60)


def changelog(table: Table, writes: list[tuple[Any, Any]]) -> list[ReadRecord]:
    """Changelog records of one partition: ``(store key, value)``, ``DELETED`` for a null record
    (a version deleted from the store: expired)."""
    return [
        ReadRecord(
            CHANGELOG,
            1,
            offset,
            0,
            table.key_codec.dumps(entry),
            None if value is DELETED else table.value_codec.dumps(value),
            (),
        )
        for offset, (entry, value) in enumerate(writes)
    ]


DELETED: Any = object()

# One partition's changelog, in the order a worker writes it.
WRITES = [
    (("apple", 1_000), 9),
    (("apple", 1_000), 10),  # a version at a time that has one replaces it
    (("fig", 0), 1),
    (STREAM_TIME, StreamTime(1_000)),
    (("pear", 1_500), 5),
    (("apple", 5_000), 12),
    (("apple", 3_000), 11),  # out of order, within the history
    (("pear", 2_500), None),  # a tombstone version: pear has no value from 2 500 on
    (("fig", 2_000), 2),
    (STREAM_TIME, StreamTime(70_000)),
    (("fig", 70_000), 3),
    (("fig", 0), DELETED),  # expired: past the horizon, deleted from the store
]


def test_versions_group_by_key_oldest_first_without_the_stream_time_entry() -> None:
    versions = versioned.key_versions(
        [
            (("a", 5), "five"),
            (STREAM_TIME, StreamTime(9)),
            (("b", 2), None),
            (("a", 1), "one"),
            (("b", 1), "bee"),
        ]
    )
    assert versions == {
        "a": [VersionedRecord("one", 1, 5), VersionedRecord("five", 5, None)],
        "b": [VersionedRecord("bee", 1, 2), VersionedRecord(None, 2, None)],
    }
    assert versioned.latest_value(versions["a"]) == VersionedRecord("five", 5, None)
    assert (
        versioned.latest_value(versions["b"]) is None
    )  # deleted: a tombstone is its latest version
    assert versioned.latest_value([]) is None


class FourPartitions:
    """The one thing ``read_table_key`` asks an admin client: the changelog's partitions."""

    async def partitions(self, topic: str) -> list[int]:
        return [0, 1, 2, 3]


@pytest.fixture
def read_key(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``read_table_key`` of the versioned table over :data:`WRITES`, as the key's changelog
    partition (``read_topics`` is the broker's side, replaced here)."""
    app, table = versioned_app()

    async def read_topics(_bootstrap: str, topics: list[str], **_: Any) -> dict[str, Any]:
        return {topic: changelog(table, WRITES) for topic in topics}

    monkeypatch.setattr(readback, "read_topics", read_topics)

    def read(key: str) -> KeyRead:
        return asyncio.run(readback.read_table_key(app, table, key, admin=FourPartitions()))

    return table, read


def test_a_key_read_from_its_changelog_partition(read_key: Any) -> None:
    table, read = read_key
    apple = read("apple")
    partition = readback.key_partition(table, "apple", 4)
    assert (apple.found, apple.value, apple.records, apple.partition) == (True, 12, 12, partition)
    assert apple.versions == (
        VersionedRecord(10, 1_000, 3_000),
        VersionedRecord(11, 3_000, 5_000),
        VersionedRecord(12, 5_000, None),
    )
    pear = read("pear")  # deleted: not found, its versions kept
    assert (pear.found, pear.value) == (False, None)
    assert pear.versions == (VersionedRecord(5, 1_500, 2_500), VersionedRecord(None, 2_500, None))
    fig = read("fig")  # the expired version is gone
    assert (fig.found, fig.value) == (True, 3)
    assert fig.versions == (VersionedRecord(2, 2_000, 70_000), VersionedRecord(3, 70_000, None))
    nowhere = read("kiwi")
    assert (nowhere.found, nowhere.value, nowhere.versions) == (False, None, ())


def test_the_json_of_a_key_from_the_changelog_is_the_owners(read_key: Any) -> None:
    table, read = read_key

    def from_changelog(key: str) -> dict[str, Any]:
        found = table_lookup.from_changelog(table, key, read(key))
        return app_report.lookup_json(table, found)

    apple = from_changelog("apple")
    assert apple == {
        "table": "prices",
        "key": "apple",
        "partition": readback.key_partition(table, "apple", 4),
        "found": True,
        "source": {"changelog": table.changelog_topic_name, "records_read": 12},
        "value": 12,
        "versions": [
            {"valid_from": 1_000, "value": 10},
            {"valid_from": 3_000, "value": 11},
            {"valid_from": 5_000, "value": 12},
        ],
    }
    # The owner's answers (runtime/web/queries.py), 200 and 404 (the latest is a tombstone).
    owner = "http://127.0.0.1:6066"
    answer = {
        "table": "prices",
        "key": "apple",
        "partition": apple["partition"],
        "owner": owner,
        "value": 12,
        "versions": apple["versions"],
    }
    from_owner = table_lookup.from_answer(table, "apple", owner, 200, answer)
    assert app_report.lookup_json(table, from_owner) == {**apple, "source": {"worker": owner}}
    pear = from_changelog("pear")
    assert (pear["found"], pear["value"]) == (False, None)
    assert pear["versions"] == [
        {"valid_from": 1_500, "value": 5},
        {"valid_from": 2_500, "value": None},
    ]
    deleted = {
        "table": "prices",
        "key": "pear",
        "partition": pear["partition"],
        "owner": owner,
        "versions": pear["versions"],
        "error": "no value",
    }
    from_owner = table_lookup.from_answer(table, "pear", owner, 404, deleted)
    assert app_report.lookup_json(table, from_owner) == {**pear, "source": {"worker": owner}}


def test_the_contents_list_each_keys_latest_value_and_its_versions() -> None:
    _, table = versioned_app()
    versions = versioned.key_versions(
        readback.decode_changelog(table, changelog(table, WRITES)).items()
    )
    rows = app_report.versioned_contents_json(versions)
    assert [(r["key"], r["value"], r["valid_from"], len(r["versions"])) for r in rows] == [
        ("apple", 12, 5_000, 3),
        ("fig", 3, 70_000, 2),
    ]  # pear is deleted, as a plain table's deleted key
    assert app_report.format_versioned_contents(versions).splitlines() == [
        "KEY      VALUE  VALID_FROM  VERSIONS",
        '"apple"  12     5000        3',
        '"fig"    3      70000       2',
        "2 key(s)",
    ]


def test_read_table_gives_the_latest_values_and_read_table_versions_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, table = versioned_app()

    async def read_topics(_bootstrap: str, topics: list[str], **_: Any) -> dict[str, Any]:
        return {topic: changelog(table, WRITES) for topic in topics}

    monkeypatch.setattr(readback, "read_topics", read_topics)
    assert asyncio.run(readback.read_table(app, "prices")) == {"apple": 12, "fig": 3}
    versions = asyncio.run(readback.read_table_versions(app, "prices"))
    assert sorted(versions) == ["apple", "fig", "pear"]
    assert versions["pear"][-1] == VersionedRecord(None, 2_500, None)
    with pytest.raises(ValueError, match="not versioned"):
        asyncio.run(readback.read_table_versions(app, "plain"))


def test_the_list_says_which_tables_are_versioned() -> None:
    app, table = versioned_app()
    rows = {
        row["table"]: row for row in app_report.tables_json(app, {table.changelog_topic_name: 4})
    }
    assert rows["prices"]["versioned"] == {"history_ms": 60_000}
    assert rows["prices"]["window"] is None and rows["plain"]["versioned"] is None
    header, plain, prices = app_report.format_tables(app, {}).splitlines()
    assert header.split() == [
        "TABLE",
        "CHANGELOG",
        "PARTITIONS",
        "KEYS",
        "VALUES",
        "WINDOW",
        "HISTORY",
    ]
    assert plain.split()[-1] == "-" and prices.split()[-1] == "1m00s"


def test_start_on_a_versioned_table_names_what_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli("-A", "tests.ops.apps.windowed_tables", "tables", "prices", "apple", "1000")
    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert "table 'prices' is versioned, not windowed" in err
    assert "`tables prices KEY --json` lists the key's versions" in err
