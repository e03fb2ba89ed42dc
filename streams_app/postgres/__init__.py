"""Exactly-once at the database edge (PostgreSQL, psycopg 3; the ``postgres`` extra).

- :mod:`~streams_app.postgres.sink`: the sink runner (Kafka -> PostgreSQL): each batch's rows
  and its offsets in one database transaction, zombies fenced in the database;
- :mod:`~streams_app.postgres.offsets`: the offsets table, claims and the commit fence;
- :mod:`~streams_app.postgres.outbox`: ``outbox.add(conn, topic=, key=, value=, headers=)``;
- :mod:`~streams_app.postgres.relay`: the outbox relay (PostgreSQL -> Kafka), exactly once;
- :mod:`~streams_app.postgres.horizon`: which outbox events are final (the visibility trap);
- :mod:`~streams_app.postgres.progress`: the relay's progress, kept in Kafka;
- :mod:`~streams_app.postgres.schema`: the tables (``streams-app outbox init``);
- :mod:`~streams_app.postgres.connection`: DSNs named without secrets, connecting with retries;
- :mod:`~streams_app.postgres.server`: a real PostgreSQL on 127.0.0.1 (tests, local runs);
- :mod:`~streams_app.postgres.devserver`: ``streams-app postgres start|stop|status``;
- :mod:`~streams_app.postgres.crashpoints`: the SIGKILL hook fault tests use.

This package imports nothing itself, so :mod:`~streams_app.postgres.server` stays importable
without psycopg. See docs/database.md.
"""
