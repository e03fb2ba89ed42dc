"""Where the operator commands connect: ``--bootstrap``, else the app's settings (``-A``), else
the development broker.

The app's settings carry its security settings (TLS, SASL), so ``streams-app -A module txn list``
reaches a secured cluster the way the app's workers do. Without ``-A`` the ``STREAMS_APP_*``
environment variables apply as they do to an app (``STREAMS_APP_SECURITY_PROTOCOL``, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from streams_app.cli.loader import load_app
from streams_app.settings import Settings

#: The settings id of a command run without -A (only its broker and security settings are used).
CLI_ID = "streams-app"


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        help="Kafka bootstrap servers (default: the app's broker with -A, else "
        "$STREAMS_APP_BROKER, else the broker of `streams-app broker start`, else "
        "127.0.0.1:9092)",
    )


def settings_for(args: argparse.Namespace) -> Settings:
    app_spec = getattr(args, "app", None)
    if app_spec:
        conf = load_app(app_spec).conf
    else:
        from streams_app.cli.pipeline import default_bootstrap

        conf = Settings.build(CLI_ID, {"broker": default_bootstrap()})
    bootstrap = getattr(args, "bootstrap", None)
    if bootstrap:
        conf = dataclasses.replace(conf, broker=bootstrap)
        conf.validate()
    return conf


def client_kwargs(conf: Settings) -> dict[str, Any]:
    return conf.security()
