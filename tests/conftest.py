"""Suite-wide configuration. The broker fixtures come from streams_app's own pytest plugin
(streams_app.testing.plugin, registered as an entry point), exactly as app teams get them."""

from __future__ import annotations

import logging

# aiokafka logs every failed connection attempt during fault tests at ERROR; keep the report quiet.
logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
