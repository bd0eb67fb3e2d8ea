"""Check a workshop hub the way learners will use it, before they arrive.

    python workshop/room_check.py https://127.0.0.1:8000 --cert workshop/.run/hub/tls/hub.crt --users 3

logs in test learners through the hub's login form (each claims a fresh name,
roomcheckN..., with a password of its own), starts each one's server
through the hub's REST API, runs chapter 0 and lab 1 (student copy) in a kernel
of that learner's own Jupyter server (the kernel websocket, as JupyterLab does),
and prints what each learner got: their copy of the course, their device and
their hidden-case seed.  tests/test_workshop_hub.py uses the same functions.

It talks only to the hub's public URLs: what it checks is what a browser sees.
"""
from __future__ import annotations

import argparse
import json
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlparse

import requests
import websocket          # websocket-client (a jupyter_server dependency)

CHAPTER_0 = "allocator-course/chapters/00_setup_and_tour.ipynb"
LAB_1 = "allocator-course/labs/student/lab01_measure_it.ipynb"
GPU_TAG = "gpu"           # cells that need a real GPU (the CI leaves them out too)


class RoomError(RuntimeError):
    """The hub or a learner's server did not do what a learner needs; the message says what."""


@dataclass
class Learner:
    hub: str                              # https://host:port
    name: str
    token: str = ""
    session: requests.Session = field(default_factory=requests.Session)
    verify: str | bool = True             # the hub's certificate file (self-signed), or True

    def get(self, url: str, **kw) -> requests.Response:
        return self.request("GET", url, **kw)

    def request(self, method: str, url: str, **kw) -> requests.Response:
        # verify on every call: a session-wide verify loses to REQUESTS_CA_BUNDLE (requests#3829)
        kw.setdefault("timeout", 60)
        return self.session.request(method, url, verify=self.verify, **kw)

    def api(self, method: str, path: str, **kw) -> requests.Response:
        """A hub REST call (path under /hub/api) with this learner's token."""
        headers = {"Authorization": f"token {self.token}"}
        return self.request(method, f"{self.hub}/hub/api{path}", headers=headers, **kw)

    def server(self, method: str, path: str, **kw) -> requests.Response:
        """A call to this learner's own Jupyter server (path under /user/NAME/api)."""
        headers = {"Authorization": f"token {self.token}"}
        return self.request(method, f"{self.hub}/user/{self.name}/api{path}", headers=headers, **kw)


def log_in(hub: str, name: str, password: str, verify: str | bool = True) -> Learner:
    """Log in through the hub's login form (as a browser does), then ask for an API token.
    A name nobody used yet is claimed with `password`; a used one needs its password."""
    learner = Learner(hub, name, verify=verify)
    learner.get(f"{hub}/hub/login").raise_for_status()            # sets the _xsrf cookie
    r = learner.request("POST", f"{hub}/hub/login", allow_redirects=False,
                         data={"username": name, "password": password,
                               "_xsrf": learner.session.cookies.get("_xsrf", "")})
    if r.status_code != 302:
        raise RoomError(f"{name} could not log in (HTTP {r.status_code}): wrong password?")
    # the token request authenticates by its body (no cookie, so no xsrf check)
    r = requests.post(f"{hub}/hub/api/users/{name}/tokens", timeout=60, verify=verify,
                      json={"auth": {"username": name, "password": password}, "note": "room check"})
    r.raise_for_status()
    learner.token = r.json()["token"]
    return learner


