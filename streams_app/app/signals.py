"""Faust's app signals (``app.on_rebalance_complete.connect``), fired by the runtime.

A receiver is called as Faust calls it, ``receiver(sender, **kwargs)`` with the app as the
sender, sync or async. An exception in a receiver is logged and does not stop the worker (a
signal reports; it is not part of processing).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Signal:
    def __init__(self, name: str, sender: Any = None) -> None:
        self.name = name
        self.sender = sender
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, fun: Callable[..., Any] | None = None, **_: Any) -> Any:
        """Register ``fun`` (also usable as a decorator, with or without parentheses)."""
        if fun is None:
            return self.connect
        self.receivers.append(fun)
        return fun

    def disconnect(self, fun: Callable[..., Any]) -> None:
        if fun in self.receivers:
            self.receivers.remove(fun)

    async def send(self, *args: Any, **kwargs: Any) -> None:
        sender = args[0] if args else self.sender
        for receiver in list(self.receivers):
            try:
                result = receiver(sender, *args[1:], **kwargs)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("receiver %r of signal %s failed", receiver, self.name)

    def __repr__(self) -> str:
        return f"<Signal {self.name}: {len(self.receivers)} receivers>"
