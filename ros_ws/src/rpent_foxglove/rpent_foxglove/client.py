"""A minimal Foxglove WebSocket client (the protocol over ``websockets``) for tests, the
benchmark and scripted checks: channels as advertised, subscribe, message frames.

Speaks ``foxglove.sdk.v1`` (the Foxglove SDK server) and ``foxglove.websocket.v1``.
Binary message data frames: opcode 0x01, u32 subscription id, u64 log time (ns), payload.
Service calls: request opcode 0x02 (client) and response opcode 0x03 (server), each u32
service id, u32 call id, u32 encoding length, encoding, payload; a failed call comes back
as a ``serviceCallFailure`` JSON message. Assets (a 3D panel's meshes): JSON ``fetchAsset``
{uri, requestId}; binary response opcode 0x04: u32 request id, u8 status (0 ok, 1 error),
u32 error length, the error message (utf-8), then the asset's bytes.
"""
from __future__ import annotations

import asyncio
import collections
import json
import re
import struct
from dataclasses import dataclass
from typing import Callable, Optional

import websockets

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]
MESSAGE_DATA = 0x01
SERVICE_CALL_REQUEST = 0x02
SERVICE_CALL_RESPONSE = 0x03
FETCH_ASSET_RESPONSE = 0x04
# Messages kept for the next collect while a call waits (the oldest go first).
UNREAD_LIMIT = 10_000


@dataclass
class Message:
    topic: str
    log_time: int
    data: bytes
    received: float  # time.time() at arrival


