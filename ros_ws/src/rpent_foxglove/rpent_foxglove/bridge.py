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
* Robot meshes (:class:`MeshAssets`): a browser viewer cannot read the ``file://`` mesh URIs a
  robot's ``robot_description`` names; its 3D panel fetches only ``package://`` URIs from the
  server (the protocol's ``fetchAsset``, ``assets`` capability). The node's transform of a
  description topic therefore sends viewers the URDF with each local ``file://`` URI as
  ``package://rpent_assets/<absolute path>``, which this server answers; ROS subscribers keep
  the original. Genuine ``package://<pkg>/...`` URIs are answered from the package's share
  directory (``ament_index_python``, where installed). Nothing else is served.
"""
from __future__ import annotations

import html
import json
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional
from urllib.parse import quote, unquote, urlsplit

import foxglove
from foxglove import MessageSchema, Schema, Service, ServiceSchema
from foxglove.websocket import Capability, ServerListener

from rpent_bag.dropqueue import DropOldestQueue
from rpent_bag.embed import FILE_URI, local_path

try:
    from ament_index_python.packages import get_package_share_directory
except ImportError:  # no ROS install: file:// meshes are still served, package:// ones are not
    get_package_share_directory = None

ASSET_PACKAGE = "rpent_assets"
# What a 3D panel loads for a URDF: meshes and the textures and material files they name.
# The official foxglove_bridge's default asset allow-list, plus Collada's .tga/.bmp textures
# and glTF's .bin buffers.
ASSET_EXTENSIONS = frozenset({
    ".dae", ".fbx", ".glb", ".gltf", ".bin", ".obj", ".mtl", ".stl",
    ".png", ".jpg", ".jpeg", ".tga", ".bmp", ".tif", ".tiff", ".webp"})
# A viewer may also load a URDF itself from a package (3D panel: Add URDF, package:// URL).
PACKAGE_EXTENSIONS = ASSET_EXTENSIONS | {".urdf"}
_MAX_LOGGED = 1000


class AssetError(Exception):
    """Why a viewer's asset request is refused; the viewer is sent this message."""


def asset_uri(path: str) -> str:
    """The URI a viewer fetches the local file ``path`` (absolute) with."""
    return f"package://{ASSET_PACKAGE}{quote(path)}"


def _within(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


class MeshAssets:
    """The files a viewer may fetch, and the URDF rewrite that names them.

    Served: (a) every local file a forwarded description names; (b) files with a mesh,
    texture or material extension under the directory of such a file: Collada and OBJ
    meshes name their textures and .mtl files relative to themselves, usually beside them
    or in a subfolder, and the viewer fetches them as URIs resolved against the mesh's
    package:// URI. Staying below the mesh's own directory and limiting the extensions
    keeps everything else on the machine (sources, keys, other directories' images) out of
    reach; textures a mesh names in a sibling folder (``../textures``) are refused, and
    the refusal is logged. (c) Genuine ``package://<pkg>/<path>`` URIs inside the
    package's share directory, for the same extensions plus .urdf. ``..`` is refused.
    """

    def __init__(self, warn: Callable[[str], None] = _stderr):
        self._warn = warn
        self._files: set = set()   # real paths named by descriptions
        self._roots: set = set()   # their directories
        self._logged: set = set()
        self._lock = threading.Lock()

    def rewrite(self, urdf: str, source: str = "robot_description") -> str:
        """``urdf`` with every local ``file://`` URI in a ``filename`` attribute as
        :func:`asset_uri`; those files become servable."""
        named = []

        def swap(match) -> str:
            path = local_path(html.unescape(match.group(3)))
            if path is None:
                return match.group(0)
            named.append(path)
            quote_char = match.group(2)
            return f"{match.group(1)}{quote_char}{asset_uri(path)}{quote_char}"

        text = FILE_URI.sub(swap, urdf)
        with self._lock:
            for path in named:
                real = os.path.realpath(path)
                self._files.add(real)
                self._roots.add(os.path.dirname(real))
        for path in named:
            if not os.path.isfile(path):
                self._warn_once(("missing", path),
                                f"{source} names {path}, which is not a file on this machine: "
                                "viewers show that link without its mesh. Run the bridge on "
                                "the machine that has the robot's meshes.")
        return text

    def fetch(self, uri: str) -> bytes:
        """The SDK's asset handler: the bytes of ``uri``, or :class:`AssetError` with the
        reason, which the viewer is sent and which is logged once per URI."""
        try:
            path = self._resolve(uri)
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as err:
                raise AssetError(f"cannot read {path}: {err.strerror}; the file must exist "
                                 "on the bridge's machine and be readable by it") from None
        except AssetError as err:
            self._warn_once(("refused", uri), f"asset {uri} not sent to a viewer: {err}")
            raise

    def _resolve(self, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme != "package" or not parts.netloc or parts.query or parts.fragment:
            raise AssetError("only package://<package>/<path> URIs are served")
        path = unquote(parts.path)
        if ".." in path.split("/"):
            raise AssetError("'..' is not allowed in an asset path")
        if parts.netloc == ASSET_PACKAGE:
            return self._named(path)
        return _package_file(parts.netloc, path)

    def _named(self, path: str) -> str:
        real = os.path.realpath(path) if path.startswith("/") else ""
        with self._lock:
            named = real in self._files
            beside = (os.path.splitext(real)[1].lower() in ASSET_EXTENSIONS
                      and any(_within(real, root) for root in self._roots))
        if not (named or beside):
            raise AssetError(
                f"{path or '(no path)'} is not served: only files a robot_description names "
                "and mesh, texture or material files below their directories are. Name the "
                "file in the robot's URDF, or place it beside the mesh that uses it.")
        return real

    def _warn_once(self, key, text: str) -> None:
        # Bounded: a client asking for ever new URIs must not grow the bridge's memory.
        with self._lock:
            if key in self._logged or len(self._logged) >= _MAX_LOGGED:
                return
            self._logged.add(key)
        self._warn(text)


def _package_file(package: str, path: str) -> str:
    if get_package_share_directory is None:
        raise AssetError(f"cannot resolve package://{package}: ament_index_python is not "
                         "installed here. Source a ROS 2 installation before starting the "
                         "bridge, or have the robot publish file:// (or relative) mesh paths.")
    if os.path.splitext(path)[1].lower() not in PACKAGE_EXTENSIONS:
        raise AssetError(f"package://{package}{path} is not served: only mesh, texture, "
                         "material and URDF files of a package are")
    try:
        share = os.path.realpath(get_package_share_directory(package, print_warning=False))
    except (LookupError, ValueError):
        raise AssetError(f"package '{package}' is not in the ament index here; source the "
                         "workspace that installs it before starting the bridge") from None
    real = os.path.realpath(os.path.join(share, path.lstrip("/")))
    if not _within(real, share):
        raise AssetError(f"{path} leads out of package '{package}'")
    return real


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

    def history(self) -> list:
        """The kept messages, (msg, log_time) oldest first."""
        with self._lock:
            return list(self._history)

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
    legacy_id: Optional[int] = None  # the channel's id on the foxglove.websocket.v1 port

    def wanted(self, legacy) -> bool:
        """Whether a message goes anywhere: a viewer, or a latched history."""
        return self.latched is not None or self.channel.has_sinks() or (
            legacy is not None and legacy.wants(self.legacy_id))


class FoxgloveBridge:
    """``legacy_port``: also serve ``foxglove.websocket.v1`` there (0: any free port;
    None: not at all), see :mod:`rpent_foxglove.legacy`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8765, queue_size: int = 64,
                 client_backlog: int = 64, name: str = "rpent",
                 warn: Callable[[str], None] = _stderr, legacy_port: Optional[int] = None):
        self.context = foxglove.Context()
        self._late_joiners = _LateJoiners()
        self.assets = MeshAssets(warn)
        # With an asset handler the SDK advertises the "assets" capability itself.
        self.server = foxglove.start_server(
            name=name, host=host, port=port, context=self.context,
            message_backlog_size=client_backlog, capabilities=[Capability.Services],
            supported_encodings=["json"], server_listener=self._late_joiners,
            asset_handler=self.assets.fetch)
        self.legacy = None
        if legacy_port is not None:
            from .legacy import LegacyServer

            try:
                self.legacy = LegacyServer(host, legacy_port, name, self._legacy_history)
            except BaseException:
                self.server.stop()
                raise
        self._queue = DropOldestQueue(queue_size)
        self._routes: dict[str, _Route] = {}
        self._legacy_latched: dict[int, LatchedChannel] = {}  # by channel id on that port
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
        legacy_id = None if self.legacy is None else self.legacy.add_channel(
            channel_topic or topic, schema_name, definition)
        with self._lock:
            if latched is not None and legacy_id is not None:
                self._legacy_latched[legacy_id] = latched
            self._routes[topic] = _Route(channel, RateLimiter(max_hz), transform, latched,
                                         legacy_id=legacy_id)

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
        if self.legacy is not None:
            self.legacy.add_service(name, type_name, request_schema, response_schema, handler)

    def _legacy_history(self, channel_id: int) -> list:
        with self._lock:
            latched = self._legacy_latched.get(channel_id)
        return latched.history() if latched is not None else []

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
        if not route.wanted(self.legacy):
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
                if route.wanted(self.legacy):
                    payload = route.transform(data) if route.transform else data
                    (route.latched or route.channel).log(payload, log_time=stamp)
                    route.stats.sent += sinks
                    if self.legacy is not None:
                        self.legacy.publish(route.legacy_id, stamp, payload)
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
        if self.legacy is not None:
            self.legacy.close()
