"""Drives the stream-stream join processor (streams_app/runtime/joins/stream_stream.py) over
:class:`tests.joins.data.Rec` records the way a task does, broker-free: its three stores
through :class:`~streams_app.state.base.PartitionTransaction`, commits, commits sealed while
processing goes on, aborts (the transactions discarded, the state made anew, the records since
the last commit processed again) and restarts (fresh stores restored from the committed
changelog records). Only what committed counts as output, as a ``read_committed`` consumer
sees it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streams_app.codecs import StrCodec
from streams_app.runtime.joins.stream_stream import (
    LEFT,
    RIGHT,
    JoinResult,
    JoinWindows,
    StreamStreamJoin,
    StreamStreamJoinState,
)
from streams_app.state import MemoryStore, PartitionTransaction, RocksDBStore, Store
from tests.joins.data import LEFT as LEFT_TOPIC
from tests.joins.data import Params, Rec
from tests.joins.oracle import Out

ROLES = ("left", "right", "unmatched")


def windows(p: Params) -> JoinWindows:
    return JoinWindows(p.before, p.after, p.grace)


def as_out(result: JoinResult) -> Out:
    return Out(result.key, result.left, result.right, result.timestamp)


def canonical(outs: list[Out]) -> list[Out]:
    """Outputs with each run of consecutive nulls sorted: nulls released together are ordered
    by close time, time and side, then by key as the unmatched store orders keys (by their
    bytes, shorter first) where the oracle orders key strings; runs of nulls of equal-length
    keys come out the same either way."""
    out: list[Out] = []
    run: list[Out] = []
    for o in outs:
        if o.left is None or o.right is None:
            run.append(o)
            continue
        out += sorted(run, key=repr)
        run = []
        out.append(o)
    return out + sorted(run, key=repr)


@dataclass
class Faults:
    """How often each event happens between two records (probabilities)."""

    commit: float = 0.0
    seal: float = 0.0
    abort: float = 0.0
    restart: float = 0.0
    seed: int = 0


@dataclass
class Driven:
    outputs: list[Out]
    commits: int = 0
    aborts: int = 0
    restarts: int = 0
    sealed_commits: int = 0
    too_late: int = 0
    states: list[StreamStreamJoinState] = field(default_factory=list)


StoreFactory = Callable[[str, int], Store]


def memory_stores(role: str, generation: int) -> Store:
    return MemoryStore(f"{role}-{generation}")


def rocksdb_stores(root: Path) -> StoreFactory:
    def make(role: str, generation: int) -> Store:
        return RocksDBStore(role, root / f"{role}-{generation}")

    return make


class JoinTask:
    """One task of one stream-stream join: its stores, their transactions, its state."""

    def __init__(self, how: str, params: Params, stores: StoreFactory = memory_stores) -> None:
        self.join = StreamStreamJoin(how, windows(params))
        self.codecs = self.join.store_codecs(StrCodec(), StrCodec(), StrCodec())
        self.stores_factory = stores
        self.generation = 0
        #: Every committed changelog batch per store, in order (what a restore reads).
        self.changelog: dict[str, list[dict[bytes, bytes | None]]] = {r: [] for r in self.codecs}
        self.changelog_offset = 0
        #: The batches a commit in flight carries (written to the changelog if it succeeds).
        self._sealed: dict[str, dict[bytes, bytes | None]] = {}
        self.stores: dict[str, Store] = {}
        self.txs: dict[str, PartitionTransaction] = {}
        self._open_stores()
        self.state = self.open()

    def _open_stores(self) -> None:
        for store in self.stores.values():
            store.close()
        self.stores = {r: self.stores_factory(r, self.generation) for r in self.codecs}
        self.generation += 1

    def open(self) -> StreamStreamJoinState:
        self.txs = {
            role: PartitionTransaction(self.stores[role].partition(0), *self.codecs[role])
            for role in self.codecs
        }
        return self.join.open(self.txs["left"], self.txs["right"], self.txs.get("unmatched"))

    def process(self, rec: Rec) -> list[Out]:
        side = LEFT if rec.topic == LEFT_TOPIC else RIGHT
        # The record's name is its value (the differential input's values carry a reference).
        results = self.state.process(side, rec.key, rec.name, rec.ts, rec.offset)
        return [as_out(r) for r in results]

    def end_of_batch(self) -> None:
        self.state.expire()

    def commit(self) -> None:
        self.changelog_offset += 1
        for role, tx in self.txs.items():
            self.changelog[role].append(dict(tx.prepare()))
            tx.commit(self.changelog_offset)

    def seal(self) -> None:
        for role, tx in self.txs.items():
            self._sealed[role] = dict(tx.prepare())
            tx.seal()

    def commit_sealed(self) -> None:
        self.changelog_offset += 1
        for role, tx in self.txs.items():
            self.changelog[role].append(self._sealed.pop(role))
            tx.commit_sealed(self.changelog_offset)

    def abort(self) -> None:
        self._sealed.clear()
        for tx in self.txs.values():
            tx.discard()
        self.state = self.open()

    def restart(self) -> None:
        """A crash: new stores restored from the committed changelog, a new state."""
        self._sealed.clear()
        self._open_stores()
        for role, batches in self.changelog.items():
            merged: dict[bytes, bytes | None] = {}
            for batch in batches:
                merged.update(batch)
            if merged:
                self.stores[role].partition(0).write(merged, self.changelog_offset)
        self.state = self.open()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def drive(
    records: list[Rec],
    how: str,
    params: Params,
    faults: Faults | None = None,
    stores: StoreFactory = memory_stores,
) -> Driven:
    """Run ``records`` (one task's processing order) through the processor with the faults'
    commits, sealed commits, aborts and restarts; return what committed, in order."""
    faults = faults or Faults()
    rng = random.Random(faults.seed)
    task = JoinTask(how, params, stores)
    driven = Driven([])
    committed: list[Out] = []
    pending: list[Out] = []  # since the last commit (or the sealed point)
    sealed: list[Out] | None = None  # what the commit in flight carries
    position = committed_position = 0
    sealed_position = 0
    try:
        while position < len(records):
            pending += task.process(records[position])
            position += 1
            if rng.random() < 0.2:
                task.end_of_batch()
            roll = rng.random()
            if sealed is not None and roll < 0.5:
                task.commit_sealed()
                committed += sealed
                committed_position = sealed_position
                sealed = None
                driven.sealed_commits += 1
            elif roll < faults.abort:
                # Everything since the last commit is dropped (a commit in flight fails too).
                task.abort()
                pending, sealed = [], None
                position = committed_position
                driven.aborts += 1
            elif roll < faults.abort + faults.restart:
                task.restart()
                pending, sealed = [], None
                position = committed_position
                driven.restarts += 1
            elif sealed is None and roll < faults.abort + faults.restart + faults.seal:
                task.seal()
                sealed, pending = pending, []
                sealed_position = position
            elif sealed is None and roll < faults.abort + faults.restart + faults.seal + (
                faults.commit
            ):
                task.commit()
                committed += pending
                pending = []
                committed_position = position
                driven.commits += 1
        if sealed is not None:
            task.commit_sealed()
            committed += sealed
        task.end_of_batch()
        task.commit()
        committed += pending
        driven.too_late = task.state.too_late
        driven.states.append(task.state)
    finally:
        task.close()
    driven.outputs = committed
    return driven