class FoxgloveClient:
    def __init__(self, url: str, max_queue: Optional[int] = 1024,
                 subprotocols: tuple = tuple(SUBPROTOCOLS)):
        """``subprotocols``: those offered, as a viewer offers them (Foxglove Studio 1.x
        offers only foxglove.websocket.v1)."""
        self.url, self.max_queue, self.subprotocols = url, max_queue, list(subprotocols)
        self.ws = None
        self.server_info: dict = {}
        self.channels: dict[int, dict] = {}       # channel id -> advertised channel
        self.services: dict[str, dict] = {}       # name -> advertised service
        self._calls: dict[int, object] = {}       # call id -> its response (bytes or failure)
        self._next_call = 1
        self._assets: dict[int, object] = {}      # request id -> bytes or failure
        self._next_asset = 1
        self._subs: dict[int, int] = {}           # subscription id -> channel id
        self._next_sub = 1
        self._refused: set = set()                # channel ids a subscribe was refused for
        # Messages that came while a call waited for its answer; the next collect gets them.
        self._unread: collections.deque = collections.deque(maxlen=UNREAD_LIMIT)

    async def __aenter__(self):
        self.ws = await websockets.connect(self.url, subprotocols=self.subprotocols,
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
        elif msg.get("op") == "status":
            # foxglove-sdk 0.30.3 now and then refuses a subscribe sent right after a burst
            # of advertisements ("unknown channel"): the channel is there, so ask again.
            found = re.search(r"unknown channel(?: id)?:? (\d+)", msg.get("message", ""),
                              re.IGNORECASE)
            if found and int(found.group(1)) in self.channels:
                self._refused.add(int(found.group(1)))

    async def recv(self, timeout: float) -> Optional[Message]:
        """Next frame: JSON updates the channel table (returns None), data returns a Message."""
        import time

        frame = await asyncio.wait_for(self.ws.recv(), timeout)
        if isinstance(frame, str):
            self._handle_json(frame)
            if self._refused:
                refused, self._refused = self._refused, set()
                await self.subscribe([self.channels[c]["topic"] for c in refused
                                      if c in self.channels])
            return None
        if frame[0] == SERVICE_CALL_RESPONSE:
            _service, call, n = struct.unpack_from("<III", frame, 1)
            self._calls[call] = bytes(frame[13 + n:])
            return None
        if frame[0] == FETCH_ASSET_RESPONSE:
            request, status, n = struct.unpack_from("<IBI", frame, 1)
            self._assets[request] = (bytes(frame[10 + n:]) if status == 0 else
                                     RuntimeError(bytes(frame[10:10 + n]).decode()))
            return None
        if frame[0] != MESSAGE_DATA:
            return None
        sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
        channel = self.channels.get(self._subs.get(sub_id, -1), {})
        return Message(channel.get("topic", ""), log_time, bytes(frame[13:]), time.time())

    async def _receive_until(self, ready: Callable[[], bool], deadline: float,
                             why: Callable[[], str]) -> None:
        """Read frames until ``ready()``; past ``deadline`` (loop time) raise TimeoutError
        with ``why()``."""
        loop = asyncio.get_running_loop()
        while not ready():
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(why())
            try:
                msg = await self.recv(left)
            except asyncio.TimeoutError:
                continue
            if msg is not None:
                self._unread.append(msg)

    @staticmethod
    def _take(answers: dict, key):
        answer = answers.pop(key)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def wait_for_topics(self, topics, timeout: float) -> None:
        await self._receive_until(
            lambda: all(self.by_topic(t) for t in topics),
            asyncio.get_running_loop().time() + timeout,
            lambda: f"topics {topics} not advertised within {timeout} s; have "
                    f"{sorted(c['topic'] for c in self.channels.values())}")

    async def call_service(self, name: str, request: dict, timeout: float) -> dict:
        """Call an advertised JSON service; a failure the server reports raises
        RuntimeError with its message."""
        deadline = asyncio.get_running_loop().time() + timeout
        await self._receive_until(
            lambda: name in self.services, deadline,
            lambda: f"service {name} not advertised within {timeout} s; have "
                    f"{sorted(self.services)}")
        service, call = self.services[name], self._next_call
        self._next_call += 1
        encoding = service["request"]["encoding"].encode()
        await self.ws.send(struct.pack("<BIII", SERVICE_CALL_REQUEST, service["id"], call,
                                       len(encoding)) + encoding + json.dumps(request).encode())
        await self._receive_until(lambda: call in self._calls, deadline,
                                  lambda: f"no response from {name} within {timeout} s")
        return json.loads(self._take(self._calls, call))

    async def fetch_asset(self, uri: str, timeout: float) -> bytes:
        """The asset's bytes, as a 3D panel fetches a mesh; an error the server reports
        raises RuntimeError with its message."""
        answer = (await self.fetch_assets([uri], timeout))[uri]
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def fetch_assets(self, uris, timeout: float) -> dict:
        """Every asset of ``uris`` asked for at once, as a browser's 3D panel asks for a
        robot's meshes: uri -> its bytes, or the RuntimeError the server answered."""
        deadline = asyncio.get_running_loop().time() + timeout
        await self._receive_until(lambda: bool(self.server_info), deadline,
                                  lambda: f"no serverInfo within {timeout} s")
        if "assets" not in self.server_info.get("capabilities", []):
            raise RuntimeError("the server does not offer assets (capabilities "
                               f"{self.server_info.get('capabilities')})")
        requests = {}
        for uri in dict.fromkeys(uris):
            requests[uri] = self._next_asset
            self._next_asset += 1
            await self.ws.send(json.dumps({"op": "fetchAsset", "uri": uri,
                                           "requestId": requests[uri]}))
        await self._receive_until(lambda: all(r in self._assets for r in requests.values()),
                                  deadline,
                                  lambda: f"no answer for some of {len(requests)} assets "
                                          f"within {timeout} s")
        return {uri: self._assets.pop(request) for uri, request in requests.items()}

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
        """Messages received for ``duration`` s, or until ``until(messages)`` is true; those
        that came while a service call or an asset fetch waited come first."""
        loop = asyncio.get_running_loop()
        deadline, out = loop.time() + duration, list(self._unread)
        self._unread.clear()
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
