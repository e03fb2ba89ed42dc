"""Probes that show what a network cut really cuts: TCP connections and UDP datagrams between
the hosts of a :class:`~streams_app.broker.netns.Network`.

A :class:`Probes` puts a small TCP and UDP responder in every host's namespace (port
:data:`PROBE_PORT`, beside whatever the host runs). :meth:`Probes.reachable` sends a datagram
along every ordered pair of hosts at once and answers which arrived: UDP shows a one-way cut
where TCP cannot (a TCP handshake needs both directions). :meth:`Probes.tcp` opens a connection
and moves a payload through it within a deadline: it fails while a link is cut (either way) or
throttled below the payload's rate, and succeeds once it is healed.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import socket
import threading
import time
from collections.abc import Iterable
from functools import partial

from streams_app.broker.netns import Network, call_in

PROBE_PORT = 7070


class Probes:
    """Responders in every host of ``network`` (those it has now); ``close()`` at the end."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self.hosts = sorted(network.hosts)
        self._received: set[bytes] = set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        for name in self.hosts:
            host = network.host(name)
            tcp, udp = call_in(host.namespace, partial(_bind, host.address))
            self._sockets += [tcp, udp]
            threading.Thread(target=self._serve_tcp, args=(tcp,), daemon=True).start()
            threading.Thread(target=self._serve_udp, args=(udp,), daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            # shutdown wakes the thread blocked in accept/recv (close alone does not, and the
            # port would stay taken for the next test).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve_tcp(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_drain_and_answer, args=(conn,), daemon=True).start()

    def _serve_udp(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(256)
            except OSError:
                return
            with self._lock:
                self._received.add(data)

    def reachable(
        self, pairs: Iterable[tuple[str, str]] | None = None, wait: float = 0.5
    ) -> set[tuple[str, str]]:
        """Of ``pairs`` (default: every ordered pair of hosts), those whose datagrams arrived."""
        chosen = list(pairs) if pairs is not None else list(itertools.permutations(self.hosts, 2))
        tokens = {pair: f"{pair[0]}>{pair[1]}:{secrets.token_hex(6)}".encode() for pair in chosen}
        for src in {s for s, _ in chosen}:
            targets = [
                (self.network.host(d).address, tokens[(s, d)]) for s, d in chosen if s == src
            ]
            call_in(self.network.host(src).namespace, partial(_send_udp, targets))
        time.sleep(wait)  # datagrams in flight on a local bridge; a lost one never comes
        with self._lock:
            return {pair for pair, token in tokens.items() if token in self._received}

    def tcp(
        self,
        src: str | None,
        dst: str,
        *,
        port: int = PROBE_PORT,
        payload: int = 1,
        timeout: float = 2.0,
    ) -> bool:
        """Can ``src`` (None: the harness) connect to ``dst`` and, on the probe port, have
        ``payload`` bytes acknowledged, all within ``timeout``? (On another port: connect only.)"""
        address = self.network.host(dst).address

        def attempt() -> bool:
            deadline = time.monotonic() + timeout
            try:
                with socket.create_connection((address, port), timeout=timeout) as conn:
                    if port != PROBE_PORT:
                        return True
                    conn.settimeout(max(0.01, deadline - time.monotonic()))
                    conn.sendall(payload.to_bytes(8, "big") + bytes(payload))
                    conn.settimeout(max(0.01, deadline - time.monotonic()))
                    return conn.recv(2) == b"ok"
            except OSError:
                return False

        namespace = None if src is None else self.network.host(src).namespace
        return call_in(namespace, attempt)


def _bind(address: str) -> tuple[socket.socket, socket.socket]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((address, PROBE_PORT))
    tcp.listen(16)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((address, PROBE_PORT))
    return tcp, udp


def _drain_and_answer(conn: socket.socket) -> None:
    """Read an 8-byte length and that many bytes, answer ``ok``."""
    with conn:
        conn.settimeout(60.0)
        try:
            header = _read(conn, 8)
            _read(conn, int.from_bytes(header, "big"))
            conn.sendall(b"ok")
        except OSError:
            pass


def _read(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 65536))
        if not chunk:
            raise OSError("closed early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send_udp(targets: list[tuple[str, bytes]]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _ in range(3):
            for address, token in targets:
                with contextlib.suppress(OSError):
                    sock.sendto(token, (address, PROBE_PORT))
