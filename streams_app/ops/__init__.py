"""Operator tooling: the transaction inspector, group status, table read-back and reset.

The CLI (``streams-app txn|status|tables|agents|reset``) is a thin layer over these modules; the
Kafka calls they make live in :mod:`streams_app.kafka.ops_admin`.
"""
