"""A real Prometheus for the tests (Debian's `prometheus` package; `.ci/run` installs it).

Known series are written as OpenMetrics text and turned into TSDB blocks with `promtool tsdb
create-blocks-from openmetrics`, so a query has exact, known answers; the server runs on a
free 127.0.0.1 port with `query_log_file` set, so a test reads back the exact query kelpie
sent. One server per test module: starting one takes about a second, the blocks a bit more.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tests.postgres import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@dataclass(frozen=True)
class Sample:
    """One sample of a series: `labels` include `__name__`; `at` is a Unix time in seconds."""

    metric: str
    labels: dict[str, str]
    value: float
    at: float

    def line(self) -> str:
        rendered = ",".join(f"{name}={json.dumps(value)}" for name, value in self.labels.items())
        return f"{self.metric}{{{rendered}}} {self.value} {self.at:.3f}"


class PrometheusServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kelpie-prom-"))
        self.port = free_port()
        self.query_log = self.root / "queries.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def load(self, samples: Iterable[Sample], types: dict[str, str] | None = None) -> None:
        """Write `samples` as TSDB blocks (before `start`); `types` maps metric → gauge/counter."""
        lines = [f"# TYPE {metric} {kind}" for metric, kind in (types or {}).items()]
        by_metric = sorted(samples, key=lambda sample: (sample.metric, sample.at))
        lines += [sample.line() for sample in by_metric]
        source = self.root / "series.om"
        source.write_text("\n".join([*lines, "# EOF", ""]))
        data = self.root / "data"
        subprocess.run(
            [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        config = self.root / "prometheus.yml"
        config.write_text(f"global:\n  query_log_file: {self.query_log}\n")
        self._process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
                "--web.enable-admin-api",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "prometheus.log").open("wb"),
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                log = (self.root / "prometheus.log").read_text()[-2000:]
                raise RuntimeError(f"prometheus exited: {log}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)  # a child process starting, not a lease or an expiry
        raise RuntimeError("prometheus never became ready")

    def queries(self) -> list[str]:
        """The queries Prometheus ran, in order, as its query log recorded them."""
        if not self.query_log.exists():
            return []
        entries = [json.loads(line) for line in self.query_log.read_text().splitlines() if line]
        return [entry["params"]["query"] for entry in entries]

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)
