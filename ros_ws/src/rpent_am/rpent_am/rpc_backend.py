"""What the backends for the original RPent's model servers share: a connection on its RPC
(:mod:`rpent_contract.rpc`), checked with ``healthz`` at start-up, whose failures become
:class:`~rpent_am.policy.BackendError` with what to check, and routes that older servers
lack."""
from __future__ import annotations

from typing import Callable, Optional

from rpent_contract.rpc import RpcClient, RpcFailed

from .policy import BackendError, ModelMeta, PolicyBackend


class RpcBackend(PolicyBackend):
    """A subclass sets ``kind`` (how its messages name the server) and ``self._meta``."""

    kind = "model server"

    def __init__(self, endpoint: str, *, timeout: float, connect_timeout: float):
        self._rpc = RpcClient(endpoint, server=self.kind, timeout=timeout,
                              connect_timeout=connect_timeout, error=BackendError)
        self.endpoint = self._rpc.endpoint
        self._call("healthz", timeout=connect_timeout)

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def _call(self, method: str, args: tuple = (), kwargs: Optional[dict] = None,
              timeout: Optional[float] = None):
        try:
            return self._rpc.call(method, args, kwargs, timeout)
        except RpcFailed as err:
            raise BackendError(f"{err}: check the {self.kind}'s log and that it serves the "
                               "model this node is configured for") from None

    def _optional(self, method: str, otherwise: Callable[[], object],
                  timeout: Optional[float] = None):
        """``method``'s answer, or ``otherwise()`` from a server that has no such route."""
        try:
            return self._rpc.call(method, timeout=timeout)
        except RpcFailed as err:
            if not err.unknown_method:
                raise BackendError(f"{err}: check the {self.kind}'s log") from None
        return otherwise()

    def close(self) -> None:
        self._rpc.close()
