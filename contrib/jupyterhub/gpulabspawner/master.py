"""The GPULab master as the spawner talks to it: its JSON API (v3.1) over HTTPS with the
service certificate, acting for the hub's user through the X-GPULab-Act-As header.

Only the standard library and tornado (which JupyterHub brings) are used: requests would block
the hub's event loop, and every call here runs inside it.
"""

import json
import ssl
import uuid
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

#: The header that names the user a service acts for (the master refuses it from anyone else).
ACT_AS_HEADER = "X-GPULab-Act-As"

#: States after which a job never runs again (a restart of a job is a new job).
FINAL_STATES = frozenset({"FINISHED", "FAILED", "CANCELLED", "HALTED", "DELETED"})

#: States in which a job holds, or is on its way to, a slave.
LIVE_STATES = frozenset({"QUEUED", "ONHOLD", "ASSIGNED", "STARTING", "RUNNING", "MUSTHALT", "HALTING"})


class MasterError(Exception):
    """An answer of the master that is not a success: its status and its own message.

    str() is what the hub shows the user, so it is the master's text (with the fields it named)
    and nothing of the transport.
    """

    def __init__(self, status, message, details=None):
        self.status = status
        self.message = message
        self.details = details or []
        super().__init__(self.text())

    def text(self):
        parts = [self.message]
        for d in self.details:
            path, msg = d.get("path", ""), d.get("message", "")
            parts.append(f"{path}: {msg}" if path else msg)
        return "; ".join(p for p in parts if p)


def error_of(status, body):
    """The MasterError of an answer, reading the master's JSON error body when there is one."""
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        doc = {}
    if isinstance(doc, dict) and doc.get("error"):
        return MasterError(status, str(doc["error"]), doc.get("details") or [])
    text = (body or b"").decode("utf-8", "replace").strip()[:500]
    return MasterError(status, text or f"the GPULab master answered HTTP {status}")


def ssl_context(ca_file, cert_file, key_file=None):
    """A TLS context that trusts the master's CA and presents the service certificate."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or cert_file)
    return ctx


class Master:
    """Calls to one master for one user. base is the master's URL (https://host:port), with or
    without a path up to /api; user is the GPULab name the service acts for."""

    API = "api/gpulab/v3.1/"

    def __init__(self, base, ctx, user, timeout=30.0):
        base = base.rstrip("/")
        for suffix in ("/api/gpulab/v3.1", "/api/gpulab", "/api"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                break
        self.base = base + "/"
        self.ctx = ctx
        self.user = user
        self.timeout = timeout

    async def call(self, method, path, body=None, headers=None, ok=(200, 201, 204)):
        """One API call; the decoded JSON answer (None when empty), or MasterError."""
        h = {"Accept": "application/json", ACT_AS_HEADER: self.user}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        elif body is not None:
            h["Content-Type"] = "text/plain"
        h.update(headers or {})
        req = HTTPRequest(self.base + self.API + path, method=method, headers=h, body=body,
                          ssl_options=self.ctx, request_timeout=self.timeout,
                          connect_timeout=min(self.timeout, 10.0))
        try:
            resp = await AsyncHTTPClient().fetch(req, raise_error=False)
        except HTTPClientError as e:  # pragma: no cover - raise_error=False leaves only transport errors
            raise MasterError(e.code, str(e)) from e
        except OSError as e:
            raise MasterError(0, f"cannot reach the GPULab master at {self.base}: {e}") from e
        if resp.code == 599:
            raise MasterError(0, f"cannot reach the GPULab master at {self.base}: {resp.error}")
        if resp.code not in ok:
            raise error_of(resp.code, resp.body)
        if not resp.body:
            return None
        return json.loads(resp.body)

    async def submit(self, request):
        """Submits a job; returns the job the master stored. The Idempotency-Key makes a retry of
        a submission whose answer was lost return the same job instead of a second one."""
        return await self.call("POST", "jobs", request, headers={"Idempotency-Key": str(uuid.uuid4())})

    async def job(self, job_id):
        return await self.call("GET", "jobs/" + quote(job_id, safe=""))

    async def events(self, job_id):
        doc = await self.call("GET", "jobs/" + quote(job_id, safe="") + "/debug")
        if isinstance(doc, dict):
            doc = doc.get("items") or []
        return doc or []

    async def cancel(self, job_id):
        """Asks the master to cancel; a job that already ended (409) is not an error."""
        try:
            await self.call("PUT", "jobs/" + quote(job_id, safe="") + "/state/status", "CANCELLED")
        except MasterError as e:
            if e.status != 409:
                raise


def status_of(job):
    return ((job or {}).get("state") or {}).get("status", "")


async def end_reason(master, job_id, job):
    """Why a job ended, in the master's words: the last event with a message (the scheduler's
    'interactive job cannot start now: …', a slave's start error), else the state."""
    try:
        events = await master.events(job_id)
    except MasterError:
        events = []
    for ev in reversed(events):
        msg = (ev or {}).get("message")
        if msg:
            return msg
    return f"the job is {status_of(job) or 'gone'}"
