"""``pods/<name>/portforward`` for :class:`~rl_lustre.testing.kube.KubeFake`, in both
dialects a real API server speaks over a websocket:

- ``v4.channel.k8s.io`` (one port per connection, ``?ports=N``; each binary message
  starts with its channel byte: 0 data, 1 error; each channel first carries its port as
  two little-endian bytes). This is what :mod:`rl_lustre.kube.portforward` speaks.
- ``SPDY/3.1+portforward.k8s.io``: SPDY/3.1 frames tunnelled through binary messages,
  as ``kubectl port-forward`` sends them since Kubernetes 1.30 (KEP-4006). Each
  forwarded connection is a pair of SPDY streams whose headers name ``streamtype``
  (``error`` or ``data``), ``port`` and ``requestid``; the server replies to each
  ``SYN_STREAM``, pumps bytes between the data stream and the target, and writes a
  connection failure to the error stream. Header blocks are zlib-compressed with the
  SPDY/3 dictionary, one compression context per direction for the whole session.

kubectl's fallback (an ``Upgrade: SPDY/3.1`` POST, for servers without the tunnel) is not
served; kubectl only falls back when the websocket upgrade is refused.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

V4 = "v4.channel.k8s.io"
SPDY_TUNNEL = "SPDY/3.1+portforward.k8s.io"
PROTOCOLS = (SPDY_TUNNEL, V4)

# The zlib dictionary of SPDY/3 header compression (SPDY Protocol draft 3, section
# 2.6.10.1): a protocol constant, kept as data beside this module.
_DICTIONARY = (Path(__file__).with_name("spdy3_dictionary.bin")).read_bytes

_SYN_STREAM, _SYN_REPLY, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _HEADERS, _WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
_FLAG_FIN = 0x01
_MAX_DATA = 64 * 1024

Target = Callable[[int], "tuple[str, int] | None"]


def refused_message(pod: dict[str, Any], port: int) -> str:
    """What the kubelet reports when nothing listens on ``port`` inside the pod."""
    name = pod["metadata"]["name"]
    return (
        f"an error occurred forwarding {port} -> {port}: error forwarding port {port} to pod "
        f"{pod['metadata']['uid']}, uid : failed to connect to localhost:{port} inside namespace "
        f'"{name}": dial tcp4 127.0.0.1:{port}: connect: connection refused'
    )


async def _connect(target: tuple[str, int] | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if target is None:
        raise ConnectionRefusedError("connection refused")
    return await asyncio.open_connection(*target)


async def serve_v4(ws: web.WebSocketResponse, pod: dict[str, Any], port: int, target: Target) -> None:
    """One forwarded connection over ``v4.channel.k8s.io`` (``ws`` already prepared)."""
    from aiohttp import WSMsgType

    prefix = port.to_bytes(2, "little")
    await ws.send_bytes(b"\x00" + prefix)
    await ws.send_bytes(b"\x01" + prefix)
    try:
        reader, writer = await _connect(target(port))
    except OSError:
        await ws.send_bytes(b"\x01" + refused_message(pod, port).encode())
        await ws.close()
        return

    async def upstream() -> None:
        try:
            while data := await reader.read(65536):
                await ws.send_bytes(b"\x00" + data)
        except (ConnectionError, RuntimeError):
            pass
        await ws.close()

    pump = asyncio.get_running_loop().create_task(upstream())
    try:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY and msg.data[:1] == b"\x00" and len(msg.data) > 1:
                writer.write(msg.data[1:])
                await writer.drain()
            elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                break
    except (ConnectionError, RuntimeError):
        pass
    finally:
        pump.cancel()
        writer.close()


class SpdySession:
    """The server side of kubectl's tunnelled SPDY/3.1 port-forward session."""

    def __init__(self, ws: web.WebSocketResponse, pod: dict[str, Any], target: Target) -> None:
        dictionary = _DICTIONARY()
        self.ws = ws
        self.pod = pod
        self.target = target
        self._inflate = zlib.decompressobj(zdict=dictionary)
        self._deflate = zlib.compressobj(zdict=dictionary)
        self._buffer = bytearray()
        self._headers: dict[int, dict[str, str]] = {}
        self._pairs: dict[str, dict[str, int]] = {}
        self._writers: dict[int, asyncio.StreamWriter] = {}
        # What arrived on a data stream before its target connection was open.
        self._early: dict[int, list[tuple[bytes, bool]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._send_lock = asyncio.Lock()

    async def run(self) -> None:
        from aiohttp import WSMsgType

        try:
            async for msg in self.ws:
                if msg.type == WSMsgType.BINARY:
                    self._buffer += msg.data
                    await self._frames()
                elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    break
        except (ConnectionError, RuntimeError):
            pass
        finally:
            for task in list(self._tasks):
                task.cancel()
            for writer in self._writers.values():
                writer.close()

    async def _frames(self) -> None:
        while len(self._buffer) >= 8:
            length = int.from_bytes(self._buffer[5:8], "big")
            if len(self._buffer) < 8 + length:
                return
            head, payload = bytes(self._buffer[:8]), bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = head[4]
            if head[0] & 0x80:
                await self._control(int.from_bytes(head[2:4], "big"), flags, payload)
            else:
                await self._data(int.from_bytes(head[:4], "big") & 0x7FFFFFFF, flags, payload)

    async def _control(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == _SYN_STREAM:
            stream = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            headers = self._read_headers(payload[10:])
            self._headers[stream] = headers
            await self._send(self._control_frame(_SYN_REPLY, 0, stream.to_bytes(4, "big") + self._write_headers({})))
            pair = self._pairs.setdefault(headers.get("requestid", str(stream)), {})
            pair[headers.get("streamtype", "data")] = stream
            if headers.get("streamtype") == "data":
                self._early[stream] = []
            if "data" in pair and "error" in pair:
                task = asyncio.get_running_loop().create_task(self._forward(pair["data"], pair["error"]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        elif kind == _PING:
            await self._send(self._control_frame(_PING, 0, payload))
        elif kind == _RST_STREAM:
            writer = self._writers.pop(int.from_bytes(payload[:4], "big") & 0x7FFFFFFF, None)
            if writer is not None:
                writer.close()
        elif kind == _GOAWAY:
            await self.ws.close()
        elif kind == _HEADERS:
            self._read_headers(payload[4:])  # keeps the decompression context in step
        # SETTINGS and WINDOW_UPDATE: the client does no flow control; nothing to do.

    async def _data(self, stream: int, flags: int, payload: bytes) -> None:
        writer = self._writers.get(stream)
        if writer is None:
            if stream in self._early:
                self._early[stream].append((payload, bool(flags & _FLAG_FIN)))
            return
        if payload:
            writer.write(payload)
            await writer.drain()
        if flags & _FLAG_FIN and writer.can_write_eof():
            writer.write_eof()

    async def _forward(self, data: int, error: int) -> None:
        port = int(self._headers[data].get("port", "0") or 0)
        try:
            reader, writer = await _connect(self.target(port))
        except OSError:
            self._early.pop(data, None)
            await self._send(self._data_frame(error, refused_message(self.pod, port).encode()))
            await self._send(self._data_frame(error, b"", fin=True))
            await self._send(self._data_frame(data, b"", fin=True))
            return
        for payload, fin in self._early.pop(data, []):
            writer.write(payload)
            if fin and writer.can_write_eof():
                writer.write_eof()
        self._writers[data] = writer
        try:
            while chunk := await reader.read(_MAX_DATA):
                await self._send(self._data_frame(data, chunk))
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self._writers.pop(data, None)
            writer.close()
        await self._send(self._data_frame(data, b"", fin=True))
        await self._send(self._data_frame(error, b"", fin=True))

    async def _send(self, frame: bytes) -> None:
        async with self._send_lock:
            if not self.ws.closed:
                await self.ws.send_bytes(frame)

    @staticmethod
    def _control_frame(kind: int, flags: int, payload: bytes) -> bytes:
        return struct.pack(">HHB", 0x8003, kind, flags) + len(payload).to_bytes(3, "big") + payload

    @staticmethod
    def _data_frame(stream: int, data: bytes, *, fin: bool = False) -> bytes:
        flags = _FLAG_FIN if fin else 0
        return stream.to_bytes(4, "big") + bytes([flags]) + len(data).to_bytes(3, "big") + data

    def _read_headers(self, block: bytes) -> dict[str, str]:
        raw = self._inflate.decompress(block)
        count, pos, out = int.from_bytes(raw[:4], "big"), 4, {}
        for _ in range(count):
            size = int.from_bytes(raw[pos : pos + 4], "big")
            name = raw[pos + 4 : pos + 4 + size].decode().lower()
            pos += 4 + size
            size = int.from_bytes(raw[pos : pos + 4], "big")
            out[name] = raw[pos + 4 : pos + 4 + size].decode().split("\x00")[0]
            pos += 4 + size
        return out

    def _write_headers(self, headers: dict[str, str]) -> bytes:
        raw = len(headers).to_bytes(4, "big")
        for name, value in headers.items():
            for part in (name.lower().encode(), value.encode()):
                raw += len(part).to_bytes(4, "big") + part
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
