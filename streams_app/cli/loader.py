"""Find the App a ``-A module[:attribute]`` option names."""

from __future__ import annotations

import importlib
import os
import sys

from streams_app.app.app import App
from streams_app.errors import StreamsAppError


def load_app(spec: str | None) -> App:
    if not spec:
        raise StreamsAppError(
            "no app given: pass -A/--app, e.g. `streams-app -A topologies.orders worker`"
        )
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: topologies/ next to the user
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise StreamsAppError(
                f"cannot import {module_name!r}: run from the directory that contains it, or "
                "install the package that provides it"
            ) from exc
        raise
    if attribute:
        app = getattr(module, attribute, None)
    else:
        app = getattr(module, "app", None)
        if app is None:
            candidates = [v for v in vars(module).values() if isinstance(v, App)]
            app = candidates[0] if len(candidates) == 1 else None
    if not isinstance(app, App):
        raise StreamsAppError(
            f"{spec!r} does not name a streams_app.App; define `app = App(...)` in "
            f"{module_name} or pass -A {module_name}:<name>"
        )
    return app
