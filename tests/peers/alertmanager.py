"""A real Alertmanager for the tests (Debian's `prometheus-alertmanager`; `.ci/run` installs
it), on a free 127.0.0.1 port, clustering off, with a receiver that sends nowhere unless a
test gives a webhook URL. Alerts are posted to its API v2 as Prometheus would post them."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.postgres import free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"


class AlertmanagerServer:
    def __init__(
        self,
        webhook_url: str | None = None,
        *,
        webhook_token: str | None = None,
        group_by: tuple[str, ...] = (),
    ) -> None:
        """`webhook_token`: sent as a bearer token (`http_config.authorization`);
        `group_by` set: notifications grouped by those labels, sent within a second of a
        change (group_wait 100ms, group_interval 1s) and repeated only hourly."""
        self.root = Path(tempfile.mkdtemp(prefix="kelpie-am-"))
        self.port = free_port()
        self._webhook_url = webhook_url
        self._webhook_token = webhook_token
        self._group_by = group_by
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver: dict[str, Any] = {"name": "kelpie"}
        if self._webhook_url:
            webhook: dict[str, Any] = {"url": self._webhook_url, "send_resolved": True}
            if self._webhook_token:
                webhook["http_config"] = {
                    "authorization": {"type": "Bearer", "credentials": self._webhook_token}
                }
            receiver["webhook_configs"] = [webhook]
        route: dict[str, Any] = {"receiver": "kelpie"}
        if self._group_by:
            route |= {
                "group_by": list(self._group_by),
                "group_wait": "100ms",
                "group_interval": "1s",
                "repeat_interval": "1h",
            }
        config = {"route": route, "receivers": [receiver]}
        (self.root / "alertmanager.yml").write_text(json.dumps(config))
        self._process = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={self.root / 'alertmanager.yml'}",
                f"--storage.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "alertmanager.log").open("wb"),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError((self.root / "alertmanager.log").read_text()[-2000:])
            try:
                self.get("/api/v2/status")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)  # a child process starting, not a lease or an expiry
        raise RuntimeError("alertmanager never answered")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as answer:
            return json.load(answer)

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        request = urllib.request.Request(
            self.url + "/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 200

    def silences(self) -> list[dict[str, Any]]:
        return [s for s in self.get("/api/v2/silences") if s["status"]["state"] == "active"]

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)
