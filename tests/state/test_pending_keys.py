"""The hints of the join stores' pending writes (``streams_app.state.composite.PendingKeys``):
whatever the transaction goes through (writes, deletes, reads that index the hints, commits
plain or sealed while writes go on, discards), every entry the transaction holds pending is
hinted under its user key, and the hints stay bounded by what is pending rather than growing
with everything ever written. Both prunings are driven: by position (a view that marks each
prepare, as the join buffer does) and by asking the transaction (no mark, or reads that
indexed touches after the last committed mark). Unit test of our own bookkeeping, on the
in-memory store."""

from __future__ import annotations

import random

import pytest

from streams_app.codecs import StrCodec
from streams_app.state import MemoryStore, PartitionTransaction
from streams_app.state.composite import PendingKeys


def _tx() -> PartitionTransaction:
    return PartitionTransaction(MemoryStore("hints").partition(0), StrCodec(), StrCodec())


def _hinted(hints: PendingKeys) -> set[tuple[str, int]]:
    """Every composite hinted, read without indexing the log (a read would: the test's own
    checks must not change which pruning runs)."""
    return {c for entries in hints._keys.values() for c in entries} | set(hints._log)


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "unmarked"])
@pytest.mark.parametrize("reads", [0.0, 0.002, 0.02], ids=["write-only", "rare-reads", "reads"])
@pytest.mark.parametrize("seed", range(4))
def test_every_pending_entry_stays_hinted_and_the_hints_stay_bounded(
    marked: bool, reads: float, seed: int
) -> None:
    rng = random.Random(seed)
    tx = _tx()
    hints = PendingKeys(tx)
    if marked:
        tx.before_prepare = hints.mark
    keys = [f"k{i}" for i in range(13)]
    written: list[tuple[str, int]] = []
    sealed = False
    offset = 0
    largest = counted = 0
    for step in range(30_000):
        roll = rng.random()
        if roll < reads:
            key = rng.choice(keys)
            pending = {c for c in tx.pending_keys() if c[0] == key}
            assert pending <= set(hints.of(key)), step
        elif roll < 0.75 or not written:
            composite = (rng.choice(keys), step)
            tx.set(composite, "v")
            hints.touch(composite)
            written.append(composite)
        elif roll < 0.97:
            composite = rng.choice(written[-200:])  # rewrites and deletes of recent entries
            if rng.random() < 0.5:
                tx.delete(composite)
            else:
                tx.set(composite, "again")
            hints.touch(composite)
        elif roll < 0.973:
            tx.prepare()  # a changelog sent before its commit (a prepare that may abort)
        elif roll < 0.9995:
            offset += 1
            if sealed:
                tx.commit_sealed(offset)
                sealed = False
            elif rng.random() < 0.8:
                tx.seal()  # a commit in flight: writes go on meanwhile
                sealed = True
            else:
                tx.commit(offset)
        else:
            tx.discard()  # an abort: the views over the transaction are made anew
            sealed = False
            hints = PendingKeys(tx)
            if marked:
                tx.before_prepare = hints.mark
        pruned = hints._count < counted  # a pruning (or the hints dropped as all committed)
        counted = hints._count
        if pruned or step % 97 == 0:
            assert set(tx.pending_keys()) <= _hinted(hints), step
            held = len(hints._log) + sum(map(len, hints._keys.values()))
            largest = max(largest, held)
    assert set(tx.pending_keys()) <= _hinted(hints)
    # Bounded: a pruning keeps about what is pending (a commit in flight and what came since)
    # and the next comes at twice that plus 1,024; 30,000 touches were made.
    assert largest < 8_000


def test_pruning_by_position_keeps_a_rewrite_made_after_the_mark() -> None:
    """A write sealed with a commit, then rewritten while that commit is in flight: once the
    commit lands and a pruning drops the touches before its mark, the rewrite's hint is kept
    (it is the later touch), and with it the entry's pending value."""
    tx = _tx()
    hints = PendingKeys(tx)
    tx.before_prepare = hints.mark
    for n in range(3_000):
        tx.set(("a", n), "v")
        hints.touch(("a", n))
    tx.seal()
    tx.delete(("a", 5))  # while the commit is in flight
    hints.touch(("a", 5))
    tx.commit_sealed(1)
    tx.seal()  # the next commit: its prepare notes that the first has landed
    for n in range(3_000, 6_000):  # enough touches for a pruning
        tx.set(("b", n), "v")
        hints.touch(("b", n))
    assert hints._log_base >= 3_000  # the first commit's touches were dropped by position
    assert set(hints.of("a")) == {("a", 5)} and tx.pending(("a", 5)) is not None
    assert set(tx.pending_keys()) <= _hinted(hints)
