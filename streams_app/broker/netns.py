"""A private network for a networked cluster: each broker and each worker in its own network
namespace, with its own address on one bridge, and links that can be cut and healed.

On loopback every process shares one network stack, so the only faults are process faults
(kill, stop). Here each *host* (a broker, a worker, the chaos generator) is a Linux network
namespace joined to a bridge by a veth pair, with an address of its own in a private /24; the
process that started the run (the harness) reaches every host through the bridge's own address.
Nothing else is connected: the bridge has no outside interface, no route leads out of it, and
no forwarding or NAT is set up, so traffic stays between the namespaces the run creates.

**How a link is cut.** The kernels this runs on may lack netem, tc's drop action and the
iptables/nft tools (this project's machines: ``CONFIG_NET_SCH_NETEM`` unset, no ``act_gact``, no
``nft`` or ``iptables`` binaries), so a cut uses only ``ip``: a permanent neighbour (ARP) entry
in the sender's namespace maps the receiver's address to a MAC address no interface has. Every
packet the sender sends to the receiver then goes to nobody and is dropped silently, on new and
on established connections alike, exactly as a broken link drops them; the other direction is
untouched (a *one-way* cut). A two-way cut is two one-way cuts. A TCP connection needs both
directions, so either direction of cut stalls it; what a one-way cut adds is that requests can
arrive (and be acted on) while their answers are lost, or the reverse. Healing deletes the entry
and the kernel resolves the real address again.

**Delay and loss.** Without netem a link is *throttled* with a token bucket (``tc qdisc tbf``,
both directions): sends wait in its queue (delay) and what would wait longer than its
``latency`` is dropped (loss, at the tail, as on a congested link). See :meth:`Network.throttle`.

**Names and leftovers.** A run has a random 6-hex-digit id; its namespaces are
``sa-<id>-<host>``, its bridge ``sa<id>br``, its veths ``sa<id><host>``, and an owner record
``/run/streams-app-netns/<id>.json`` names the process that made them. :meth:`Network.create`
first removes what runs whose owner is gone left behind (a killed run), so runs next to each
other never collide and nothing accumulates; :meth:`Network.destroy` removes the run's own.

Everything needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``); where namespaces cannot be
made, :func:`require_namespaces` raises :class:`NetworkUnavailable` saying why.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from streams_app.errors import StreamsAppError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Where ``ip netns add`` puts its namespace handles.
NETNS_DIR = Path("/run/netns")
#: Owner records of the runs' networks (a run's leftovers are removed once its owner is gone).
OWNERS_DIR = Path("/run/streams-app-netns")
_NAMESPACE = re.compile(r"^sa-([0-9a-f]{6})-([a-z0-9]+)$")
_BRIDGE = re.compile(r"^sa([0-9a-f]{6})br$")
#: A locally administered unicast MAC address no interface of the run has: packets addressed
#: to it are flooded by the bridge and dropped by every receiver (not theirs).
BLACKHOLE_MAC = "02:5a:de:ad:00:01"
#: The interface inside each namespace.
IFACE = "eth0"
_CLONE_NEWNET = 0x40000000


class NetworkUnavailable(StreamsAppError):
    """Network namespaces cannot be made here (not root, not Linux, no ``ip`` or ``nsenter``)."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkUnavailable(
            f"`{' '.join(args)}` failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None when they can (tries to make one)."""
    for tool in ("ip", "nsenter", "tc"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"the `{tool}` command is not installed (iproute2 / util-linux)"
    if not Path("/proc/self/ns/net").exists():
        return "this system has no network namespaces (Linux only)"
    name = f"sa-{secrets.token_hex(3)}-probe"
    proc = _run("ip", "netns", "add", name, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` is not allowed: {(proc.stderr or proc.stdout).strip()}"
    _run("ip", "netns", "delete", name, check=False)
    return None


def require_namespaces() -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise NetworkUnavailable(
            "the networked cluster mode puts each broker and worker in its own network "
            f"namespace, which is not possible here: {reason}. It needs Linux, iproute2, "
            "nsenter and root (CAP_NET_ADMIN + CAP_SYS_ADMIN); run without --network "
            "(the loopback mode) instead"
        )


def enter_namespace(namespace: str) -> None:
    """Move the *calling thread* into ``namespace`` (sockets it opens from then on are there).

    Only for threads made for the purpose (:func:`call_in`, :func:`start_in`): a thread of a
    pool would carry the namespace into unrelated work.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def start_in(namespace: str | None, fn: Callable[[], T], name: str) -> concurrent.futures.Future[T]:
    """Run ``fn`` on a new thread inside ``namespace`` (None: this process's own network)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def body() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            if namespace is not None:
                enter_namespace(namespace)
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=body, name=name, daemon=True).start()
    return future


def call_in(namespace: str | None, fn: Callable[[], T]) -> T:
    """``fn()`` run inside ``namespace`` (on a thread of its own), its result returned."""
    return start_in(namespace, fn, f"netns-{namespace}").result()


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str
    #: The veth end on the bridge (root namespace).
    veth: str


def _alive(pid: int, started: int | None) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return started is None or (len(fields) > 19 and fields[19] == str(started))


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def _owner_alive(run_id: str) -> bool:
    try:
        record = json.loads((OWNERS_DIR / f"{run_id}.json").read_text())
    except (OSError, ValueError):
        return False
    return _alive(int(record["pid"]), record.get("started"))


def namespaces() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except OSError:
        return []


def remove_namespace(namespace: str) -> None:
    """Delete a namespace of ours, ending the processes still inside it first (a namespace
    lives on, with its veth and address, as long as one process is in it)."""
    proc = _run("ip", "netns", "pids", namespace, check=False)
    pids = [int(p) for p in proc.stdout.split() if p.isdigit()] if proc.returncode == 0 else []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p, None)]
        time.sleep(0.05)
    _run("ip", "netns", "delete", namespace, check=False)


def clean_leftovers() -> list[str]:
    """Remove the namespaces, bridges and owner records of runs whose owner process is gone.

    Returns what was removed. Runs whose owner lives (other test runs beside this one) are left
    alone.
    """
    removed: list[str] = []
    for namespace in namespaces():
        match = _NAMESPACE.match(namespace)
        if match and not _owner_alive(match.group(1)):
            remove_namespace(namespace)
            removed.append(namespace)
    links = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        bridge = parts[1].strip().split("@")[0]
        match = _BRIDGE.match(bridge)
        if match and not _owner_alive(match.group(1)):
            _run("ip", "link", "delete", bridge, check=False)
            removed.append(bridge)
    with contextlib.suppress(OSError):
        for record in OWNERS_DIR.glob("*.json"):
            if not _owner_alive(record.stem):
                record.unlink(missing_ok=True)
    if removed:
        log.info("removed the network leftovers of finished runs: %s", ", ".join(removed))
    return removed


def _used_networks() -> list[ipaddress.IPv4Network]:
    used: list[ipaddress.IPv4Network] = []
    text = _run("ip", "-4", "-o", "addr", "show", check=False).stdout
    text += _run("ip", "-4", "route", "show", check=False).stdout
    for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b", text):
        with contextlib.suppress(ValueError):
            used.append(ipaddress.IPv4Network(token, strict=False))
    return used


def choose_subnet(run_id: str) -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0-10.249.255.0, derived from the run id, overlapping nothing in use."""
    used = _used_networks()
    start = int(run_id, 16)
    for step in range(50 * 256):
        n = (start + step) % (50 * 256)
        candidate = ipaddress.IPv4Network(f"10.{200 + n // 256}.{n % 256}.0/24")
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise NetworkUnavailable("no free /24 left in 10.200.0.0/13 for the run's bridge")


class Network:
    """One run's bridge, hosts and cuts. ``create()`` first, ``destroy()`` at the end."""

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id or secrets.token_hex(3)
        if not re.fullmatch(r"[0-9a-f]{6}", self.run_id):
            raise ValueError("a run id is 6 lower-case hex digits")
        self.bridge = f"sa{self.run_id}br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.hosts: dict[str, Host] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._throttled: set[str] = set()
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------

    def create(self) -> Network:
        require_namespaces()
        clean_leftovers()
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        record = {"pid": os.getpid(), "started": _start_time(os.getpid())}
        (OWNERS_DIR / f"{self.run_id}.json").write_text(json.dumps(record))
        self.subnet = choose_subnet(self.run_id)
        _run("ip", "link", "delete", self.bridge, check=False)  # a same-named leftover
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        log.info("network %s: bridge %s, %s", self.run_id, self.bridge, self.subnet)
        return self

    def destroy(self) -> None:
        """Remove every namespace, veth and the bridge of this run (idempotent)."""
        for host in list(self.hosts.values()):
            remove_namespace(host.namespace)
        prefix = f"sa-{self.run_id}-"
        for namespace in namespaces():
            if namespace.startswith(prefix):
                remove_namespace(namespace)
        _run("ip", "link", "delete", self.bridge, check=False)
        (OWNERS_DIR / f"{self.run_id}.json").unlink(missing_ok=True)
        self.hosts.clear()
        self._blocked.clear()
        self._throttled.clear()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- hosts -------------------------------------------------------------------------------

    @property
    def gateway(self) -> str:
        """The bridge's own address: where the harness (this process) is on the network."""
        assert self.subnet is not None, "create() the network first"
        return str(self.subnet.network_address + 1)

    def add_host(self, name: str, octet: int) -> Host:
        """A namespace ``sa-<run>-<name>`` with address ``<subnet>.<octet>`` on the bridge."""
        if self.subnet is None:
            raise RuntimeError("create() the network first")
        if not re.fullmatch(r"[a-z0-9]{1,5}", name):
            raise ValueError("a host name is 1-5 lower-case letters or digits")
        if not 2 <= octet <= 254:
            raise ValueError("a host's last octet is 2-254 (1 is the bridge)")
        if name in self.hosts:
            return self.hosts[name]
        namespace = f"sa-{self.run_id}-{name}"
        veth = f"sa{self.run_id}{name}"
        address = str(self.subnet.network_address + octet)
        remove_namespace(namespace)
        _run("ip", "link", "delete", veth, check=False)
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", IFACE, "netns", namespace)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", IFACE)
        _run("ip", "-n", namespace, "link", "set", IFACE, "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        host = Host(name, namespace, address, veth)
        self.hosts[name] = host
        return host

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def command_prefix(self, name: str) -> list[str]:
        """Put before a command line to run it in the host's namespace (it keeps its pid)."""
        return ["nsenter", f"--net={NETNS_DIR / self.hosts[name].namespace}", "--"]

    def namespace_of(self, name: str) -> str:
        return self.hosts[name].namespace

    # -- cuts --------------------------------------------------------------------------------

    def block(self, src: str, dst: str) -> None:
        """Drop every packet ``src`` sends to ``dst`` (one way), until :meth:`unblock`."""
        s, d = self.hosts[src], self.hosts[dst]
        with self._lock:
            _run(
                "ip", "-n", s.namespace, "neigh", "replace", d.address,
                "lladdr", BLACKHOLE_MAC, "dev", IFACE, "nud", "permanent",
            )  # fmt: skip
            self._blocked.add((src, dst))

    def unblock(self, src: str, dst: str) -> None:
        s, d = self.hosts[src], self.hosts[dst]
        with self._lock:
            _run("ip", "-n", s.namespace, "neigh", "del", d.address, "dev", IFACE, check=False)
            self._blocked.discard((src, dst))

    def cut(self, a: str, b: str) -> None:
        """Both directions between ``a`` and ``b``."""
        self.block(a, b)
        self.block(b, a)

    def blocked(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._blocked)

    def throttle(self, name: str, rate_kbit: int, latency_ms: int) -> None:
        """Both directions of the host's link through a token bucket of ``rate_kbit``.

        What does not fit waits in the bucket's queue, up to ``latency_ms`` (delay), and what
        would wait longer is dropped (loss). Outgoing: the namespace's interface; incoming:
        the veth end on the bridge (its egress is the host's ingress).
        """
        host = self.hosts[name]
        burst = max(4096, rate_kbit * 1000 // 8 // 50)  # 20 ms worth, at least a few packets
        args = ["tbf", "rate", f"{rate_kbit}kbit", "burst", str(burst)]
        args += ["latency", f"{latency_ms}ms"]
        with self._lock:
            _run("tc", "-n", host.namespace, "qdisc", "replace", "dev", IFACE, "root", *args)
            _run("tc", "qdisc", "replace", "dev", host.veth, "root", *args)
            self._throttled.add(name)

    def unthrottle(self, name: str) -> None:
        host = self.hosts[name]
        with self._lock:
            _run("tc", "-n", host.namespace, "qdisc", "del", "dev", IFACE, "root", check=False)
            _run("tc", "qdisc", "del", "dev", host.veth, "root", check=False)
            self._throttled.discard(name)

    def throttled(self) -> set[str]:
        with self._lock:
            return set(self._throttled)

    def heal(self) -> None:
        """Remove every cut and throttle."""
        for src, dst in self.blocked():
            self.unblock(src, dst)
        for name in self.throttled():
            self.unthrottle(name)
