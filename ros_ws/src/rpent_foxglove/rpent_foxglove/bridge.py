"""Foxglove WebSocket bridge core: ROS topics in as serialized CDR, Foxglove channels out.

No rclpy here; the node feeds :meth:`FoxgloveBridge.on_message` from its subscriptions.

* Passthrough: a ROS topic becomes a channel with message encoding ``cdr`` and a
  ``ros2msg`` schema (the full definition with dependencies), so the bytes DDS delivered
  go to the client untouched and Foxglove decodes them itself. A topic may instead get a
  ``transform`` (the node uses it to send camera images as JPEG CompressedImage).
* Services: allow-listed ROS services are offered to viewers as Foxglove services with
  JSON requests and responses (a viewer's Call Service panel), e.g. ``operator/answer``.
* Latched topics (every publisher transient local, e.g. task_status, agent/events) keep
  their history in the bridge too, and a viewer that subscribes later is sent it, as a
  late ROS subscriber would be: a dashboard opened while the robot idles still shows the
  task and the whole agent log.
* Allow-list and per-topic rate limits are decided in the ROS callback, before anything
  is copied or queued.
* The callback only appends to a bounded drop-oldest queue; one sender thread does the
  transforms and hands messages to the SDK, whose per-client backlog
  (``message_backlog_size``) again drops the oldest for a client that reads too slowly. So
  neither a slow client nor a slow transform can hold up the ROS executor, let alone the
  robot: the robot's publishers never wait on the bridge.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import foxglove
from foxglove import MessageSchema, Schema, Service, ServiceSchema
from foxglove.websocket import Capability, ServerListener

from rpent_bag.dropqueue import DropOldestQueue


class RateLimiter:
    """At most ``max_hz`` messages per second on average (0 = unlimited)."""

    def __init__(self, max_hz: float):
        if max_hz < 0:
            raise ValueError(f"rate limit must be >= 0 Hz, got {max_hz}")
        self.period = 1.0 / max_hz if max_hz > 0 else 0.0
        self._next = 0.0

    def allow(self, now: float) -> bool:
        if not self.period:
            return True
        if now < self._next:
            return False
        # Keep the long-run rate at the limit even when arrivals jitter around the period.
        self._next = max(self._next + self.period, now - self.period / 2)
        return True


@dataclass
class TopicStats:
    received: int = 0
    rate_limited: int = 0
    no_subscriber: int = 0
    sent: int = 0
    errors: int = 0


class LatchedChannel:
    """A channel that keeps its last ``depth`` messages for viewers that subscribe later."""

    def __init__(self, channel, depth: int):
        self.channel = channel
        self._history: deque = deque(maxlen=depth)
        self._lock = threading.Lock()

    def log(self, msg, log_time: int) -> None:
        with self._lock:
            self._history.append((msg, log_time))
            self.channel.log(msg, log_time=log_time)

    def replay(self, sink_id: int) -> None:
        with self._lock:
            for msg, log_time in self._history:
                self.channel.log(msg, log_time=log_time, sink_id=sink_id)


class _LateJoiners(ServerListener):
    def __init__(self):
        self.latched: dict[int, LatchedChannel] = {}   # by channel id

    def on_subscribe(self, client, channel) -> None:
        latched = self.latched.get(channel.id)
        if latched is not None:
            # The SDK numbers a client's sink from the process's sink counter; the bridge
            # opens no other sink (no MCAP file), so the client id is that sink id.
            latched.replay(sink_id=client.id)


@dataclass
class _Route:
    channel: object
    limiter: RateLimiter
    transform: Optional[Callable[[bytes], bytes]]
    latched: Optional[LatchedChannel] = None
    stats: TopicStats = field(default_factory=TopicStats)
    derived: list = field(default_factory=list)   # callables(stamp_ns, data) on the sender


class FoxgloveBridge:
    def __init__(self, host: str = "127.0.0.1", port: int = 8765, queue_size: int = 64,
                 client_backlog: int = 64, name: str = "rpent"):
        self.context = foxglove.Context()
        self._late_joiners = _LateJoiners()
        self.server = foxglove.start_server(
            name=name, host=host, port=port, context=self.context,
            message_backlog_size=client_backlog, capabilities=[Capability.Services],
            supported_encodings=["json"], server_listener=self._late_joiners)
        self._queue = DropOldestQueue(queue_size)
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self.send_latency_s: list = []  # callback -> handed to the SDK, last 1000
        self._thread = threading.Thread(target=self._run, name="foxglove-sender", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.server.port

    # --- channels -------------------------------------------------------------------------
    def cdr_channel(self, topic: str, schema_name: str, definition: str):
        return foxglove.Channel(
            topic, message_encoding="cdr", context=self.context,
            schema=foxglove.Schema(name=schema_name, encoding="ros2msg",
                                   data=definition.encode()))

    def latch(self, channel, depth: int) -> LatchedChannel:
        """Make ``channel`` keep its last ``depth`` messages for viewers that join later;
        log through the returned object."""
        latched = LatchedChannel(channel, depth)
        self._late_joiners.latched[channel.id()] = latched
        return latched

    def add_ros_topic(self, topic: str, schema_name: str, definition: str, max_hz: float = 0.0,
                      transform: Optional[Callable[[bytes], bytes]] = None,
                      channel_topic: Optional[str] = None, latched_depth: int = 0) -> None:
        """Advertise a ``cdr``/``ros2msg`` channel fed by ROS topic ``topic``.

        With ``transform``, ``schema_name``/``definition`` describe the transformed message
        and the channel is advertised as ``channel_topic``. With ``latched_depth``, the
        channel keeps that many messages for viewers that subscribe later.
        """
        channel = self.cdr_channel(channel_topic or topic, schema_name, definition)
        latched = self.latch(channel, latched_depth) if latched_depth else None
        with self._lock:
            self._routes[topic] = _Route(channel, RateLimiter(max_hz), transform, latched)

    def add_derived(self, topic: str, handler: Callable[[int, bytes], None],
                    wanted: Callable[[], bool]) -> None:
        """Also run ``handler(stamp_ns, data)`` (on the sender thread) for ``topic``'s
        messages while ``wanted()``; the topic must have been added."""
        with self._lock:
            self._routes[topic].derived.append((handler, wanted))

    def add_service(self, name: str, type_name: str, request_schema: dict,
                    response_schema: dict, handler: Callable[[bytes], bytes]) -> None:
        """Offer service ``name``: ``handler(JSON request) -> JSON response`` runs on the
        server's thread; an exception reaches the caller as the call's failure message."""
        def schema(part: str, body: dict) -> MessageSchema:
            return MessageSchema(encoding="json", schema=Schema(
                name=f"{type_name}_{part}", encoding="jsonschema",
                data=json.dumps(body).encode()))

        self.server.add_services([Service(
            name, schema=ServiceSchema(type_name, request=schema("Request", request_schema),
                                       response=schema("Response", response_schema)),
            handler=lambda request: handler(request.payload))])

    def has_topic(self, topic: str) -> bool:
        return topic in self._routes

    # --- data path ------------------------------------------------------------------------
    def on_message(self, topic: str, stamp_ns: int, data: bytes) -> None:
        """ROS callback side: decide, enqueue, return. Never blocks."""
        route = self._routes.get(topic)
        if route is None:
            return
        route.stats.received += 1
        # A latched topic's history must be complete for whoever subscribes later.
        wanted = (route.latched is not None or route.channel.has_sinks()
                  or any(w() for _, w in route.derived))
        if not wanted:
            route.stats.no_subscriber += 1
            return
        if not route.limiter.allow(time.monotonic()):
            route.stats.rate_limited += 1
            return
        self._queue.put((route, stamp_ns, data, time.monotonic()))

    def _run(self) -> None:
        while True:
            item = self._queue.get(timeout=0.5)
            if item is None:
                if self._queue.closed:
                    return
                continue
            route, stamp, data, queued_at = item
            try:
                sinks = route.channel.has_sinks()
                if route.latched is not None or sinks:
                    payload = route.transform(data) if route.transform else data
                    (route.latched or route.channel).log(payload, log_time=stamp)
                    route.stats.sent += sinks
                for handler, wanted in route.derived:
                    if wanted():
                        handler(stamp, data)
            except Exception:  # one undecodable message must not stop the bridge
                route.stats.errors += 1
            self.send_latency_s.append(time.monotonic() - queued_at)
            if len(self.send_latency_s) > 1000:
                del self.send_latency_s[:500]

    # --- introspection / shutdown ---------------------------------------------------------
    @property
    def dropped(self) -> int:
        """Messages the sender queue dropped because the sender fell behind."""
        return self._queue.dropped

    def stats(self) -> dict:
        return {t: r.stats for t, r in self._routes.items()}

    def close(self) -> None:
        self._queue.close()
        self._thread.join(5)
        self.server.stop()
