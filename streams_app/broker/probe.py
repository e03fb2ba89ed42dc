"""Is a broker really serving? An open port is not enough: ask for metadata."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass

_PROBE_THREAD = "streams-app-broker-probe"


class _QuietProbe(logging.Filter):
    """aiokafka logs every refused connection at ERROR; while a broker boots those are expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not threading.current_thread().name.startswith(_PROBE_THREAD)


for _name in ("aiokafka", "aiokafka.conn", "aiokafka.client"):
    logging.getLogger(_name).addFilter(_QuietProbe())


@dataclass(frozen=True)
class ClusterView:
    broker_ids: frozenset[int]
    controller_id: int


async def fetch_cluster_view(bootstrap: str, timeout: float = 2.0) -> ClusterView:
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), retry_backoff_ms=100
    )
    try:
        await asyncio.wait_for(client.bootstrap(), timeout)
        metadata = await asyncio.wait_for(client.fetch_all_metadata(), timeout)
        ids = frozenset(b.nodeId for b in metadata.brokers())
        controller = metadata.controller.nodeId if metadata.controller else -1
        return ClusterView(broker_ids=ids, controller_id=controller)
    finally:
        await client.close()


def cluster_view(bootstrap: str, timeout: float = 2.0) -> ClusterView | None:
    """Synchronous probe, safe to call from code that may itself run inside an event loop."""

    def run() -> ClusterView | None:
        try:
            return asyncio.run(fetch_cluster_view(bootstrap, timeout))
        except Exception:
            return None

    with concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=_PROBE_THREAD
    ) as pool:
        return pool.submit(run).result()
