"""Is a broker really serving? An open port is not enough: ask for metadata."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import Any

from streams_app.aio import within

#: aiokafka logs every refused connection at ERROR; while a broker boots those are expected, so
#: the aiokafka log filter drops records from threads named so.
from streams_app.kafka.logs import QUIET_THREAD_PREFIX as _PROBE_THREAD


@dataclass(frozen=True)
class ClusterView:
    broker_ids: frozenset[int]
    controller_id: int


async def fetch_cluster_view(
    bootstrap: str, timeout: float = 2.0, security: dict[str, Any] | None = None
) -> ClusterView:
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(timeout * 1000),
        retry_backoff_ms=100,
        **(security or {}),
    )
    try:
        await within(client.bootstrap(), timeout)
        metadata = await within(client.fetch_all_metadata(), timeout)
        ids = frozenset(b.nodeId for b in metadata.brokers())
        controller = metadata.controller.nodeId if metadata.controller else -1
        return ClusterView(broker_ids=ids, controller_id=controller)
    finally:
        await client.close()


def cluster_view(
    bootstrap: str, timeout: float = 2.0, security: dict[str, Any] | None = None
) -> ClusterView | None:
    """Synchronous probe, safe to call from code that may itself run inside an event loop.

    ``security`` holds aiokafka client arguments (a TLS/SASL broker's listener)."""

    def run() -> ClusterView | None:
        try:
            return asyncio.run(fetch_cluster_view(bootstrap, timeout, security))
        except Exception:
            return None

    with concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=_PROBE_THREAD
    ) as pool:
        return pool.submit(run).result()
