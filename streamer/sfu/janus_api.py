"""The Janus core API over its HTTP transport (aiohttp): a session, plugin handles, requests and their
asynchronous events, keepalive, and a trickle `{"completed": true}` for peers that do not trickle.

Why this shape:
- Janus answers a plugin message either at once (`success` with `plugindata`) or with an `ack`, and the
  result comes later as an `event` carrying the same transaction, delivered to the session's long poll
  (`GET /janus/{session}?maxev=N`). One poller task per session routes events to the waiting request by
  transaction; events without one (a publisher left, a hangup) go to the handle's queue.
- The poller also tells when Janus is gone (connection refused, `458 no such session` after a restart):
  `lost` is set and every waiting request fails with JanusUnreachable, so the owner can rebuild.
- Janus drops a session after `session_timeout` without a request, and a long poll does not count: a
  keepalive goes every third of the timeout the server reports (`GET /info`), at most every KEEPALIVE_S.
- The Janus API secret (`apisecret`) and token ride in every request body and are never logged: log
  lines carry only the request kind, the session and handle ids.
"""

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import aiohttp

from gpu_ops.errors import LivefuseError

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
KEEPALIVE_S = 20.0  # at most: Janus drops a session after `session_timeout` s (60 by default) without one
KEEPALIVES_PER_TIMEOUT = 3  # a long poll does not count as activity: keepalives go this much more often
POLL_EVENTS = 10  # events per long poll answer
NO_SUCH_SESSION = 458
NO_SUCH_HANDLE = 459
Message = dict[str, Any]


