"""Throughput benchmarks: ``python -m benchmarks.run`` (``make bench``).

One embedded broker, one pre-loaded input topic, then one worker process per run:

- ``streams_app`` on the count topology (``topologies/count.py``) under ``exactly_once_v2``;
- the same under ``at_least_once``;
- a bare aiokafka consume -> transactional produce loop (the ceiling);
- optionally faust-streaming's ``exactly_once`` on the same count topology.

Not a test: figures depend on the machine and on whatever else runs on it. See BENCHMARKS.md.
"""