def start_server(learner: Learner, timeout_s: float = 180) -> None:
    """POST /hub/api/users/NAME/server, then wait until the hub says it is ready."""
    r = learner.api("POST", f"/users/{learner.name}/server")
    if r.status_code not in (201, 202, 400):          # 400: already running
        raise RoomError(f"the hub refused to start {learner.name}'s server: "
                        f"{r.status_code} {r.text[:300]}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        model = learner.api("GET", f"/users/{learner.name}").json()
        server = model.get("servers", {}).get("")
        if server and server.get("ready"):
            return
        if not model.get("pending") and not server:
            raise RoomError(f"{learner.name}'s server failed to start: see the hub's log")
        time.sleep(0.5)
    raise RoomError(f"{learner.name}'s server was not ready after {timeout_s:.0f} s")


def stop_server(learner: Learner, timeout_s: float = 60) -> None:
    learner.api("DELETE", f"/users/{learner.name}/server")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        model = learner.api("GET", f"/users/{learner.name}").json()
        if not model.get("servers") and not model.get("pending"):
            return
        time.sleep(0.5)
    raise RoomError(f"{learner.name}'s server did not stop within {timeout_s:.0f} s")


class Kernel:
    """A kernel in a learner's server, driven over its websocket like JupyterLab does."""

    def __init__(self, learner: Learner, notebook_path: str):
        self.learner = learner
        # a session for the notebook: the kernel starts in the notebook's folder
        r = learner.server("POST", "/sessions", json={
            "path": notebook_path, "type": "notebook", "name": notebook_path.rsplit("/", 1)[-1],
            "kernel": {"name": "python3"}})
        if r.status_code != 201:
            raise RoomError(f"{learner.name}: no kernel for {notebook_path}: "
                            f"{r.status_code} {r.text[:300]}")
        self.session_id = r.json()["id"]
        self.kernel_id = r.json()["kernel"]["id"]
        url = urlparse(learner.hub)
        scheme = "wss" if url.scheme == "https" else "ws"
        ssl = {"ca_certs": learner.verify} if isinstance(learner.verify, str) else {}
        self.ws = websocket.create_connection(
            f"{scheme}://{url.netloc}/user/{learner.name}/api/kernels/{self.kernel_id}/channels",
            header=[f"Authorization: token {learner.token}"], timeout=300, sslopt=ssl)
        self.client_session = uuid.uuid4().hex

    def run(self, code: str) -> dict:
        """Execute one cell; returns {'stdout': str, 'error': None or 'Name: value'}."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "version": "5.3",
                       "session": self.client_session, "username": self.learner.name},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        out, error, replied, idle = [], None, False, False
        while not (replied and idle):
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                out.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        return {"stdout": "".join(out), "error": error}

    def close(self) -> None:
        self.ws.close()
        self.learner.server("DELETE", f"/sessions/{self.session_id}")


def run_notebook(learner: Learner, path: str) -> list[dict]:
    """Run every code cell of `path` (the learner's copy, read through their server),
    leaving out `gpu`-tagged cells; stops at the first error.  Returns one result per cell."""
    r = learner.server("GET", f"/contents/{path}")
    if r.status_code != 200:
        raise RoomError(f"{learner.name} has no {path} ({r.status_code}): was the course pulled?")
    cells = [c for c in r.json()["content"]["cells"]
             if c["cell_type"] == "code" and GPU_TAG not in c.get("metadata", {}).get("tags", [])]
    kernel = Kernel(learner, path)
    results = []
    try:
        for cell in cells:
            results.append(kernel.run(cell["source"]))
            if results[-1]["error"]:
                raise RoomError(f"{learner.name}: {path} failed in cell {len(results)}:\n"
                                f"{cell['source'][:400]}\n-> {results[-1]['error']}")
    finally:
        kernel.close()
    return results


PROBE = """import json, allocator_ref, allocator_ref.settings as s
from allocator_ref.labs.check import resolve_seed
print(json.dumps({"package": allocator_ref.__file__, "device": s.value("device"),
                  "seed": resolve_seed()}))"""


def probe(learner: Learner) -> dict:
    """Which copy of allocator_ref a learner's kernel imports, their device and lab seed."""
    kernel = Kernel(learner, CHAPTER_0)
    try:
        result = kernel.run(PROBE)
    finally:
        kernel.close()
    if result["error"]:
        raise RoomError(f"{learner.name}: the probe failed: {result['error']}")
    return json.loads(result["stdout"].strip().splitlines()[-1])


def room_check_name(i: int) -> str:
    """roomcheck<i><6 hex digits>: fresh each run, and what make collect leaves out
    (allocator_ref/labs/gradebook.py ROOM_CHECK_NAME): test learners are never graded."""
    import secrets
    return f"roomcheck{i}{secrets.token_hex(3)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hub", help="the hub's URL, e.g. https://127.0.0.1:8000")
    parser.add_argument("--cert", help="the hub's self-signed certificate (WORKSHOP_STATE/tls/hub.crt)")
    parser.add_argument("--users", type=int, default=2, help="how many test learners")
    args = parser.parse_args(argv)
    import secrets
    for i in range(1, args.users + 1):
        # a fresh name and password each run: the first log-in claims the name, as a learner's
        # does (delete the roomcheck users afterwards in Hub Control Panel > Admin)
        learner = log_in(args.hub.rstrip("/"), room_check_name(i),
                         secrets.token_urlsafe(16), verify=args.cert or True)
        start_server(learner)
        for path in (CHAPTER_0, LAB_1):
            run_notebook(learner, path)
        print(learner.name, probe(learner))
        stop_server(learner)
    print("the room is ready")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
