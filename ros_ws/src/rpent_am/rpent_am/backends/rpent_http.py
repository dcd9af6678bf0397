"""RPent's HTTP action-model transport: a client backend and a server around any backend.

The original RPent serves VLA models (e.g. ``pi05_vla_server --transport http``) as
"JSON over POST /call": every call names an RPC route (``vla.predict``, the optional
``vla.get_model_meta``) and the server also answers a health check. The public
documentation names the routes and the transport but not the JSON body, so the body
below is an assumption, chosen to follow what that documentation does spell out for
the sibling WAM contract ("requests contain images, state, instruction ...;
predictions contain actions"):

    POST <endpoint>/call
      {"method": "vla.predict",
       "params": {"images": {"<camera>": "<base64 PNG>", ...},
                  "state": [float, ...], "state_names": [str, ...],
                  "instruction": "<text>"},
       "session": "<session id>"}
    -> 200 {"result": {"actions": [[float, ...], ...]}}      (horizon x action_dim)
    -> 4xx/5xx {"error": "<message>"}

    POST <endpoint>/call {"method": "vla.get_model_meta", "params": {}}
    -> 200 {"result": {<ModelMeta fields; action_space as a ControlSpaceSpec dict>}}
    POST <endpoint>/call {"method": "vla.reset_session", "params": {}, "session": "<id>"}
    GET  <endpoint>/healthz -> 200 {"status": "ok"}

Every name above lives in :class:`RpentHttpWire`; pointing the client at a server that
spells them differently is a matter of passing another ``RpentHttpWire``. A server that
does not know ``vla.get_model_meta`` (it is optional in RPent) leaves the metadata to the
client's configuration; one that does not know ``vla.reset_session`` is stateless.
``session`` travels in the envelope, outside ``params``, so a server that does not
isolate sessions can ignore it.

:class:`RpentHttpServer` speaks the same protocol around any :class:`PolicyBackend`. It
is the protocol-level peer for the client's tests and the HTTP+JSON+PNG side of the
transport benchmark.
"""
from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.http_json import JsonHttpClient, JsonHttpServer
from rpent_contract.images import decode_png, encode_png

from ..policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation


@dataclass(frozen=True)
class RpentHttpWire:
    """Every path, route and field name of the protocol (see the module docstring)."""

    call_path: str = "/call"
    health_path: str = "/healthz"
    predict_method: str = "vla.predict"
    meta_method: str = "vla.get_model_meta"
    reset_method: str = "vla.reset_session"
    method: str = "method"
    params: str = "params"
    session: str = "session"
    result: str = "result"
    error: str = "error"
    images: str = "images"
    state: str = "state"
    state_names: str = "state_names"
    instruction: str = "instruction"
    actions: str = "actions"


# A server without a route answers with this status; the client then falls back to its
# own configuration (metadata) or treats the model as stateless (reset).
_UNKNOWN_METHOD_STATUS = 404


def meta_to_dict(meta: ModelMeta) -> dict:
    return dataclasses.asdict(meta)


def meta_from_dict(data: Mapping) -> ModelMeta:
    fields = {f.name for f in dataclasses.fields(ModelMeta)}
    values = {k: v for k, v in data.items() if k in fields}
    space = values["action_space"]
    values["action_space"] = ControlSpaceSpec(**{
        k: tuple(v) if isinstance(v, list) else v for k, v in space.items()})
    for key in ("required_cameras", "state_names"):
        if key in values:
            values[key] = tuple(values[key])
    return ModelMeta(**values)


def actions_array(value, action_dim: int, what: str) -> np.ndarray:
    """Check an answered chunk: a finite (horizon >= 1, action_dim) array."""
    try:
        actions = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise BackendError(f"{what} answered actions that are not a numeric array") from None
    if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != action_dim:
        raise BackendError(
            f"{what} answered actions of shape {actions.shape}; expected (horizon, {action_dim}) "
            f"with horizon >= 1: check that the server runs the model this client expects")
    if not np.all(np.isfinite(actions)):
        raise BackendError(f"{what} answered non-finite actions (NaN or inf): check the model")
    return actions


