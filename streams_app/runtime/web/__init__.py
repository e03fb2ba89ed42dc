"""The worker's web server (``/health``, ``/ready``, ``/metrics``, ``/tables``, ``/assignment``,
``@app.page`` views): see :mod:`streams_app.runtime.web.server`."""

from streams_app.runtime.web.server import WebServer

__all__ = ["WebServer"]
