"""streams_app: exactly-once stream processing for Python."""

__version__ = "0.1.0"
