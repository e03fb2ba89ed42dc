"""What is specific to the memory store: nothing survives the store."""

from __future__ import annotations

from streams_app.state import MemoryStore


def test_memory_store_is_not_persistent_and_close_drops_everything() -> None:
    store = MemoryStore("t")
    assert not store.persistent
    store.partition(0).write({b"a": b"1"}, 5)
    store.close()
    fresh = store.partition(0)
    assert fresh.changelog_offset is None
    assert list(fresh.items()) == []
    assert MemoryStore("t").partition(0).changelog_offset is None


def test_memory_partition_copies_what_it_is_given() -> None:
    part = MemoryStore("t").partition(0)
    batch: dict[bytes, bytes | None] = {b"j": b"1"}
    part.write(batch, 2)
    batch[b"j"] = b"changed"
    assert part.get(b"j") == b"1"
