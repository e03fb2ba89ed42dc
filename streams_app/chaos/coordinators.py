"""Which broker coordinates a consumer group, or a transactional id (FindCoordinator).

The coordinator of a group is the leader of its ``__consumer_offsets`` partition; that of a
transactional id the leader of its ``__transaction_state`` partition. Killing exactly that broker
is the fault that tests coordinator failover in the middle of commits (TxnOffsetCommit, EndTxn,
the group's rebalance), so the fault injector asks the cluster right before it strikes.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka.client import AIOKafkaClient, CoordinationType


class CoordinatorLocator:
    """A small client kept open for the run: FindCoordinator with retries."""

    def __init__(self, bootstrap: str) -> None:
        self._client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="chaos-locator")
        self._started = False

    async def start(self) -> None:
        await self._client.bootstrap()
        self._started = True

    async def close(self) -> None:
        if self._started:
            await self._client.close()

    async def group_coordinator(self, group_id: str, timeout: float = 30.0) -> int:
        return await self._lookup(CoordinationType.GROUP, group_id, timeout)

    async def transaction_coordinator(self, transactional_id: str, timeout: float = 30.0) -> int:
        return await self._lookup(CoordinationType.TRANSACTION, transactional_id, timeout)

    async def _lookup(self, kind: CoordinationType, key: str, timeout: float) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                node = int(await self._client.coordinator_lookup(kind, key))
                if node >= 0:
                    return node
            except Exception:
                if loop.time() > deadline:
                    raise
            if loop.time() > deadline:
                raise TimeoutError(f"no coordinator found for {kind.name.lower()} {key!r}")
            with contextlib.suppress(Exception):
                await self._client.force_metadata_update()
            await asyncio.sleep(0.5)
