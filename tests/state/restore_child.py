"""Child process of the restore-resume test: restores a changelog partition into a RocksDB
partition (default options: write-behind on) and, once its position reaches ``stop_at``,
prints ``AT <position>`` and blocks, to be SIGKILLed there by the test.

Arguments: bootstrap topic path stop_at
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from streams_app.state import RocksDBStorePartition, restore_partitions
from streams_app.transport.base import TopicPartition
from tests.state.test_restore import Offsets, RestoreConsumer


async def main(bootstrap: str, topic: str, path: str, stop_at: int) -> None:
    part = RocksDBStorePartition(Path(path))
    consumer, offsets = RestoreConsumer(bootstrap), Offsets(bootstrap)
    await consumer.consumer.start()
    await offsets.consumer.start()

    def progress(tp: TopicPartition, position: int, end: int) -> None:
        if position >= stop_at:
            print("AT", position, flush=True)
            time.sleep(600)  # killed here, restore part-way (or just finished)

    await restore_partitions(
        {TopicPartition(topic, 0): part}, consumer, offsets, max_records=500, on_progress=progress
    )
    progress(TopicPartition(topic, 0), stop_at, stop_at)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
