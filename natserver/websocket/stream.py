"""A WebSocket connection as a trio byte stream, so the core serves it as any client.

NATS over WebSocket is the plain NATS protocol carried in binary frames (text frames are read
too), split anywhere: ``receive_some`` returns the payload bytes of whatever frames the chunk
held, all at once; ``send_all`` sends one binary frame per call (the client's writer already
coalesces what is queued into one call). Pings are answered, a close is answered and ends the
stream; a protocol error (an unmasked client frame, a bad opcode...) sends a close frame with
its code and ends the stream. wsproto does the framing and permessage-deflate.
"""

from __future__ import annotations

from typing import cast

import trio
from wsproto.extensions import Extension, PerMessageDeflate
from wsproto.frame_protocol import CloseReason, FrameProtocol, Opcode, ParseFailed

__all__ = ["WebSocketStream"]

READ_SIZE = 65536
# The offer nats-server's answer accepts (websocket.go wsPMCReqHeaderValue).
_COMPRESSION_OFFER = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
_DATA = (Opcode.BINARY, Opcode.TEXT, Opcode.CONTINUATION)


class WebSocketStream(trio.abc.Stream):
    def __init__(self, transport: trio.abc.Stream, compress: bool) -> None:
        self.transport = transport
        extensions: list[Extension] = []
        if compress:
            deflate = PerMessageDeflate(client_no_context_takeover=True, server_no_context_takeover=True)
            deflate.accept(_COMPRESSION_OFFER)
            extensions.append(deflate)
        self._frames = FrameProtocol(client=False, extensions=extensions)
        self._send_lock = trio.StrictFIFOLock()  # the writer task and our pong/close replies
        self._closed = False
        self.socket = getattr(transport, "socket", None)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        frames = self._frames
        while not self._closed:
            data = await self.transport.receive_some(READ_SIZE)
            if not data:
                return b""
            frames.receive_bytes(bytes(data))  # (the same object when it is bytes already)
            out: list[bytes] = []
            replies: list[bytes | bytearray] = []  # (wsproto gives its frames as bytearrays)
            try:
                for frame in frames.received_frames():
                    opcode = frame.opcode
                    # wsproto's payload: bytes (str for a text frame), a CLOSE's (code, reason)
                    if opcode in _DATA:
                        payload = frame.payload
                        out.append(payload.encode() if isinstance(payload, str) else cast(bytes, payload))
                    elif opcode is Opcode.PING:
                        replies.append(frames.pong(cast(bytes, frame.payload)))
                    elif opcode is Opcode.CLOSE:
                        code, reason = cast("tuple[int, str]", frame.payload)
                        replies.append(frames.close(code, reason))
                        self._closed = True
                        break
            except ParseFailed as exc:
                replies.append(frames.close(exc.code, str(exc)))
                self._closed = True
            if replies:
                try:
                    await self._send(b"".join(replies))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._closed = True  # the peer is gone: what it sent is still returned
            data = b"".join(out)
            if data:  # (an empty frame is no end of stream)
                return data
        return b""

    async def send_all(self, data) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the WebSocket is closed")
        await self._send(bytes(self._frames.send_data(bytes(data), fin=True)))

    async def _send(self, frame: bytes) -> None:
        async with self._send_lock:
            await self.transport.send_all(frame)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                with trio.move_on_after(0.5):
                    await self._send(bytes(self._frames.close(CloseReason.NORMAL_CLOSURE)))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        await self.transport.aclose()
