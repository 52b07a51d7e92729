"""A small threaded TCP proxy owned by the tests, for injecting network failures.

It listens on a free loopback port and, per accepted connection, either forwards to an
upstream (a real redis-server, or a port where nothing listens), swallows everything
and never answers ("blackhole"), or forwards each client chunk after a delay
("delay"). It counts accepted connections, bytes, and the RESP commands clients sent,
so a test can prove that no network traffic happened (breaker OPEN) or that a call was
not retried (one connection per call).

The mode is read when a connection is accepted; `drop_connections` closes the live ones
so that the next call reconnects under a new mode.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal

from tests.support.redis_server import free_port

Mode = Literal["forward", "blackhole", "delay"]
_CHUNK = 65_536


class RespCommandCounter:
    """Splits a client's byte stream into RESP commands (arrays of bulk strings)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The upper-cased names of the commands completed by ``data``."""
        self._buffer += data
        names: list[bytes] = []
        while True:
            parsed = _parse_command(self._buffer)
            if parsed is None:
                return names
            name, consumed = parsed
            names.append(name)
            self._buffer = self._buffer[consumed:]


def _parse_command(buffer: bytes) -> tuple[bytes, int] | None:
    """(command name, bytes consumed) of the first complete command, or None."""
    if not buffer.startswith(b"*"):
        end = buffer.find(b"\r\n")  # an inline command: the whole line
        return None if end < 0 else (buffer[:end].split(b" ", 1)[0].upper(), end + 2)
    end = buffer.find(b"\r\n")
    if end < 0:
        return None
    count = int(buffer[1:end])
    position = end + 2
    words: list[bytes] = []
    for _ in range(count):
        end = buffer.find(b"\r\n", position)
        if end < 0:
            return None
        length = int(buffer[position + 1 : end])
        start = end + 2
        if len(buffer) < start + length + 2:
            return None
        words.append(buffer[start : start + length])
        position = start + length + 2
    name = b" ".join(words[:2]).upper() if words[:1] == [b"SCRIPT"] else words[0].upper()
    return name, position


class TcpProxy:
    """A loopback TCP proxy in front of ``upstream_port``.

    Args:
        upstream_port: where "forward" and "delay" connections go (on 127.0.0.1); a
            port nothing listens on makes every forwarded connection close at once.
        mode: "forward", "blackhole" or "delay".
        delay_seconds: for "delay", how long each client chunk waits before it is sent.
    """

    def __init__(
        self, upstream_port: int, mode: Mode = "forward", *, delay_seconds: float = 0.0
    ) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.delay_seconds = delay_seconds
        self._mode: Mode = mode
        self._lock = threading.Lock()
        self._accepted = 0
        self._upstream_failures = 0
        self._bytes_from_clients = 0
        self._bytes_to_clients = 0
        self._commands: list[bytes] = []
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()

    # -- control ---------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(512)
        self._listener = listener
        self._stopping.clear()
        self._spawn(self._accept_loop, listener)
        return self

    def stop(self) -> None:
        """Stop listening, close every connection and join every thread."""
        self._stopping.set()
        if self._listener is not None:
            _close(self._listener)
            self._listener = None
        self.drop_connections()
        with self._lock:
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout=5)

    def drop_connections(self) -> None:
        """Close every live connection (clients then see EOF or a reset)."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- counters (snapshots, safe to read from any thread) ----------------------

    @property
    def accepted(self) -> int:
        """Client connections accepted so far."""
        with self._lock:
            return self._accepted

    @property
    def upstream_failures(self) -> int:
        """Forwarded connections whose upstream could not be reached."""
        with self._lock:
            return self._upstream_failures

    @property
    def bytes_from_clients(self) -> int:
        with self._lock:
            return self._bytes_from_clients

    @property
    def bytes_to_clients(self) -> int:
        with self._lock:
            return self._bytes_to_clients

    @property
    def commands(self) -> list[bytes]:
        """Names of the complete commands clients sent, in arrival order (``SCRIPT LOAD``
        is named with its subcommand)."""
        with self._lock:
            return list(self._commands)

    def reset_counters(self) -> None:
        with self._lock:
            self._accepted = self._upstream_failures = 0
            self._bytes_from_clients = self._bytes_to_clients = 0
            self._commands.clear()

    # -- the threads -----------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._stopping.is_set():
                return False
            self._sockets.add(sock)
            return True

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed by stop()
            with self._lock:
                self._accepted += 1
                mode = self._mode
            if not self._track(client):
                _close(client)
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if mode == "blackhole":
                self._spawn(self._swallow, client)
            else:
                self._spawn(self._connect_upstream, client, mode)

    def _connect_upstream(self, client: socket.socket, mode: Mode) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
        except OSError:
            with self._lock:
                self._upstream_failures += 1
            _close(client)
            return
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self._track(upstream):
            _close(upstream)
            _close(client)
            return
        delay = self.delay_seconds if mode == "delay" else 0.0
        self._spawn(self._pump, upstream, client, 0.0, False)
        self._pump(client, upstream, delay, True)

    def _swallow(self, client: socket.socket) -> None:
        self._pump(client, None, 0.0, True)

    def _pump(
        self, source: socket.socket, sink: socket.socket | None, delay: float, from_client: bool
    ) -> None:
        counter = RespCommandCounter() if from_client else None
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                with self._lock:
                    if from_client:
                        self._bytes_from_clients += len(data)
                    else:
                        self._bytes_to_clients += len(data)
                    if counter is not None:
                        self._commands.extend(counter.feed(data))
                if sink is not None:
                    if delay:
                        time.sleep(delay)
                    sink.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            _close(source)
            if sink is not None:
                _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
