"""The bridge's second port: the ``foxglove.websocket.v1`` subprotocol, for the viewers the
Foxglove SDK server refuses (it speaks only ``foxglove.sdk.v1``): Foxglove Studio 1.x
builds and other clients written for ``foxglove_bridge``.

It carries what the SDK port carries, from the same bridge core: every channel (``cdr``
with its ``ros2msg`` schema), the latched topics' history for a viewer that subscribes
later, and the allow-listed services. It does not serve assets (the ``foxglove-websocket``
server has no ``fetchAsset``), so such a viewer shows the arm's frames but not its meshes.

The server runs on an asyncio loop of its own thread; the bridge's sender thread hands it
messages through a bounded queue that drops the oldest, so a slow viewer on this port can
delay other viewers on this port but never the SDK port or the robot.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import warnings
from typing import Callable, Optional

# foxglove-websocket 0.1.4 is written against websockets' legacy server, which websockets
# keeps but marks deprecated; the warning says nothing a user could act on.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from foxglove_websocket.server import (FoxgloveServer, FoxgloveServerListener,
                                           ServiceCallRequestHeader, ServiceCallResponseHeader)
    from foxglove_websocket.types import BinaryOpcode, ClientBinaryOpcode, StatusLevel

START_TIMEOUT = 10.0  # s
# The package's own logger prints every connection and subscription; warnings and errors
# are what a bridge's output should show.
_LOG = logging.getLogger("rpent_foxglove.legacy")
_LOG.setLevel(logging.WARNING)


class _Server(FoxgloveServer):
    """foxglove-websocket's server, plus what the SDK server does and it does not: a late
    subscriber of a latched channel gets its history, and a failed service call is answered
    with ``serviceCallFailure`` instead of closing the connection."""

    def __init__(self, owner: "LegacyServer", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._owner = owner

    async def _handle_client_text_message(self, client, message):
        before = dict(client.subscriptions)
        await super()._handle_client_text_message(client, message)
        if message.get("op") != "subscribe":
            return
        for sub_id, chan_id in client.subscriptions.items():
            if sub_id not in before:
                for payload, stamp in self._owner.history(chan_id):
                    await self._send_message_data(client.connection, subscription=sub_id,
                                                  timestamp=stamp, payload=payload)

    async def _handle_client_binary_message(self, client, message: bytes) -> None:
        if len(message) < ServiceCallRequestHeader.size or \
                message[0] != ClientBinaryOpcode.SERVICE_CALL_REQUEST:
            await super()._handle_client_binary_message(client, message)
            return
        _, service_id, call_id, n = ServiceCallRequestHeader.unpack_from(message)
        encoding = message[ServiceCallRequestHeader.size:ServiceCallRequestHeader.size + n]
        payload = bytes(message[ServiceCallRequestHeader.size + n:])
        handler = self._owner.service_handler(service_id)
        if handler is None:
            await self._send_status(client.connection, StatusLevel.ERROR,
                                    f"Unknown service {service_id}")
            return
        try:
            # A ROS service call blocks for up to its timeout: never on the loop.
            response = await asyncio.get_running_loop().run_in_executor(None, handler, payload)
        except Exception as err:  # noqa: BLE001 - the caller is told, the bridge goes on
            await self._send_json(client.connection, {
                "op": "serviceCallFailure", "serviceId": service_id, "callId": call_id,
                "message": str(err)})
            return
        header = ServiceCallResponseHeader.pack(BinaryOpcode.SERVICE_CALL_RESPONSE, service_id,
                                                call_id, n)
        try:
            await client.connection.send([header, encoding, response])
        except Exception:  # noqa: BLE001 - the viewer went away meanwhile
            pass


class _Subscriptions(FoxgloveServerListener):
    def __init__(self):
        self.channels: set = set()

    def on_subscribe(self, server, channel_id) -> None:
        self.channels.add(channel_id)

    def on_unsubscribe(self, server, channel_id) -> None:
        self.channels.discard(channel_id)


class LegacyServer:
    """A ``foxglove.websocket.v1`` server on its own thread; every method may be called
    from any thread. ``history(channel id)``: a latched channel's kept messages, as
    (payload, stamp) oldest first, for a client that subscribes later (the bridge keeps
    them once for both ports)."""

    def __init__(self, host: str, port: int, name: str,
                 history: Callable[[int], list], queue_size: int = 256):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="foxglove-v1",
                                        daemon=True)
        self._thread.start()
        self._subscriptions = _Subscriptions()
        self.history = history
        self._handlers: dict = {}  # service id -> handler(request bytes) -> response bytes
        self._lock = threading.Lock()
        self._queue_size = queue_size
        self.dropped = 0
        try:
            self._server, self.port = self._call(self._start(host, port, name), START_TIMEOUT)
        except BaseException:
            self._stop_loop()
            raise

    async def _start(self, host: str, port: int, name: str):
        server = _Server(self, host, port, name, capabilities=["services"],
                         supported_encodings=["json"], logger=_LOG)
        server.set_listener(self._subscriptions)
        server.start()
        # The package's server reports a port it cannot bind only by ending its task.
        waiting = asyncio.ensure_future(server.wait_opened())
        await asyncio.wait({waiting, server._task}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            waiting.cancel()
            server._task.result()
            raise OSError("the foxglove.websocket.v1 server ended while starting")
        opened = waiting.result()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._sender = asyncio.ensure_future(self._send_loop(server))
        return server, opened.sockets[0].getsockname()[1]

    def _call(self, coroutine, timeout: float = 5.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    # --- what the bridge offers -------------------------------------------------------------
    def add_channel(self, topic: str, schema_name: str, definition: str) -> int:
        return self._call(self._server.add_channel({
            "topic": topic, "encoding": "cdr", "schemaName": schema_name,
            "schema": definition, "schemaEncoding": "ros2msg"}))

    def add_service(self, name: str, type_name: str, request_schema: dict,
                    response_schema: dict, handler: Callable[[bytes], bytes]) -> None:
        def part(which: str, schema: dict) -> dict:
            return {"encoding": "json", "schemaName": f"{type_name}_{which}",
                    "schemaEncoding": "jsonschema", "schema": json.dumps(schema)}

        service_id = self._call(self._server.add_service({
            "name": name, "type": type_name, "request": part("Request", request_schema),
            "response": part("Response", response_schema),
            "requestSchema": json.dumps(request_schema),
            "responseSchema": json.dumps(response_schema)}))
        with self._lock:
            self._handlers[service_id] = handler

    def service_handler(self, service_id: int) -> Optional[Callable[[bytes], bytes]]:
        with self._lock:
            return self._handlers.get(service_id)

    # --- data path ----------------------------------------------------------------------------
    def wants(self, channel_id: int) -> bool:
        """Whether a client is subscribed to this channel."""
        return channel_id in self._subscriptions.channels

    def publish(self, channel_id: int, stamp_ns: int, payload: bytes) -> None:
        if self.wants(channel_id):
            self._loop.call_soon_threadsafe(self._enqueue, (channel_id, stamp_ns, payload))

    def _enqueue(self, item) -> None:
        if self._queue.qsize() >= self._queue_size:
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(item)

    async def _send_loop(self, server) -> None:
        while True:
            channel_id, stamp, payload = await self._queue.get()
            await server.send_message(channel_id, stamp, payload)

    # --- shutdown -------------------------------------------------------------------------------
    def close(self) -> None:
        async def stop():
            self._sender.cancel()
            self._server.close()
            await self._server.wait_closed()
        try:
            self._call(stop())
        except Exception:  # noqa: BLE001 - closing what may be half gone
            pass
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