class JanusError(LivefuseError):
    """Janus (or its plugin) refused a request; `code` is Janus's error code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"Janus error {code}: {reason}")
        self.code = code
        self.reason = reason


class JanusUnreachable(LivefuseError):
    """Janus cannot be reached, or forgot this session (it restarted)."""


@dataclass(frozen=True)
class JanusAuth:
    """What every request carries when Janus asks for it (`api_secret`, `token_auth`); never logged."""

    api_secret: str | None = None
    token: str | None = None

    def fields(self) -> Message:
        found: Message = {}
        if self.api_secret:
            found["apisecret"] = self.api_secret
        if self.token:
            found["token"] = self.token
        return found

    def __repr__(self) -> str:  # never show the values
        return f"JanusAuth(api_secret={'***' if self.api_secret else None}, token={'***' if self.token else None})"


def _transaction() -> str:
    return secrets.token_hex(8)


def _raise_for_error(answer: Message) -> None:
    if answer.get("janus") == "error":
        error = answer.get("error") or {}
        code = int(error.get("code", 0))
        if code == NO_SUCH_SESSION:
            raise JanusUnreachable(f"Janus forgot the session ({error.get('reason', 'no such session')})")
        raise JanusError(code, str(error.get("reason", "unknown error")))


class JanusHandle:
    """One plugin handle: `request()` for synchronous plugin requests, `send()` for asynchronous ones
    (returns the event that answers it), `trickle_completed()`, `detach()`; `events` holds the plugin
    events that answer no request of ours."""

    def __init__(self, session: "JanusSession", handle_id: int) -> None:
        self.session = session
        self.handle_id = handle_id
        self.events: asyncio.Queue[Message] = asyncio.Queue()
        self.detached = False

    async def request(self, body: Message) -> Message:
        """A synchronous plugin request: its `plugindata.data`."""
        answer = await self.session.post(
            {"janus": "message", "body": body}, handle_id=self.handle_id, what=str(body.get("request"))
        )
        return dict(answer.get("plugindata", {}).get("data", {}))

    async def send(
        self, body: Message, jsep: Message | None = None, timeout: float = REQUEST_TIMEOUT_S
    ) -> Message:
        """An asynchronous plugin request: the whole event that answers it (`plugindata`, `jsep`)."""
        message: Message = {"janus": "message", "body": body}
        if jsep is not None:
            message["jsep"] = jsep
        return await self.session.post_awaiting_event(
            message, self.handle_id, what=str(body.get("request")), timeout=timeout
        )

    async def trickle_completed(self) -> None:
        """Tell Janus there are no more candidates: aiortc puts them all in the SDP and never trickles."""
        await self.session.post(
            {"janus": "trickle", "candidate": {"completed": True}}, handle_id=self.handle_id, what="trickle"
        )

    async def detach(self) -> None:
        """Leave the plugin (idempotent; quiet when Janus already forgot the handle or is gone)."""
        if self.detached:
            return
        self.detached = True
        self.session.forget_handle(self.handle_id)
        try:
            await self.session.post({"janus": "detach"}, handle_id=self.handle_id, what="detach")
        except (JanusError, JanusUnreachable):
            pass  # gone already: nothing to leave


class JanusSession:
    """`await JanusSession.create(url, auth)`; then `attach()`; `close()` destroys it (idempotent).

    :param url: the Janus HTTP API base, e.g. http://127.0.0.2:8088/janus.
    """

    def __init__(
        self,
        url: str,
        auth: JanusAuth,
        http: aiohttp.ClientSession,
        session_id: int,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.url = url.rstrip("/")
        self.session_id = session_id
        self.keepalive_s = keepalive_s
        self._auth = auth
        self._http = http
        self._handles: dict[int, JanusHandle] = {}
        self._waiting: dict[str, asyncio.Future[Message]] = {}
        self.lost = asyncio.Event()
        self._closed = False
        self._poller = asyncio.create_task(self._poll(), name=f"janus-poll-{session_id}")
        self._keepalive = asyncio.create_task(self._keep_alive(), name=f"janus-keepalive-{session_id}")

    @classmethod
    async def create(cls, url: str, auth: JanusAuth | None = None) -> "JanusSession":
        """A new Janus session; JanusUnreachable when nothing answers, JanusError when refused."""
        auth = auth or JanusAuth()
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
        try:
            answer = await _post_json(http, url.rstrip("/"), {"janus": "create", **auth.fields()})
            _raise_for_error(answer)
            session_id = int(answer["data"]["id"])
            keepalive_s = await _keepalive_interval(http, url.rstrip("/"))
        except BaseException:
            await http.close()
            raise
        logger.info("janus session %d created (keepalive every %.0f s)", session_id, keepalive_s)
        return cls(url, auth, http, session_id, keepalive_s)

    async def attach(self, plugin: str = "janus.plugin.videoroom") -> JanusHandle:
        answer = await self.post({"janus": "attach", "plugin": plugin}, what="attach")
        handle = JanusHandle(self, int(answer["data"]["id"]))
        self._handles[handle.handle_id] = handle
        return handle

    def forget_handle(self, handle_id: int) -> None:
        self._handles.pop(handle_id, None)

    async def post(self, message: Message, handle_id: int | None = None, what: str = "") -> Message:
        """One request on this session (or a handle); its answer, errors raised."""
        if self.lost.is_set():
            raise JanusUnreachable("the Janus session is lost")
        path = f"{self.url}/{self.session_id}" + (f"/{handle_id}" if handle_id is not None else "")
        logger.debug("janus %d/%s: %s", self.session_id, handle_id, what or message.get("janus"))
        answer = await _post_json(self._http, path, {**message, **self._auth.fields()})
        _raise_for_error(answer)
        return answer

    async def post_awaiting_event(
        self, message: Message, handle_id: int, what: str, timeout: float = REQUEST_TIMEOUT_S
    ) -> Message:
        """Post with a transaction of our own and wait for the event that carries it."""
        transaction = _transaction()
        waiter: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[transaction] = waiter
        try:
            answer = await self.post({**message, "transaction": transaction}, handle_id, what)
            if answer.get("janus") == "event":  # answered at once
                return answer
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            raise JanusUnreachable(f"no answer from Janus to {what!r} within {timeout:.0f} s") from None
        finally:
            self._waiting.pop(transaction, None)

    async def _poll(self) -> None:
        """The long poll: route events until Janus goes away or the session closes."""
        url = f"{self.url}/{self.session_id}"
        params = {"maxev": str(POLL_EVENTS), **self._auth.fields()}
        try:
            while not self._closed:
                try:
                    async with self._http.get(
                        url, params=params, timeout=aiohttp.ClientTimeout(total=40)
                    ) as response:
                        answer = await response.json(content_type=None)
                except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                    logger.warning("janus session %d: long poll failed: %s", self.session_id, error)
                    return
                events = answer if isinstance(answer, list) else [answer]
                for event in events:
                    if event.get("janus") == "error":
                        logger.warning("janus session %d: %s", self.session_id, event.get("error"))
                        return
                    self._route(event)
        finally:
            self._lose()

    def _route(self, event: Message) -> None:
        kind = event.get("janus")
        if kind == "keepalive":
            return
        waiter = self._waiting.get(str(event.get("transaction")))
        if kind == "event" and waiter is not None and not waiter.done():
            waiter.set_result(event)
            return
        handle = self._handles.get(int(event.get("sender", 0) or 0))
        if handle is not None:
            handle.events.put_nowait(event)

    def _lose(self) -> None:
        if not self._closed and not self.lost.is_set():
            logger.warning("janus session %d lost", self.session_id)
        self.lost.set()
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(JanusUnreachable("the Janus session was lost"))

    async def _keep_alive(self) -> None:
        while not self.lost.is_set():
            await asyncio.sleep(self.keepalive_s)
            try:
                await self.post({"janus": "keepalive"}, what="keepalive")
            except (JanusError, JanusUnreachable, aiohttp.ClientError, TimeoutError):
                return  # the poller notices too and marks the session lost

    async def close(self) -> None:
        """Destroy the session on Janus when it is still there; stop the poller; idempotent."""
        if self._closed:
            return
        for handle in list(self._handles.values()):
            await _quietly(handle.detach())
        if not self.lost.is_set():
            await _quietly(self.post({"janus": "destroy"}, what="destroy"))
        self._closed = True
        self.lost.set()
        for task in (self._poller, self._keepalive):
            task.cancel()
        await asyncio.gather(self._poller, self._keepalive, return_exceptions=True)
        await self._http.close()


async def _keepalive_interval(http: aiohttp.ClientSession, url: str) -> float:
    """KEEPALIVE_S, or a third of the server's `session-timeout` (GET /info) when that is shorter."""
    try:
        async with http.get(f"{url}/info") as response:
            info = await response.json(content_type=None)
        timeout_s = float(info.get("session-timeout", 0) or 0)
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
        return KEEPALIVE_S
    if timeout_s <= 0:  # 0: Janus never drops idle sessions
        return KEEPALIVE_S
    return max(0.5, min(KEEPALIVE_S, timeout_s / KEEPALIVES_PER_TIMEOUT))


async def _quietly(request: Any) -> None:
    try:
        await request
    except (JanusError, JanusUnreachable):
        pass


async def _post_json(http: aiohttp.ClientSession, url: str, message: Message) -> Message:
    """POST one Janus request (a transaction added); JanusUnreachable for network errors."""
    body = {"transaction": _transaction(), **message}
    try:
        async with http.post(url, json=body) as response:
            if response.status == 404:
                raise JanusUnreachable(f"no Janus API at {url} (HTTP 404)")
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise JanusUnreachable(f"Janus at {url} cannot be reached: {error or type(error).__name__}") from None
    except ValueError:
        raise JanusUnreachable(f"{url} did not answer with Janus JSON") from None
    if not isinstance(answer, dict):
        raise JanusUnreachable(f"{url} did not answer with a Janus message")
    return answer
