"""A minimal Foxglove WebSocket client (the protocol over ``websockets``) for tests, the
benchmark and scripted checks: channels as advertised, subscribe, message frames.

Speaks ``foxglove.sdk.v1`` (the Foxglove SDK server) and ``foxglove.websocket.v1``.
Binary message data frames: opcode 0x01, u32 subscription id, u64 log time (ns), payload.
Service calls: request opcode 0x02 (client) and response opcode 0x03 (server), each u32
service id, u32 call id, u32 encoding length, encoding, payload; a failed call comes back
as a ``serviceCallFailure`` JSON message.
"""
from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Optional

import websockets

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]
MESSAGE_DATA = 0x01
SERVICE_CALL_REQUEST = 0x02
SERVICE_CALL_RESPONSE = 0x03


@dataclass
class Message:
    topic: str
    log_time: int
    data: bytes
    received: float  # time.time() at arrival


class FoxgloveClient:
    def __init__(self, url: str, max_queue: Optional[int] = 1024):
        self.url, self.max_queue = url, max_queue
        self.ws = None
        self.server_info: dict = {}
        self.channels: dict[int, dict] = {}       # channel id -> advertised channel
        self.services: dict[str, dict] = {}       # name -> advertised service
        self._calls: dict[int, object] = {}       # call id -> its response (bytes or failure)
        self._next_call = 1
        self._subs: dict[int, int] = {}           # subscription id -> channel id
        self._next_sub = 1

    async def __aenter__(self):
        self.ws = await websockets.connect(self.url, subprotocols=SUBPROTOCOLS,
                                           max_size=None, max_queue=self.max_queue)
        return self

    async def __aexit__(self, *exc):
        await self.ws.close()

    def by_topic(self, topic: str) -> Optional[dict]:
        return next((c for c in self.channels.values() if c["topic"] == topic), None)

    def _handle_json(self, text: str) -> None:
        msg = json.loads(text)
        if msg.get("op") == "serverInfo":
            self.server_info = msg
        elif msg.get("op") == "advertise":
            for ch in msg["channels"]:
                self.channels[ch["id"]] = ch
        elif msg.get("op") == "unadvertise":
            for cid in msg["channelIds"]:
                self.channels.pop(cid, None)
        elif msg.get("op") == "advertiseServices":
            for service in msg["services"]:
                self.services[service["name"]] = service
        elif msg.get("op") == "serviceCallFailure":
            self._calls[msg["callId"]] = RuntimeError(msg["message"])

    async def recv(self, timeout: float) -> Optional[Message]:
        """Next frame: JSON updates the channel table (returns None), data returns a Message."""
        import time

        frame = await asyncio.wait_for(self.ws.recv(), timeout)
        if isinstance(frame, str):
            self._handle_json(frame)
            return None
        if frame[0] == SERVICE_CALL_RESPONSE:
            _service, call, n = struct.unpack_from("<III", frame, 1)
            self._calls[call] = bytes(frame[13 + n:])
            return None
        if frame[0] != MESSAGE_DATA:
            return None
        sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
        channel = self.channels.get(self._subs.get(sub_id, -1), {})
        return Message(channel.get("topic", ""), log_time, bytes(frame[13:]), time.time())

    async def wait_for_topics(self, topics, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not all(self.by_topic(t) for t in topics):
            left = deadline - loop.time()
            if left <= 0:
                have = sorted(c["topic"] for c in self.channels.values())
                raise TimeoutError(f"topics {topics} not advertised within {timeout} s; have {have}")
            try:
                await self.recv(left)
            except asyncio.TimeoutError:
                pass

    async def call_service(self, name: str, request: dict, timeout: float) -> dict:
        """Call an advertised JSON service; a failure the server reports raises
        RuntimeError with its message."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while name not in self.services:
            if loop.time() >= deadline:
                raise TimeoutError(f"service {name} not advertised within {timeout} s; have "
                                   f"{sorted(self.services)}")
            try:
                await self.recv(deadline - loop.time())
            except asyncio.TimeoutError:
                pass
        service, call = self.services[name], self._next_call
        self._next_call += 1
        encoding = service["request"]["encoding"].encode()
        await self.ws.send(struct.pack("<BIII", SERVICE_CALL_REQUEST, service["id"], call,
                                       len(encoding)) + encoding + json.dumps(request).encode())
        while call not in self._calls:
            if loop.time() >= deadline:
                raise TimeoutError(f"no response from {name} within {timeout} s")
            try:
                await self.recv(deadline - loop.time())
            except asyncio.TimeoutError:
                pass
        answer = self._calls.pop(call)
        if isinstance(answer, Exception):
            raise answer
        return json.loads(answer)

    async def subscribe(self, topics) -> None:
        subs = []
        for topic in topics:
            ch = self.by_topic(topic)
            if ch is None:
                raise KeyError(f"{topic} is not advertised")
            self._subs[self._next_sub] = ch["id"]
            subs.append({"id": self._next_sub, "channelId": ch["id"]})
            self._next_sub += 1
        await self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))

    async def collect(self, duration: float, until=None) -> list[Message]:
        """Messages received for ``duration`` s, or until ``until(messages)`` is true."""
        loop = asyncio.get_running_loop()
        deadline, out = loop.time() + duration, []
        while loop.time() < deadline and not (until and until(out)):
            try:
                msg = await self.recv(deadline - loop.time())
            except asyncio.TimeoutError:
                break
            if msg is not None:
                out.append(msg)
        return out


def decoder_for(channel: dict):
    """A decoder (bytes -> object) built only from the channel's advertised ros2msg schema."""
    from mcap_ros2._dynamic import generate_dynamic

    if channel["encoding"] != "cdr" or channel.get("schemaEncoding") != "ros2msg":
        raise ValueError(f"{channel['topic']} is {channel['encoding']}/"
                         f"{channel.get('schemaEncoding')}, not cdr/ros2msg")
    return generate_dynamic(channel["schemaName"], channel["schema"])[channel["schemaName"]]
