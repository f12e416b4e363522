"""A loopback HTTP server written on raw sockets, for tests of clients facing a server
that misbehaves in ways a real framework would not let one write: a body that never
ends, an answer dripped a byte at a time. The server reads each request's head, then
hands the connection to the test's ``answer``; a client hanging up is what such tests
want, so its errors are ignored."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = Callable[[socket.socket, threading.Event], None]
"""Writes the answer on a connection whose request head was read; the event is set when
the test is done with the server (stop sending, stop waiting)."""


@contextmanager
def raw_server(answer: Answer, accepted: list[float] | None = None) -> Iterator[str]:
    """A server on 127.0.0.1 answering each connection with ``answer`` in a thread of its
    own; yields its URL. ``accepted`` gets the time each connection was accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(5)
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)  # a short body comes along or is ignored
            answer(conn, stop)

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            if accepted is not None:
                accepted.append(time.monotonic())
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
