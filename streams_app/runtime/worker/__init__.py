"""The worker: one process running a topology (``root.py`` says how its modules divide the work).

This package's door. Other packages make a worker through ``App.worker()`` (or import
:class:`Worker` from here: the CLI and the test harness) and read a running one through
:class:`~streams_app.runtime.view.WorkerView`; none reaches into the modules below.
"""

from streams_app.runtime.worker.collector import (
    H_GENERATION,
    H_TXN_ID,
)
from streams_app.runtime.worker.loop import MEANWHILE_SLICE, SATURATED
from streams_app.runtime.worker.records import BUSY_INBOX
from streams_app.runtime.worker.root import Worker

__all__ = [
    "BUSY_INBOX",
    "H_GENERATION",
    "H_TXN_ID",
    "MEANWHILE_SLICE",
    "SATURATED",
    "Worker",
]
