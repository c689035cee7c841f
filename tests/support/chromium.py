"""Open a page in headless Chromium (Debian's `chromium`) and watch it through
the DevTools protocol over a pipe (`--remote-debugging-pipe`: no port, no
websocket library): every request the page makes, script exceptions,
console errors and warnings, the DOM once the page says it is done, and a
screenshot.

Name resolution is disabled (`--host-resolver-rules=MAP * ~NOTFOUND`), so
even a request the page should not make cannot leave the machine; the tests
check the list of requests is empty of anything but the page itself.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class PageVisit:
    dom: str = ""
    requests: list[str] = field(default_factory=list)  # URLs the page asked for (its own file included)
    exceptions: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)  # (level, text)
    log: list[tuple[str, str]] = field(default_factory=list)  # browser log entries (CSP, network)
    done: bool = False  # the page's "done" condition became true in time
    screenshot: bytes | None = None


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _Pipe:
    def __init__(self, process: subprocess.Popen, write_fd: int, read_fd: int) -> None:
        self.process = process
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply is None:
                raise TimeoutError(f"no answer to {method}")
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def pump(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (reply := self._read(deadline)) is not None:
            self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any] | None:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


def _moved_up(fd: int) -> int:
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def visit(url: str, workdir: Path, done_js: str = "true", width: int = 1200, height: int = 900,
          timeout: float = 60, screenshot: bool = False, full_page: bool = False) -> PageVisit:
    """Load `url`, wait until `done_js` evaluates true (or `timeout`), and
    return what happened. `workdir` holds the throw-away browser profile."""
    binary = chromium_path()
    if binary is None:
        raise RuntimeError("chromium is not installed: run tools/setup.sh (it installs Debian's chromium)")
    profile = workdir / "chromium-profile"
    to_browser_read, to_browser_write = os.pipe()
    from_browser_read, from_browser_write = os.pipe()
    # the browser's ends, moved above 3 and 4 so that dup2 onto 3 and 4 below
    # always makes a new, inheritable descriptor
    to_browser_read = _moved_up(to_browser_read)
    from_browser_write = _moved_up(from_browser_write)

    def give_fds() -> None:  # the browser reads commands on fd 3 and answers on fd 4
        os.dup2(to_browser_read, 3)
        os.dup2(from_browser_write, 4)

    process = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=give_fds, close_fds=False)
    os.close(to_browser_read)
    os.close(from_browser_write)
    pipe = _Pipe(process, to_browser_write, from_browser_read)
    result = PageVisit()
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        pipe.send("Page.navigate", {"url": url}, session=session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = pipe.send("Runtime.evaluate", {"expression": f"Boolean({done_js})", "returnByValue": True},
                               session=session)
            if answer.get("result", {}).get("value") is True:
                result.done = True
                break
            pipe.pump(0.2)
        pipe.pump(0.5)  # late events (requests, console) after the page settled
        result.dom = pipe.send("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                                    "returnByValue": True}, session=session)["result"]["value"]
        if screenshot:
            params: dict[str, Any] = {"format": "png"}
            if full_page:
                size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                params.update(captureBeyondViewport=True,
                              clip={"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1})
            result.screenshot = base64.b64decode(pipe.send("Page.captureScreenshot", params, session=session,
                                                           timeout=60)["data"])
        for event in pipe.events:
            method, params = event.get("method"), event.get("params", {})
            if event.get("sessionId") != session:
                continue  # the browser's own (it tries update and account services; they cannot resolve)
            if method == "Network.requestWillBeSent":
                result.requests.append(params["request"]["url"])
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                result.exceptions.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                result.console.append((params.get("type", ""), text))
            elif method == "Log.entryAdded":
                entry = params["entry"]
                result.log.append((entry.get("level", ""), f"{entry.get('source')}: {entry.get('text')}"))
        try:
            pipe.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(to_browser_write)
        os.close(from_browser_read)
    return result
