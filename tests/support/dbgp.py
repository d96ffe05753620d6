"""The IDE side of DBGP, written from the spec for the tests: it listens,
accepts engines, sends commands and checks every packet it reads against
the spec's framing (exact byte length, NULs, the XML declaration, the
namespace, the command and transaction id echoed)."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import time
import xml.etree.ElementTree as ET
from typing import Dict, Iterator, List, Optional

NS = "urn:debugger_protocol_v1"
XDEBUG_NS = "https://xdebug.org/dbgp/xdebug"


def tag(name: str) -> str:
    return f"{{{NS}}}{name}"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: Optional[str]) -> str:
    return base64.b64decode(text or "").decode()


class DBGPError(AssertionError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code


class Engine:
    """One engine's connection, with its init packet read."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout
        self._buffer = b""
        self._txid = 0
        self.streams: List[ET.Element] = []
        self._responses: Dict[str, ET.Element] = {}
        self.init = self.read_packet()
        assert self.init.tag == tag("init"), self.init.tag

    def read_packet(self, timeout: Optional[float] = None) -> ET.Element:
        """The next packet, checked against the framing of DBGP 6.4."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while self._buffer.count(b"\0") < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no packet from the engine")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the engine closed the connection")
            self._buffer += chunk
        length, xml, self._buffer = self._buffer.split(b"\0", 2)
        assert length.isdigit() and int(length) == len(xml), (length, len(xml))
        assert xml.startswith(b'<?xml version="1.0" encoding="UTF-8"?>'), xml[:60]
        return ET.fromstring(xml)

    def closed(self, timeout: float = 5) -> bool:
        """Whether the engine closes the connection (reading what it sends
        meanwhile)."""
        try:
            while True:
                self.read_packet(timeout)
        except EOFError:
            return True
        except (TimeoutError, socket.timeout):
            return False

    def send(self, name: str, *args: str, data: Optional[str] = None) -> str:
        """Send a command; its transaction id."""
        self._txid += 1
        txid = str(self._txid)
        line = " ".join([name, "-i", txid, *args])
        if data is not None:
            line += " -- " + b64(data)
        self.sock.sendall(line.encode() + b"\0")
        return txid

    def response(self, name: str, txid: str, timeout: Optional[float] = None) -> ET.Element:
        """The response to transaction ``txid`` (streams met meanwhile are
        kept in self.streams); raises DBGPError for an error response."""
        while txid not in self._responses:
            packet = self.read_packet(timeout)
            if packet.tag == tag("stream"):
                assert packet.get("encoding") == "base64"
                self.streams.append(packet)
                continue
            assert packet.tag == tag("response"), packet.tag
            self._responses[packet.get("transaction_id", "")] = packet
        packet = self._responses.pop(txid)
        assert packet.get("command") == name, (packet.get("command"), name)
        error = packet.find(tag("error"))
        if error is not None:
            message = error.find(tag("message"))
            raise DBGPError(
                int(error.get("code", "-1")), message.text if message is not None else ""
            )
        return packet

    def command(
        self, name: str, *args: str, data: Optional[str] = None, timeout: Optional[float] = None
    ) -> ET.Element:
        return self.response(name, self.send(name, *args, data=data), timeout)

    def error_code(self, name: str, *args: str, data: Optional[str] = None) -> int:
        return self.error_code_of_sent(name, self.send(name, *args, data=data))

    def error_code_of_sent(self, name: str, txid: str) -> int:
        """The error code of the response to a command already sent."""
        try:
            self.response(name, txid)
        except DBGPError as e:
            return e.code
        raise AssertionError(f"{name} (transaction {txid}) succeeded")

    def stopped_at(self, response: ET.Element) -> int:
        """The line of a break response."""
        assert response.get("status") == "break", response.attrib
        message = response.find(f"{{{XDEBUG_NS}}}message")
        assert message is not None
        return int(message.get("lineno"))

    def close(self) -> None:
        self.sock.close()


class IDE:
    """A listening IDE."""

    def __init__(self, timeout: float = 20) -> None:
        self.timeout = timeout
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]

    def accept(self, timeout: Optional[float] = None) -> Engine:
        self.listener.settimeout(self.timeout if timeout is None else timeout)
        sock, _ = self.listener.accept()
        return Engine(sock, self.timeout)

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def listening(timeout: float = 20) -> Iterator[IDE]:
    ide = IDE(timeout)
    try:
        yield ide
    finally:
        ide.close()


class InThread:
    """Runs a function in a thread, keeping its result or exception."""

    def __init__(self, function, *args) -> None:
        self.result: object = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, args=(function, *args), daemon=True)
        self.thread.start()

    def _run(self, function, *args) -> None:
        try:
            self.result = function(*args)
        except BaseException as e:
            self.error = e

    def join(self, timeout: float = 20) -> object:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the debugged thread did not finish"
        return self.result
