"""A TCP proxy whose link can be cut, for outages of a system that must keep its data (the Tansu broker
keeps topics in memory only, so stopping it would lose them).

    proxy = TcpProxy(("127.0.0.1", broker_port)).start()
    proxy.port          # what clients connect to (the broker advertises it)
    proxy.cut()         # every connection is closed and new ones are refused: "the broker is down"
    proxy.restore()     # it accepts connections again

While cut, nothing listens on the port, so clients see "connection refused", as with a stopped server.
"""
from __future__ import annotations

import socket
import threading
from typing import List, Optional, Tuple

from tests.support.net import free_port


class TcpProxy:
    def __init__(self, target: Tuple[str, int], port: Optional[int] = None):
        self.target = target
        self.port = port or free_port()
        self._listener: Optional[socket.socket] = None
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self.cuts = 0

    def start(self) -> "TcpProxy":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True, name=f"proxy-{self.port}").start()
        return self

    @property
    def up(self) -> bool:
        return self._listener is not None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return   # cut: the listener was closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:   # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._lock:
            for s in (src, dst):
                if s in self._conns:
                    self._conns.remove(s)

    def cut(self) -> None:
        """Close every connection and stop listening."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        self.cuts += 1
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)   # wakes the accept() of the thread
            except OSError:
                pass
            listener.close()
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        if self._listener is None:
            self.start()

    stop = cut
