"""HTTP to trainq's REST API: configuration from the environment, the
Authorization header, retries of 429/503 as Retry-After says, error answers
turned into exceptions, and streamed answers."""

import email.utils
import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from . import errors

API_PREFIX = "/public/v2"
USER_AGENT = "trainq-client_lib/0.1"

# Environment variables.
ENV_URL = "TRAINQ_API_URL"
ENV_TOKEN = "TRAINQ_API_TOKEN"
ENV_REGION = "TRAINQ_REGION"
ENV_WORKSPACE = "TRAINQ_WORKSPACE_ID"  # sent as ML Space's x-workspace-id when set
ENV_TIMEOUT = "TRAINQ_API_TIMEOUT"  # seconds per request (default 60)
ENV_RETRY_BUDGET = "TRAINQ_API_RETRY_BUDGET"  # seconds spent waiting on 429/503 at most (default 120)


def _float_env(name, default):
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        f = float(v)
    except ValueError:
        raise errors.ConfigError(name, "%s=%r is not a number of seconds" % (name, v)) from None
    if f <= 0:
        raise errors.ConfigError(name, "%s=%r must be more than 0 seconds" % (name, v))
    return f


class Client:
    """One configured connection to trainq's API. The module functions use
    ``Client.from_env()``; build one yourself to talk to several APIs."""

    def __init__(self, url, token, region=None, timeout=60.0, retry_budget=120.0, max_retries=8, workspace_id=None):
        if not url:
            raise errors.ConfigError(ENV_URL, "no API address: set %s (e.g. http://127.0.0.1:8080; make dev prints it)" % ENV_URL)
        if not token:
            raise errors.ConfigError(ENV_TOKEN, "no API token: set %s (make dev prints one; bin/trainq-api token makes one)" % ENV_TOKEN)
        u = urllib.parse.urlsplit(url.strip())
        if u.scheme not in ("http", "https") or not u.netloc:
            raise errors.ConfigError(ENV_URL, "%s=%r is not an http:// or https:// address" % (ENV_URL, url))
        base = url.strip().rstrip("/")
        if base.endswith(API_PREFIX):
            base = base[: -len(API_PREFIX)]
        self.base = base
        token = token.strip()
        if token[:7].lower() == "bearer ":
            token = token[7:].strip()
        self._token = token
        self.region = region or None
        self.workspace_id = workspace_id or None
        self.timeout = timeout
        self.retry_budget = retry_budget
        self.max_retries = max_retries

    @classmethod
    def from_env(cls):
        """A client configured by TRAINQ_API_URL, TRAINQ_API_TOKEN and
        (optionally) TRAINQ_REGION, TRAINQ_WORKSPACE_ID, TRAINQ_API_TIMEOUT,
        TRAINQ_API_RETRY_BUDGET."""
        return cls(os.environ.get(ENV_URL, ""), os.environ.get(ENV_TOKEN, ""),
                   region=os.environ.get(ENV_REGION, "").strip() or None,
                   workspace_id=os.environ.get(ENV_WORKSPACE, "").strip() or None,
                   timeout=_float_env(ENV_TIMEOUT, 60.0), retry_budget=_float_env(ENV_RETRY_BUDGET, 120.0))

    def __repr__(self):
        return "Client(%r, region=%r)" % (self.base, self.region)  # never the token

    # The one place requests are sent.
    def open(self, method, path, query=None, body=None, headers=None, timeout=None, idempotent=None):
        """Sends a request and returns the open response (the caller reads
        and closes it). ``path`` is under /public/v2 unless it starts with
        '//' (then it is taken from the root, e.g. '//healthz').

        429 and 503 are retried after Retry-After seconds while the retry
        budget lasts; connection failures are retried a few times for
        requests that are safe to repeat (GET, DELETE, and a POST with an
        Idempotency-Key). Other error answers raise an APIError subclass."""
        if path.startswith("//"):
            full = path[1:]
        else:
            full = API_PREFIX + path
        if query:
            pairs = []
            for k, v in query.items():
                if v is None:
                    continue
                for one in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(one, bool):
                        one = "true" if one else "false"
                    pairs.append((k, str(one)))
            if pairs:
                full += "?" + urllib.parse.urlencode(pairs)
        data = None
        hdrs = {"Authorization": "Bearer " + self._token, "User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.workspace_id:
            hdrs["x-workspace-id"] = self.workspace_id
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE", "PUT") or "Idempotency-Key" in hdrs
        deadline = time.monotonic() + self.retry_budget
        conn_failures = 0
        tries = 0
        while True:
            tries += 1
            req = urllib.request.Request(self.base + full, data=data, method=method, headers=hdrs)
            try:
                return urllib.request.urlopen(req, timeout=self.timeout if timeout is None else timeout)
            except urllib.error.HTTPError as e:
                payload = e.read()
                e.close()
                err = _api_error(e.code, e.headers, payload, method, full)
                if e.code in (429, 503) and tries <= self.max_retries:
                    wait = err.retry_after if err.retry_after is not None else min(2.0 ** tries, 10.0)
                    if time.monotonic() + wait <= deadline:
                        time.sleep(wait)
                        continue
                raise err from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, OSError) as e:
                reason = getattr(e, "reason", e)
                conn_failures += 1
                wait = 0.5 * 2 ** (conn_failures - 1)
                if idempotent and conn_failures <= 3 and time.monotonic() + wait <= deadline:
                    time.sleep(wait)
                    continue
                raise errors.APIConnectionError(0, "connection_failed", "cannot reach %s: %s" % (self.base, reason),
                                                method=method, path=full) from None

    def call(self, method, path, query=None, body=None, headers=None):
        """A request whose answer is JSON: returns it decoded."""
        with self.open(method, path, query=query, body=body, headers=headers) as resp:
            payload = read_all(resp, method, path)
        if not payload.strip():
            return {}
        try:
            return json.loads(payload)
        except ValueError:
            raise errors.APIError(resp.status, "bad_answer", "the answer is not JSON: %r" % payload[:200],
                                  method=method, path=path, body=payload) from None

    def submit(self, request, key=None):
        """POST /jobs with a RunJobRequest dict, under an Idempotency-Key
        (a new UUID unless given), so that a retried POST gets the same job."""
        return self.call("POST", "/jobs", body=request, headers={"Idempotency-Key": key or str(uuid.uuid4())})


def read_all(resp, method, path):
    """The whole body of an answer; a connection lost midway is an
    APIConnectionError, like one lost before the answer."""
    try:
        return resp.read()
    except (http.client.HTTPException, OSError) as e:
        raise errors.APIConnectionError(0, "connection_lost", "the answer was cut off: %s" % e, method=method, path=path) from None


def _retry_after(headers):
    v = headers.get("Retry-After") if headers is not None else None
    if not v:
        return None
    v = v.strip()
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _api_error(status, headers, payload, method, path):
    code = message = field = ""
    try:
        e = json.loads(payload)["error"]
        code, message, field = e.get("code", ""), e.get("message", ""), e.get("field", "")
    except (ValueError, KeyError, TypeError, AttributeError):
        message = payload.decode("utf-8", errors="replace").strip()[:500]
    cls = errors.error_class(status)
    if cls is errors.NotFoundError and path.startswith(API_PREFIX + "/jobs/"):
        cls = errors.JobNotFoundError
    return cls(status, code, message, field, method=method, path=path, retry_after=_retry_after(headers), body=payload)