class _RemoteError(BackendError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class RpentHttpBackend(PolicyBackend):
    """A model served over RPent's HTTP transport (an existing ``pi05_vla_server``, say).

    ``action_space``, ``chunk_size`` and the rest describe the model when the server
    offers no ``vla.get_model_meta``; when it does, its answer wins. ``cameras`` maps
    contract camera names to the image names on the wire (default: the same names;
    with a mapping, only the mapped cameras are sent). ``chunk_size`` 0 keeps every row
    the server answers; otherwise the chunk is cut to that many rows.
    """

    def __init__(self, endpoint: str, *, action_space: Optional[ControlSpaceSpec] = None,
                 chunk_size: int = 0, cameras: Optional[Mapping[str, str]] = None,
                 checkpoint: str = "", control_rate: float = 20.0, timeout: float = 30.0,
                 connect_timeout: float = 5.0, wire: RpentHttpWire = RpentHttpWire()):
        def connect():
            return JsonHttpClient(endpoint, server="action-model server", timeout=timeout,
                                  connect_timeout=connect_timeout, error=BackendError)

        # A connection per concurrent call: one call stuck on a hung request (which the node
        # gives up on after the goal's timeout) must not hold the next call behind it.
        self._connect, self._idle = connect, [connect()]
        self._idle_lock = threading.Lock()
        self._endpoint = self._idle[0].endpoint
        self._wire = wire
        self._cameras = dict(cameras) if cameras is not None else None
        self._chunk_size = chunk_size
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self.health()
        self._meta = self._fetch_meta(action_space, chunk_size, checkpoint, control_rate)

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    # --- protocol ------------------------------------------------------------------------
    @contextmanager
    def _http(self):
        with self._idle_lock:
            http = self._idle.pop() if self._idle else self._connect()
        try:
            yield http
        finally:
            with self._idle_lock:
                self._idle.append(http)

    def _call(self, method: str, params: dict, session: str = "", timeout: Optional[float] = None):
        w = self._wire
        body = {w.method: method, w.params: params}
        if session:
            body[w.session] = session
        with self._http() as http:
            status, answer = http.request("POST", w.call_path, body, timeout or self._timeout)
        if status != 200 or w.error in answer:
            raise _RemoteError(status, f"{method} failed on {self._endpoint} (HTTP {status}): "
                                       f"{answer.get(w.error, answer)}")
        if w.result not in answer:
            raise BackendError(f"{method} answer from {self._endpoint} has no '{w.result}' field")
        return answer[w.result]

    def health(self) -> None:
        """Raise BackendError unless the server answers its health check."""
        with self._http() as http:
            status, _ = http.request("GET", self._wire.health_path, None, self._connect_timeout)
        if status != 200:
            raise BackendError(f"{self._endpoint}{self._wire.health_path} answered HTTP {status}: "
                               f"the server is up but not ready; check its log")

    def _fetch_meta(self, action_space, chunk_size, checkpoint, control_rate) -> ModelMeta:
        try:
            remote = self._call(self._wire.meta_method, {}, timeout=self._connect_timeout)
        except _RemoteError as exc:
            if exc.status != _UNKNOWN_METHOD_STATUS:
                raise
            remote = None
        if remote is not None:
            try:
                meta = meta_from_dict(remote)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BackendError(f"{self._wire.meta_method} from {self._endpoint} is not "
                                   f"model metadata ({exc!r})") from None
            if action_space is not None and action_space.name != meta.action_space.name:
                raise BackendError(
                    f"configured action space '{action_space.name}' but {self._endpoint} "
                    f"serves '{meta.action_space.name}': fix the configuration or the endpoint")
            if chunk_size:
                meta = dataclasses.replace(meta, chunk_size=chunk_size)
            # A configured camera mapping is what predict sends, so it is what the model needs.
            cameras = tuple(self._cameras) if self._cameras else meta.required_cameras
            return dataclasses.replace(meta, backend="rpent_http", required_cameras=cameras,
                                       extra={**meta.extra, "endpoint": self._endpoint})
        if action_space is None or chunk_size <= 0:
            raise BackendError(
                f"{self._endpoint} offers no {self._wire.meta_method}: configure the model "
                f"with action_space= and chunk_size=")
        return ModelMeta(
            backend="rpent_http", checkpoint=checkpoint or self._endpoint,
            checkpoint_id=checkpoint or self._endpoint, action_space=action_space,
            chunk_size=chunk_size, required_cameras=tuple(self._cameras or ()),
            control_rate=control_rate, default_timeout=self._timeout,
            extra={"endpoint": self._endpoint})

    # --- PolicyBackend -------------------------------------------------------------------
    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        w = self._wire
        names = self._cameras or {name: name for name in observation.images}
        missing = [cam for cam in names if cam not in observation.images]
        if missing:
            raise BackendError(f"observation lacks camera(s) {', '.join(missing)} that "
                               f"{self._endpoint} needs (has: {', '.join(observation.images)})")
        params = {
            w.images: {wire: encode_png(observation.images[cam]) for cam, wire in names.items()},
            w.state: np.asarray(observation.state, dtype=np.float64).tolist(),
            w.state_names: list(observation.state_names),
            w.instruction: instruction,
        }
        result = self._call(w.predict_method, params, session)
        if not isinstance(result, dict) or w.actions not in result:
            raise BackendError(f"{w.predict_method} answer from {self._endpoint} has no "
                               f"'{w.actions}': check that the server speaks this protocol")
        actions = actions_array(result[w.actions], self._meta.action_space.dim, self._endpoint)
        return actions[: self._chunk_size] if self._chunk_size else actions

    def reset(self, session: Optional[str] = None) -> None:
        try:
            self._call(self._wire.reset_method, {}, session or "")
        except _RemoteError as exc:
            if exc.status != _UNKNOWN_METHOD_STATUS:
                raise

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for http in idle:
            http.close()


class RpentHttpServer(JsonHttpServer):
    """Serves one :class:`PolicyBackend` over the protocol above, on a background thread.

    Model calls are serialised (one predict at a time), as in RPent's facades. ``port``
    0 binds a free port; :attr:`endpoint` says which.
    """

    def __init__(self, backend: PolicyBackend, host: str = "127.0.0.1", port: int = 0,
                 wire: RpentHttpWire = RpentHttpWire()):
        super().__init__(host, port, call_path=wire.call_path, health_path=wire.health_path,
                         error=wire.error)
        self._backend, self._wire = backend, wire
        self._model_lock = threading.Lock()

    def handle(self, body: Mapping) -> tuple[int, dict]:
        """One /call request -> (HTTP status, JSON answer)."""
        w = self._wire
        method, params = body.get(w.method), body.get(w.params, {})
        session = str(body.get(w.session) or "default")
        if not isinstance(params, dict):
            return 400, {w.error: f"'{w.params}' must be an object"}
        try:
            with self._model_lock:
                if method == w.meta_method:
                    return 200, {w.result: meta_to_dict(self._backend.meta)}
                if method == w.reset_method:
                    self._backend.reset(session)
                    return 200, {w.result: {}}
                if method == w.predict_method:
                    observation, instruction = self._observation(params)
                    actions = self._backend.predict(observation, instruction, session)
                    return 200, {w.result: {w.actions: np.asarray(actions).tolist()}}
        except (KeyError, TypeError, ValueError) as exc:
            return 400, {w.error: f"bad {method} request: {exc}"}
        except BackendError as exc:
            return 500, {w.error: str(exc)}
        return _UNKNOWN_METHOD_STATUS, {w.error: f"unknown method '{method}'"}

    def _observation(self, params: Mapping) -> tuple[PolicyObservation, str]:
        w = self._wire
        state = np.asarray(params[w.state], dtype=np.float64)
        names = params.get(w.state_names) or self._backend.meta.state_names
        if state.ndim != 1 or (names and len(names) != state.size):
            raise ValueError(f"state must be a flat list matching {len(names)} state names")
        images = {cam: decode_png(text) for cam, text in params[w.images].items()}
        return PolicyObservation(images=images, state=state, state_names=tuple(names)), \
            str(params.get(w.instruction, ""))
