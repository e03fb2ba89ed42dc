"""The chaos suite that proves exactly-once under faults (issue 4).

Modelled on Kafka's streams EOS system test and Jepsen's Kafka checker; one concept per module:

- :mod:`~streams_app.chaos.generator`: keyed integers into ``data``, recording what was acked;
- :mod:`~streams_app.chaos.systems`: streams_app and faust-streaming running the same topology
  (``topologies.eos_test`` / ``topologies.eos_test_faust``) as worker processes;
- :mod:`~streams_app.chaos.schedule`: the seeded, replayable fault schedule;
- :mod:`~streams_app.chaos.coordinators`: which broker coordinates a group / transactional id;
- :mod:`~streams_app.chaos.faults`: the injector (SIGTERM, SIGKILL, SIGSTOP zombies, state-dir
  wipes, broker and coordinator kills) and its resume-time log;
- :mod:`~streams_app.chaos.progress`: committed offsets against end offsets, over time;
- :mod:`~streams_app.chaos.reader`: streaming scans and the concurrent read_committed reader;
- :mod:`~streams_app.chaos.verifier`: invariants 1-10 on what was committed;
- :mod:`~streams_app.chaos.copier`: invariant 11, the client-level transactional copier check;
- :mod:`~streams_app.chaos.invariants`: the twelve invariants' names;
- :mod:`~streams_app.chaos.run`, :mod:`~streams_app.chaos.report`,
  :mod:`~streams_app.chaos.cli`: one run per system, the table and JSON, ``python -m
  streams_app.chaos``.
"""

from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.run import SystemResult, run_chaos, run_system

__all__ = ["ChaosConfig", "SystemResult", "run_chaos", "run_system"]
