#!/usr/bin/python3
"""hubctl: drive JupyterHub's REST API as a script would, for the GPULab demo and tests.

    hubctl.py spawn alice [--options '{"gpus": 1}']   start alice's server, wait until ready
    hubctl.py run-cell alice 'import os; print(os.environ["GPULAB_JOB_ID"])'
    hubctl.py status alice                            the hub's view of alice's server (JSON)
    hubctl.py stop alice                              stop it and wait until it is gone
    hubctl.py bench alice 10                          spawn/stop ten times; submit -> reachable times

The hub's URL comes from HUB_URL (default http://127.0.0.1:8000) and an admin API token from the
file HUB_TOKEN_FILE (make run writes .tmp/run/hub/api-token). Only the standard library and
tornado (for the kernel's websocket), which JupyterHub brings.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request
import uuid


class HubError(Exception):
    pass


class Hub:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, token=None, ok=(200, 201, 202, 204)):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "token " + (token or self.token))
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                code, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            code, raw = e.code, e.read()
        if code not in ok:
            try:
                msg = json.loads(raw).get("message") or raw.decode()
            except ValueError:
                msg = raw.decode("utf-8", "replace")
            raise HubError(f"{method} {path}: HTTP {code}: {msg}")
        return json.loads(raw) if raw else None

    def user(self, name):
        try:
            return self.call("GET", f"/hub/api/users/{name}")
        except HubError as e:
            if "HTTP 404" not in str(e):
                raise
        self.call("POST", f"/hub/api/users/{name}")
        return self.call("GET", f"/hub/api/users/{name}")

    def server(self, name):
        return (self.user(name).get("servers") or {}).get("")

    def spawn(self, name, options, timeout=600):
        """Starts the server and waits until the hub says it is ready; the spawn's last
        progress message when it fails."""
        self.user(name)
        try:
            self.call("POST", f"/hub/api/users/{name}/server", options or {})
        except HubError as e:
            # A spawn that fails within the hub's first seconds is a bare 500 here; the reason
            # is the spawn's last progress event.
            raise HubError(f"{e}: {self.last_message(name)}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server(name)
            if s and s.get("ready"):
                return s
            if not s:
                raise HubError(f"the server of {name} stopped while starting: {self.last_message(name)}")
            time.sleep(0.2)
        raise HubError(f"the server of {name} is not ready after {timeout} s")

    def last_message(self, name):
        """The hub's last progress event of a spawn (its failure message for a failed one)."""
        req = urllib.request.Request(f"{self.url}/hub/api/users/{name}/server/progress")
        req.add_header("Authorization", "token " + self.token)
        last = ""
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                for line in resp:
                    line = line.decode().strip()
                    if line.startswith("data:"):
                        last = json.loads(line[5:]).get("message", last)
        except (urllib.error.URLError, OSError, ValueError):
            pass
        return last

    def stop(self, name, timeout=300):
        self.call("DELETE", f"/hub/api/users/{name}/server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.server(name):
                return
            time.sleep(0.2)
        raise HubError(f"the server of {name} did not stop within {timeout} s")

    def user_token(self, name):
        return self.call("POST", f"/hub/api/users/{name}/tokens", {"note": "hubctl", "expires_in": 3600})["token"]


async def run_cell(hub, name, code, timeout=120):
    """Runs code in a new kernel of the user's server (through the hub's proxy) and returns
    what it printed."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    token = hub.user_token(name)
    kernel = hub.call("POST", f"/user/{name}/api/kernels", {"name": "python3"}, token=token)
    try:
        ws_url = hub.url.replace("http", "ws", 1) + f"/user/{name}/api/kernels/{kernel['id']}/channels"
        conn = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": "token " + token},
                                                   connect_timeout=30))
        msg_id = uuid.uuid4().hex
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": name, "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(conn.read_message(), deadline - time.monotonic())
            if raw is None:
                raise HubError("the kernel's websocket closed")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            t, content = msg.get("msg_type"), msg.get("content", {})
            if t == "stream":
                out.append(content.get("text", ""))
            elif t == "error":
                raise HubError("the cell failed: " + content.get("ename", "") + ": " + content.get("evalue", ""))
            elif t == "status" and content.get("execution_state") == "idle":
                conn.close()
                return "".join(out)
        raise HubError(f"the cell did not finish within {timeout} s")
    finally:
        hub.call("DELETE", f"/user/{name}/api/kernels/{kernel['id']}", token=token)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hub", default=os.environ.get("HUB_URL", "http://127.0.0.1:8000"))
    p.add_argument("--token-file", default=os.environ.get("HUB_TOKEN_FILE", ".tmp/run/hub/api-token"))
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("spawn")
    s.add_argument("user")
    s.add_argument("--options", default="{}", help="user_options as JSON (project, image, gpus, cpus, memory_gb, ...)")
    r = sub.add_parser("run-cell")
    r.add_argument("user")
    r.add_argument("code")
    for n in ("status", "stop"):
        sub.add_parser(n).add_argument("user")
    b = sub.add_parser("bench")
    b.add_argument("user")
    b.add_argument("n", type=int)
    b.add_argument("--options", default="{}")
    a = p.parse_args(argv)
    with open(a.token_file, encoding="utf-8") as f:
        hub = Hub(a.hub, f.read().strip())
    try:
        if a.cmd == "spawn":
            t0 = time.monotonic()
            s = hub.spawn(a.user, json.loads(a.options))
            print(json.dumps({"ready": True, "url": s.get("url"), "seconds": round(time.monotonic() - t0, 2)}))
        elif a.cmd == "run-cell":
            sys.stdout.write(asyncio.run(run_cell(hub, a.user, a.code)))
        elif a.cmd == "status":
            print(json.dumps(hub.server(a.user)))
        elif a.cmd == "stop":
            hub.stop(a.user)
            print(json.dumps({"stopped": True}))
        elif a.cmd == "bench":
            times = []
            token = None
            for i in range(a.n):
                t0 = time.monotonic()
                hub.spawn(a.user, json.loads(a.options))
                token = token or hub.user_token(a.user)
                hub.call("GET", f"/user/{a.user}/api/status", token=token)
                times.append(time.monotonic() - t0)
                print(f"spawn {i + 1}: {times[-1]:.2f} s (submit -> notebook answers through the proxy)", flush=True)
                hub.stop(a.user)
            print(json.dumps({"spawns": a.n, "min": round(min(times), 2), "median": round(statistics.median(times), 2),
                              "max": round(max(times), 2)}))
    except HubError as e:
        print(f"hubctl: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
