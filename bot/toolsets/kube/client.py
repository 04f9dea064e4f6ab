"""The one door to the Kubernetes API: the only module that imports `kubernetes`.

`KubeClient` wraps one `kubernetes.client.ApiClient` (built from a kubeconfig path and
context, or from the in-cluster service account; never from the client's global default
configuration) and runs every blocking call through `KubeClient.call`, which:

- runs it in a worker thread (`asyncio.to_thread`) so the event loop never blocks;
- bounds it with a request timeout;
- turns every failure that reached (or failed to reach) the cluster into a `ToolFailure`
  whose message is one sentence naming what was attempted and what happened.

`KubeClients` maps cluster names to clients. Tool logic lives in the toolset modules beside
it (pods.py, workloads.py, …, write.py); this module knows no tool and formats no objects.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from bot.errors import ConfigError
from bot.toolsets.spec import KubeIdentity, ToolFailure

T = TypeVar("T")
log = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 15.0

# Retry only failures to connect (nothing was sent, so even a write is safe to repeat);
# never re-send a request whose answer timed out, and never retry on HTTP status.
_RETRIES = urllib3.Retry(total=2, connect=2, read=0, status=0, redirect=0, other=0)

_STATUS_TEXT = {
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    409: "409 Conflict",
    410: "410 Gone",
    415: "415 Unsupported Media Type",
    422: "422 Unprocessable Entity",
    429: "429 Too Many Requests",
    500: "500 Internal Server Error",
    502: "502 Bad Gateway",
    503: "503 Service Unavailable",
    504: "504 Gateway Timeout",
}


# The identity the call running in this worker thread acts as; set by `KubeClient._in_thread`
# (asyncio.to_thread copies the context), read by `_Impersonating` for each request.
_ACTING_AS: ContextVar[KubeIdentity | None] = ContextVar("kube_acting_as", default=None)


class _Impersonating:
    """Wraps the client's urllib3 pool manager: adds Impersonate-User and one
    Impersonate-Group header per group (the Python client has no way to repeat a header,
    and ignores a kubeconfig's `as:` / `as-groups:`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        identity = _ACTING_AS.get()
        if identity is not None:
            headers = urllib3.HTTPHeaderDict(kwargs.get("headers") or {})
            headers["Impersonate-User"] = identity.user
            for group in identity.groups:
                headers.add("Impersonate-Group", group)
            kwargs["headers"] = headers
        return self._inner.request(method, url, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _kubeconfig_identity(path: str, context: str | None) -> KubeIdentity | None:
    """`as:` / `as-groups:` of the context's user in a kubeconfig, if set."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
        name = context or document.get("current-context")
        ctx = next(c for c in document.get("contexts") or [] if c.get("name") == name)
        user_name = (ctx.get("context") or {}).get("user")
        user = next(u for u in document.get("users") or [] if u.get("name") == user_name)
    except (OSError, yaml.YAMLError, StopIteration, AttributeError, TypeError):
        return None
    settings = user.get("user") or {}
    as_user, as_groups = settings.get("as"), settings.get("as-groups") or []
    if not as_user:
        return None
    return KubeIdentity(str(as_user), tuple(str(g) for g in as_groups))


class KubeFailure(ToolFailure):
    """A `ToolFailure` from the Kubernetes API; `status` is the HTTP status (None: no answer).

    Write tools branch on `status` (409: the target changed); the message is for the model.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _server_message(exc: ApiException) -> str:
    """The `message` of the Status body the API server sent, else whatever text it sent."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
            return _clipped(str(parsed["message"]))
        return _clipped(str(body).strip())
    return str(exc.reason or "no details")


# How the API server words a missing `impersonate` grant of the caller itself (as opposed to
# a denial of the impersonated identity), e.g. `users "carol" is forbidden: User "kelpie"
# cannot impersonate resource "users" in API group "" at the cluster scope`.
_IMPERSONATION_DENIED = re.compile(
    r'^(?P<resource>[\w/.:-]+) "(?P<name>[^"]*)" is forbidden: User "(?P<actor>[^"]*)" '
    r'cannot impersonate resource "(?P=resource)"'
)


def _impersonation_denied(describe: str, message: str) -> str | None:
    """One sentence for the operator when kelpie itself may not impersonate, else None."""
    found = _IMPERSONATION_DENIED.match(message)
    if found is None:
        return None
    resource, name, actor = found["resource"], found["name"], found["actor"]
    kind = {"users": "user", "groups": "group", "serviceaccounts": "service account"}
    return (
        f"kelpie's service account (Kubernetes user {actor}) may not impersonate "
        f"{kind.get(resource, resource)} {name}, so it could not {describe}; grant impersonate "
        f'on {resource} "{name}" to it (as deploy/base/rbac-impersonate.yaml does).'
    )


def _clipped(text: str, limit: int = 300) -> str:
    """At most `limit` characters on one line: some answers (a 422 for a bad patch) quote
    the whole object."""
    flat = " ".join(text.split()).rstrip(".")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class KubeClient:
    """One cluster's API client; every call goes through `call`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        name: str = "default",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        identity: KubeIdentity | None = None,
    ) -> None:
        self.name = name
        self.request_timeout = request_timeout
        self.identity = identity
        self._api = api_client
        rest = api_client.rest_client
        if not isinstance(rest.pool_manager, _Impersonating):
            # Duck-typed: the REST client only calls `request` on it.
            rest.pool_manager = _Impersonating(rest.pool_manager)  # type: ignore[assignment]
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        # autoscaling/v2 for an HPA's metrics (Kubernetes 1.23+); v1, served by every
        # supported version, for status.lastScaleTime.
        self.autoscaling = client.AutoscalingV2Api(api_client)
        self.autoscaling_v1 = client.AutoscalingV1Api(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self.version = client.VersionApi(api_client)

    @classmethod
    def from_kubeconfig(
        cls,
        path: str,
        context: str | None = None,
        *,
        name: str = "default",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> KubeClient:
        """Load one kubeconfig context into a private Configuration (never the global one)."""
        configuration = cls._configuration()
        try:
            api = config.new_client_from_config(
                config_file=path,
                context=context,
                persist_config=False,
                client_configuration=configuration,
            )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            where = f"{path} (context {context})" if context else path
            raise ConfigError(
                [f"kubernetes cluster {name}: cannot load kubeconfig {where}: {exc}"]
            ) from exc
        identity = _kubeconfig_identity(path, context)
        return cls(api, name=name, request_timeout=request_timeout, identity=identity)

    @classmethod
    def in_cluster(
        cls, *, name: str = "default", request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> KubeClient:
        """Use the pod's service account (token file, CA, KUBERNETES_SERVICE_HOST)."""
        configuration = cls._configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise ConfigError(
                [f"kubernetes cluster {name}: in_cluster is set but this is not a pod: {exc}"]
            ) from exc
        return cls(client.ApiClient(configuration), name=name, request_timeout=request_timeout)

    @staticmethod
    def _configuration() -> client.Configuration:
        configuration = client.Configuration()
        configuration.retries = _RETRIES
        return configuration

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    @property
    def seen_as(self) -> str:
        """Who the cluster sees make this client's calls, in words (for the audit)."""
        return str(self.identity or "kelpie's own Kubernetes identity")

    def acting_as(self, identity: KubeIdentity | None) -> KubeClient:
        """This client, every call impersonating `identity` (None: as configured)."""
        if identity is None or identity == self.identity:
            return self
        view = copy.copy(self)
        view.identity = identity
        return view

    async def call(self, describe: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one blocking client call in a thread; failures become one-sentence KubeFailures.

        `describe` says what was attempted, as a verb phrase ("list pods in namespace
        shop"), so every message reads "... to list pods in namespace shop ...".
        Returns what the client returns (typed models, or `str` for logs).
        """
        kwargs.setdefault("_request_timeout", self.request_timeout)
        return await self._in_thread(describe, lambda: fn(*args, **kwargs))

    async def call_json(
        self, describe: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Like `call`, but answer the object exactly as the server sent it (decoded JSON).

        Read tools use this: the wire format (camelCase dicts) is what they format, and it
        sidesteps the 37.x pydantic models rejecting an object a real cluster may send.
        """
        kwargs.setdefault("_request_timeout", self.request_timeout)

        def fetch() -> Any:
            response = fn(*args, _preload_content=False, **kwargs)
            try:
                raw = response.data
            finally:
                response.release_conn()
            try:
                return json.loads(raw) if raw else None
            except ValueError as exc:
                raise KubeFailure(
                    f"Could not {describe}: the Kubernetes API at {self.host} answered "
                    "something that is not JSON."
                ) from exc

        return await self._in_thread(describe, fetch)

    async def get_path(
        self, describe: str, path: str, query: Mapping[str, str | None] | None = None
    ) -> Any:
        """GET one API path (discovery, any group's resources) and answer the decoded JSON,
        through the same thread, timeout, identity and one-sentence failures as `call`.

        The generic toolset uses this: a kind found by discovery has no typed method."""
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        return await self.call_json(describe, self._get_raw, path, params)

    def _get_raw(
        self, path: str, params: list[tuple[str, str]], *, _preload_content: bool, **kwargs: Any
    ) -> Any:
        """The raw response to GET `path` (what the typed APIs answer without preloading)."""
        request = self._api.param_serialize(
            "GET",
            path,
            query_params=params,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request, _request_timeout=kwargs.get("_request_timeout"))
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    async def _in_thread(self, describe: str, thunk: Callable[[], T]) -> T:
        identity = self.identity

        def acting() -> T:
            token = _ACTING_AS.set(identity)
            try:
                return thunk()
            finally:
                _ACTING_AS.reset(token)

        try:
            return await asyncio.to_thread(acting)
        except ApiException as exc:
            raise self._api_failure(describe, exc) from exc
        except urllib3.exceptions.MaxRetryError as exc:
            raise self._transport_failure(describe, exc.reason or exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._transport_failure(describe, exc) from exc

    async def server_version(self) -> str:
        """The API server's gitVersion (GET /version), e.g. "v1.33.1"."""
        info = await self.call("read the server version", self.version.get_code)
        return str(info.git_version)

    def close(self) -> None:
        self._api.close()

    def _api_failure(self, describe: str, exc: ApiException) -> KubeFailure:
        status = exc.status or None
        message = _server_message(exc)
        match status:
            case None:
                text = f"Could not {describe}: {exc.reason or message}."
            case 401:
                text = (
                    f"Kubernetes did not accept the bot's credentials (401 Unauthorized) "
                    f"to {describe}: {message}."
                )
            case 403 if (denied := _impersonation_denied(describe, message)) is not None:
                log.warning("kubernetes cluster %s: %s", self.name, denied)
                text = denied
            case 403 if self.identity is not None:
                text = (
                    f"The cluster's RBAC does not let {self.identity} {describe} (403 Forbidden)."
                )
            case 403:
                text = f"Kubernetes refused (403 Forbidden) to {describe}: {message}."
            case 404:
                text = f"Kubernetes could not {describe}: not found (404: {message})."
            case 409:
                text = f"Kubernetes answered 409 Conflict to {describe}: {message}."
            case 429:
                text = (
                    f"Kubernetes is throttling requests (429 Too Many Requests), so it did "
                    f"not {describe}; try again shortly."
                )
            case _ if status >= 500:
                label = _STATUS_TEXT.get(status, f"{status} {exc.reason or 'Server Error'}")
                text = f"The Kubernetes API failed ({label}) to {describe}: {message}."
            case _:
                label = _STATUS_TEXT.get(status, f"{status} {exc.reason or ''}".strip())
                text = f"Kubernetes rejected the request to {describe} ({label}): {message}."
        return KubeFailure(text, status=status)

    def _transport_failure(self, describe: str, reason: BaseException) -> KubeFailure:
        # urllib3 files "connection refused" (NewConnectionError) under ConnectTimeoutError:
        # failing to connect at all means unreachable; only a silent server timed out.
        timed_out = isinstance(reason, urllib3.exceptions.TimeoutError | TimeoutError)
        if timed_out and not isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
            return KubeFailure(
                f"Could not {describe}: the Kubernetes API at {self.host} did not answer "
                f"(timed out after {self.request_timeout:g}s)."
            )
        return KubeFailure(
            f"Could not {describe}: the Kubernetes API at {self.host} is unreachable "
            f"({type(reason).__name__})."
        )


class KubeClients(Mapping[str, KubeClient]):
    """Cluster name → KubeClient, built once by the composition root."""

    def __init__(self, clients: Mapping[str, KubeClient]) -> None:
        self._clients = dict(clients)

    @classmethod
    def build(
        cls,
        clusters: Iterable[tuple[str, str | None, str | None, bool]],
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> KubeClients:
        """From (name, kubeconfig, context, in_cluster) tuples; raises ConfigError."""
        clients: dict[str, KubeClient] = {}
        for name, kubeconfig, context, in_cluster in clusters:
            if in_cluster:
                clients[name] = KubeClient.in_cluster(name=name, request_timeout=request_timeout)
            elif kubeconfig:
                clients[name] = KubeClient.from_kubeconfig(
                    kubeconfig, context, name=name, request_timeout=request_timeout
                )
            else:
                raise ConfigError([f"kubernetes cluster {name}: set kubeconfig or in_cluster"])
        return cls(clients)

    def client_for(self, cluster: str) -> KubeClient:
        """The client for `cluster`, or a ToolFailure the model can read."""
        found = self._clients.get(cluster)
        if found is None:
            known = ", ".join(sorted(self._clients)) or "none"
            raise ToolFailure(f"No Kubernetes cluster named {cluster!r} is configured ({known}).")
        return found

    def __getitem__(self, cluster: str) -> KubeClient:
        return self._clients[cluster]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def close(self) -> None:
        for kube in self._clients.values():
            kube.close()
