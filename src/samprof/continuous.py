"""Continuous profiling: the process profiled all the time, one part per
interval sent to a fleet backend or written to a directory.

Every ``interval`` seconds the agent cuts the running profiles (the C core
hands over the samples since the last cut and goes on; nothing falls
between two parts) and sends each part to Grafana Pyroscope (also Grafana
Cloud Profiles and Alloy's ``pyroscope.receive_http``)::

    import samprof.continuous

    agent = samprof.continuous.start(
        "http://pyroscope:4040",
        app_name="shop.web",
        tags={"region": "eu"},
        profiles=("cpu", "heap"),
    )
    ...
    agent.stop()   # or let the process end: the last part is sent at exit

Every argument may come from the environment instead (``SAMPROF_PUSH_URL``,
``SAMPROF_PUSH_APP``, ...; see :func:`start`), so that one deployment's
settings need no code: ``samprof.continuous.start()`` with no arguments, or
``samprof serve --push URL -- app.py``.

What is sent, per part: CPU (``process_cpu``) and wall (``wall``) time
sampled in the interval; for ``heap``, Go's heap profile with the
allocations made in the interval (``alloc_objects``, ``alloc_space``) and
what is in use at its end (``inuse_objects``, ``inuse_space``), as
Pyroscope's Go agent sends it (``memory``). Each carries the app name, the
tags, a ``pid`` label and, per sample, the labels of ``samprof.labels()``
and of the web middleware (``route``, ``method``, ``status``), which
Pyroscope makes series of: one app's flame graph splits by route.

Two wire protocols, as Pyroscope's source defines them:

- ``protocol="ingest"``: ``POST /ingest?name=APP{k=v,...}&from=&until=
  &spyName=samprof&sampleRate=HZ``, the CPU and wall profiles as raw pprof
  (``format=pprof``), the heap one as a multipart form with a
  ``sample_type_config`` (what Pyroscope's Go agent sends).
- ``protocol="push"``: the Connect API, ``POST
  /push.v1.PusherService/Push`` with a gzipped ``PushRequest`` protobuf,
  one series per profile labelled ``__name__``, ``service_name``,
  ``__delta__="false"`` and the tags.

The application never waits for any of it: one thread cuts the parts on
time, another uploads them; a bounded queue sits between (when the backend
is slow or down the oldest parts are dropped, and counted), failed uploads
are retried with exponential backoff and jitter, a part the backend refuses
is dropped and counted. After ``fork()`` (a pre-fork server's workers, a
multiprocessing pool) each child runs an agent of its own, with its own
``pid``. At interpreter exit the last part is cut and sent, within
``exit_timeout`` seconds.
"""

from __future__ import annotations

import atexit
import base64
import collections
import gzip
import http.client
import json
import logging
import os
import random
import re
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from samprof import _core
from samprof._profiler import (
    CPUProfiler,
    ProfilerError,
    WallProfiler,
    _check_hz,
    _hide_file,
)

__all__ = ["Agent", "KINDS", "PROTOCOLS", "start", "current"]

KINDS = ("cpu", "wall", "heap")
PROTOCOLS = ("ingest", "push")
ENV_PREFIX = "SAMPROF_PUSH_"

log = logging.getLogger("samprof.continuous")
_hide_file(__file__)

# Pyroscope's profile names (its __name__ label) for each kind.
_METRIC = {"cpu": "process_cpu", "wall": "wall", "heap": "memory"}
# What Pyroscope allows (api/model/labelset in grafana/pyroscope): an app
# name of these characters, tag keys of these; a tag value runs to the
# next "," or "}" and is trimmed, so neither may be in one.
_APP_NAME = re.compile(r"^[A-Za-z0-9_.\-/]+$")
_TAG_KEY = re.compile(r"^[A-Za-z0-9_.]+$")
_TENANT = re.compile(r"^[A-Za-z0-9!\-_.*'()]{1,150}$")
# Pyroscope refuses a series with more than 30 label names; the agent's own
# take up to 5 (__name__, service_name, __delta__, pyroscope_spy, pid) and
# samples' labels (route, method, status, yours) add to the rest.
_MAX_TAGS = 16
# Distinct samples in a CPU or wall part; the rest are counted under
# "<samprof: stack table full>". Pyroscope refuses a profile of more than
# 16,000 samples (max_profile_stacktrace_samples).
MAX_SAMPLES = 15000
# The heap part's sample types, as Pyroscope's Go agent describes them.
_HEAP_SAMPLE_TYPES = {
    "alloc_objects": {"units": "objects"},
    "alloc_space": {"units": "bytes"},
    "inuse_objects": {"units": "objects", "aggregation": "average"},
    "inuse_space": {"units": "bytes", "aggregation": "average"},
}
# Backoff between retries of a failed upload: doubling from BACKOFF_MIN up
# to BACKOFF_MAX seconds, each wait drawn at random from its upper half.
BACKOFF_MIN = 1.0
BACKOFF_MAX = 60.0
# Statuses after which the same upload may succeed later.
_RETRY_STATUSES = {408, 425, 429, 500, 502, 503, 504}


class Part:
    """One profile of one interval, ready to send."""

    __slots__ = ("kind", "data", "time_ns", "duration_ns")

    def __init__(self, kind: str, data: bytes, time_ns: int, duration_ns: int) -> None:
        self.kind = kind
        self.data = data  # gzipped pprof
        self.time_ns = time_ns
        self.duration_ns = duration_ns

    @property
    def until_ns(self) -> int:
        return self.time_ns + self.duration_ns


class _Refused(Exception):
    """The backend answered an upload with an error status."""

    def __init__(self, status: int, body: bytes) -> None:
        text = body[:300].decode("utf-8", "replace").strip()
        super().__init__(f"HTTP {status}: {text}" if text else f"HTTP {status}")
        self.status = status
        self.retry = status in _RETRY_STATUSES


# -- configuration ---------------------------------------------------------------


def _env(name: str) -> Optional[str]:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value else None


def _parse_tags(text: str) -> Dict[str, str]:
    tags: Dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{ENV_PREFIX}TAGS: expected KEY=VALUE, got {item.strip()!r}")
        tags[key.strip()] = value.strip()
    return tags


def _default_app_name() -> str:
    """The program's name: python -m pkg or pkg/__main__.py gives pkg,
    app.py gives app."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name.endswith(".__main__"):
        name = name[: -len(".__main__")]
    if not name or name == "__main__":
        argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
        name = os.path.splitext(os.path.basename(argv0))[0]
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    return name or "python"


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, not {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url must be an http:// or https:// URL with a host, got {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"url must not have a query or fragment, got {url!r}")
    return url.rstrip("/")


def _check_tags(tags: object) -> Dict[str, str]:
    if not isinstance(tags, Mapping):
        raise TypeError(f"tags must be a mapping of str to str, not {type(tags).__name__}")
    out: Dict[str, str] = {}
    for key, value in tags.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"tags must map str to str, got {key!r}: {value!r}")
        if not _TAG_KEY.match(key) or key.startswith("__"):
            raise ValueError(
                f"tag name {key!r}: Pyroscope allows letters, digits, '_' and '.', "
                "and names starting with '__' are its own"
            )
        if key in ("pid", "service_name"):
            raise ValueError(f"tag name {key!r} is set by the agent")
        if not value.strip() or any(c in value for c in ",{}=") or value != value.strip():
            raise ValueError(
                f"tag {key}={value!r}: a value must be non-empty, without surrounding "
                "spaces, and hold none of , { } ="
            )
        out[key] = value
    if len(out) > _MAX_TAGS:
        raise ValueError(f"at most {_MAX_TAGS} tags, got {len(out)}")
    return out


def _check_profiles(profiles: object) -> Tuple[str, ...]:
    if isinstance(profiles, str):
        profiles = [p.strip() for p in profiles.split(",") if p.strip()]
    if not isinstance(profiles, Sequence) or not profiles:
        raise ValueError(f"profiles must name one or more of {', '.join(KINDS)}")
    for kind in profiles:
        if kind not in KINDS:
            raise ValueError(f"unknown profile {kind!r}: choose among {', '.join(KINDS)}")
    if len(set(profiles)) != len(profiles):
        raise ValueError(f"profiles names one twice: {list(profiles)!r}")
    return tuple(k for k in KINDS if k in profiles)


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return float(value)


class Config:
    """The agent's settings, checked: see :func:`start`."""

    def __init__(
        self,
        url: Optional[str] = None,
        app_name: Optional[str] = None,
        *,
        tags: Optional[Mapping[str, str]] = None,
        profiles: Optional[Union[str, Sequence[str]]] = None,
        interval: Optional[float] = None,
        protocol: Optional[str] = None,
        hz: Optional[int] = None,
        directory: Optional[str] = None,
        basic_auth: Optional[Tuple[str, str]] = None,
        token: Optional[str] = None,
        tenant: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        queue_size: int = 32,
        exit_timeout: Optional[float] = None,
        heap_rate: Optional[int] = None,
        ca_file: Optional[str] = None,
    ) -> None:
        url = url if url is not None else _env("URL")
        directory = directory if directory is not None else _env("DIR")
        if url is None and directory is None:
            raise ValueError(
                f"nowhere to send profiles: give url or directory (or set {ENV_PREFIX}URL "
                f"or {ENV_PREFIX}DIR)"
            )
        self.url = _check_url(url) if url is not None else None
        self.directory = os.path.abspath(directory) if directory is not None else None
        app_name = app_name if app_name is not None else _env("APP") or _default_app_name()
        if not isinstance(app_name, str) or not _APP_NAME.match(app_name):
            raise ValueError(f"app_name {app_name!r}: Pyroscope allows letters, digits and _ . - /")
        self.app_name = app_name
        env_tags = _env("TAGS")
        self.tags = _check_tags(
            tags if tags is not None else _parse_tags(env_tags) if env_tags else {}
        )
        self.profiles = _check_profiles(
            profiles if profiles is not None else _env("PROFILES") or ("cpu", "heap")
        )
        self.interval = _number(
            "interval", interval if interval is not None else _env("INTERVAL") or 10.0, 0.1, 3600
        )
        self.protocol = protocol if protocol is not None else _env("PROTOCOL") or "ingest"
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be 'ingest' or 'push', got {self.protocol!r}")
        self.hz = _check_hz(int(_number("hz", hz if hz is not None else _env("HZ") or 100, 1, 1e9)))
        env_auth = _env("BASIC_AUTH")
        if basic_auth is None and env_auth is not None:
            user, sep, password = env_auth.partition(":")
            if not sep:
                raise ValueError(f"{ENV_PREFIX}BASIC_AUTH must be USER:PASSWORD")
            basic_auth = (user, password)
        if basic_auth is not None and (
            not isinstance(basic_auth, tuple)
            or len(basic_auth) != 2
            or not all(isinstance(x, str) for x in basic_auth)
        ):
            raise TypeError("basic_auth must be a (user, password) tuple of str")
        token = token if token is not None else _env("TOKEN")
        if basic_auth is not None and token is not None:
            raise ValueError("give basic_auth or token, not both")
        self.basic_auth = basic_auth
        self.token = token
        tenant = tenant if tenant is not None else _env("TENANT")
        if tenant is not None and not _TENANT.match(tenant):
            raise ValueError(f"tenant {tenant!r} is not a valid Pyroscope tenant id")
        self.tenant = tenant
        self.headers = dict(headers or {})
        self.timeout = _number(
            "timeout", timeout if timeout is not None else _env("TIMEOUT") or 10.0, 0.01, 600
        )
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"queue_size must be a positive int, got {queue_size!r}")
        self.queue_size = queue_size
        self.exit_timeout = _number(
            "exit_timeout",
            exit_timeout if exit_timeout is not None else _env("EXIT_TIMEOUT") or 3.0,
            0,
            600,
        )
        self.heap_rate = heap_rate if heap_rate is not None else _core.HEAP_RATE
        if isinstance(self.heap_rate, bool) or not isinstance(self.heap_rate, int):
            raise TypeError("heap_rate must be an int")
        if self.heap_rate < 1:
            raise ValueError(f"heap_rate must be >= 1, got {self.heap_rate!r}")
        self.ca_file = ca_file if ca_file is not None else _env("CA_FILE")


# -- the profiles ----------------------------------------------------------------


class _Sources:
    """The running profiles the agent cuts: the CPU or wall profile (a
    wall profile gives the CPU one too, its on-CPU part, when both are
    asked for: only one of them can run), and the heap profile (the
    process's own if one runs, e.g. samprof serve's, else the agent's)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.kinds = config.profiles
        self.time: Optional[Any] = None
        self.heap: Optional[Any] = None
        self.own_heap = False

    def start(self) -> None:
        from samprof import _heap

        kinds = self.kinds
        if "wall" in kinds or "cpu" in kinds:
            cls = WallProfiler if "wall" in kinds else CPUProfiler
            prof = cls(self.config.hz, max_stacks=MAX_SAMPLES)
            prof._by_thread = False
            prof.start()
            self.time = prof
        if "heap" in kinds:
            heap = _heap._slot.active
            if heap is None:
                heap = _heap.HeapProfiler(self.config.heap_rate)
                try:
                    heap.start()
                except ProfilerError:
                    self.stop()
                    raise
                self.own_heap = True
            heap._delta()  # the first part starts now
            self.heap = heap

    def cut(self) -> List[Part]:
        parts: List[Part] = []
        if self.time is not None and self.time.running:
            both = "cpu" in self.kinds and "wall" in self.kinds
            raw, cpu, t, d = self.time._cut(cpu_part=both, thread_labels=False)
            kind = "wall" if isinstance(self.time, WallProfiler) else "cpu"
            parts.append(Part(kind, _gzip(raw), t, d))
            if both:
                parts.append(Part("cpu", _gzip(cpu), t, d))
        if self.heap is not None and self.heap.running:
            raw, t, d = self.heap._delta()
            parts.append(Part("heap", _gzip(raw), t, d))
        return parts

    def stop(self) -> None:
        time_prof, self.time = self.time, None
        if time_prof is not None and time_prof.running:
            time_prof.stop()
        heap, self.heap = self.heap, None
        if heap is not None and self.own_heap and heap.running:
            heap.stop()
        self.own_heap = False


def _gzip(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=6, mtime=0)


# -- the wire ---------------------------------------------------------------------


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (bytes, string or message)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def push_request(series: Sequence[Tuple[Sequence[Tuple[str, str]], Sequence[bytes]]]) -> bytes:
    """A push.v1.PushRequest (grafana/pyroscope api/push/v1/push.proto):
    ``series`` = 1 of RawProfileSeries{labels = 1 (types.v1.LabelPair{name
    = 1, value = 2}), samples = 2 (RawSample{raw_profile = 1, ID = 2})}."""
    out = bytearray()
    for labels, profiles in series:
        body = bytearray()
        for name, value in labels:
            body += _field(1, _field(1, name.encode()) + _field(2, value.encode()))
        for data in profiles:
            body += _field(2, _field(1, data) + _field(2, str(uuid.uuid4()).encode()))
        out += _field(1, bytes(body))
    return bytes(out)


def _multipart(fields: Sequence[Tuple[str, str, bytes]]) -> Tuple[str, bytes]:
    """(content type, body) of a multipart/form-data body of file parts
    (name, file name, content): Pyroscope reads only parts with a file
    name."""
    boundary = uuid.uuid4().hex
    body = bytearray()
    for name, filename, content in fields:
        body += (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        body += content + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", bytes(body)


class _Uploader:
    """Sends parts to the backend over HTTP(S), one request at a time, in
    one of the two protocols."""

    def __init__(self, config: Config, pid: int) -> None:
        self.config = config
        self.pid = pid
        parts = urllib.parse.urlsplit(config.url or "")
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port
        self.base_path = parts.path.rstrip("/")
        self.context: Optional[ssl.SSLContext] = None
        if self.https:
            self.context = ssl.create_default_context(cafile=config.ca_file)
        headers = {"User-Agent": f"samprof/{_version()}"}
        if config.basic_auth is not None:
            pair = ":".join(config.basic_auth).encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif config.token is not None:
            headers["Authorization"] = f"Bearer {config.token}"
        if config.tenant is not None:
            headers["X-Scope-OrgID"] = config.tenant
        headers.update(config.headers)
        self.headers = headers

    def labels(self) -> Dict[str, str]:
        """The labels every series carries besides __name__."""
        return {**self.config.tags, "pid": str(self.pid)}

    def unit(self, batch: Sequence[Part]) -> List[Part]:
        """The parts of batch that the next request sends: one interval's
        all at once (push), or one part (ingest)."""
        return list(batch) if self.config.protocol == "push" else list(batch[:1])

    def send(self, parts: Sequence[Part], timeout: float) -> None:
        """Sends parts in one request; raises _Refused or OSError
        (http.client's errors are OSErrors or HTTPException) on failure."""
        if self.config.protocol == "push":
            self._push(parts, timeout)
        else:
            (part,) = parts
            self._ingest(part, timeout)

    def _ingest(self, part: Part, timeout: float) -> None:
        tags = ",".join(f"{k}={v}" for k, v in sorted(self.labels().items()))
        query = {
            "name": f"{self.config.app_name}{{{tags}}}",
            # Unix nanoseconds (Pyroscope reads a 19-digit time so), so the
            # parts' spans follow each other exactly.
            "from": str(part.time_ns),
            "until": str(part.until_ns),
            "spyName": "samprof",
            "sampleRate": str(self.config.hz),
        }
        if part.kind == "heap":
            config = json.dumps(_HEAP_SAMPLE_TYPES).encode()
            content_type, body = _multipart(
                [
                    ("profile", "profile.pprof", part.data),
                    ("sample_type_config", "sample_type_config.json", config),
                ]
            )
        else:
            query["format"] = "pprof"
            content_type, body = "application/octet-stream", part.data
        path = f"{self.base_path}/ingest?{urllib.parse.urlencode(query)}"
        self._post(path, body, {"Content-Type": content_type}, timeout)

    def _push(self, parts: Sequence[Part], timeout: float) -> None:
        base = sorted(self.labels().items())
        series = []
        for part in parts:
            labels = [
                ("__name__", _METRIC[part.kind]),
                ("service_name", self.config.app_name),
                # Our parts are deltas: Pyroscope must not take the
                # difference of heap allocations itself.
                ("__delta__", "false"),
                ("pyroscope_spy", "samprof"),
                *base,
            ]
            series.append((labels, [part.data]))
        body = gzip.compress(push_request(series), compresslevel=6, mtime=0)
        headers = {"Content-Type": "application/proto", "Content-Encoding": "gzip"}
        self._post(f"{self.base_path}/push.v1.PusherService/Push", body, headers, timeout)

    def _post(self, path: str, body: bytes, headers: Dict[str, str], timeout: float) -> None:
        if self.https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("POST", path, body=body, headers={**self.headers, **headers})
            response = conn.getresponse()
            answer = response.read(4096)
        finally:
            conn.close()
        if not 200 <= response.status < 300:
            raise _Refused(response.status, answer)


def _version() -> str:
    import samprof

    return samprof.__version__


# -- the agent ----------------------------------------------------------------------


class Agent:
    """The running agent of this process: see :func:`start`.

    ``stats()`` says what it did; ``stop()`` ends it, sending the last
    part first.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._setup()

    def _setup(self) -> None:
        """The state of one process's agent (again in a forked child)."""
        self.pid = os.getpid()
        self._sources = _Sources(self.config)
        self._uploader = _Uploader(self.config, self.pid) if self.config.url else None
        self._files: Dict[str, Any] = {}
        if self.config.directory is not None:
            from samprof._middleware import _Files

            for kind in self.config.profiles:
                self._files[kind] = _Files(
                    self.config.directory, self.config.app_name, f".{kind}.pb.gz"
                )
        self._queue: Deque[List[Part]] = collections.deque()
        self._in_flight: Optional[List[Part]] = None  # the sender's (queue[0])
        # Reentrant: stop() may run in a SIGTERM handler that interrupted
        # its thread inside stats().
        self._wake = threading.Condition(threading.RLock())
        self._stopping = threading.Event()
        self._deadline: Optional[float] = None  # of the uploads at stop
        self._counts: Dict[str, int] = collections.Counter()
        self._last_error: Optional[str] = None
        self._cutter: Optional[threading.Thread] = None
        self._cut_finished = False  # the last part is cut, the profiles stopped
        self._sender: Optional[threading.Thread] = None
        self.running = False

    # -- lifecycle ----------------------------------------------------------

    def _start(self) -> None:
        self._sources.start()
        self.running = True
        self._cutter = threading.Thread(target=self._cut_every, name="samprof-cut", daemon=True)
        self._cutter.start()
        if self._uploader is not None:
            self._sender = threading.Thread(target=self._send_all, name="samprof-push", daemon=True)
            self._sender.start()

    def stop(self, timeout: Optional[float] = None) -> None:
        """Cut the last part, stop the profiles, and send what is queued,
        giving up after ``timeout`` seconds (default: exit_timeout); what
        could not be sent by then is dropped and counted."""
        global _agent
        with self._lock:
            if not self.running or self.pid != os.getpid():
                return
            self.running = False
        wait = self.config.exit_timeout if timeout is None else timeout
        self._deadline = time.monotonic() + wait
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        if self._cutter is not None:
            # Bounded: a SIGTERM handler may have interrupted this thread
            # while it held what the cutter needs.
            self._cutter.join(wait + 1.0)
        if self._sender is not None:
            self._sender.join(max(0.0, self._deadline - time.monotonic()) + 0.5)
        with self._wake:
            for batch in self._queue:
                self._counts["parts_dropped_at_exit"] += len(batch)
            self._queue.clear()
        if _agent is self:
            _agent = None

    def stats(self) -> Dict[str, Any]:
        """Counts since start (in this process): ``parts`` cut,
        ``parts_sent``, ``uploads`` and ``upload_errors`` (requests),
        ``retries``, ``parts_dropped_queue_full`` (the oldest, when the
        backend could not keep up), ``parts_refused`` (the backend
        answered a status that retrying cannot fix), ``parts_dropped_at_exit``,
        ``files`` written, ``file_errors``, ``bytes_sent``; ``queued``
        (periods waiting) and ``last_error``."""
        with self._wake:
            out: Dict[str, Any] = {
                key: self._counts.get(key, 0)
                for key in (
                    "parts",
                    "parts_sent",
                    "uploads",
                    "upload_errors",
                    "retries",
                    "parts_dropped_queue_full",
                    "parts_refused",
                    "parts_dropped_at_exit",
                    "files",
                    "file_errors",
                    "bytes_sent",
                )
            }
            out["queued"] = len(self._queue)
            out["last_error"] = self._last_error
            out["pid"] = self.pid
        return out

    # -- cutting ----------------------------------------------------------------

    def _cut_every(self) -> None:
        interval = self.config.interval
        next_cut = time.monotonic() + interval
        while not self._stopping.wait(max(0.0, next_cut - time.monotonic())):
            self._cut()
            next_cut += interval
            if next_cut < time.monotonic():  # the process was suspended
                next_cut = time.monotonic() + interval
        self._cut()
        try:
            self._sources.stop()
        except Exception as e:  # noqa: BLE001 - stopping must not raise at exit
            log.warning("samprof: stopping the profiles failed: %s", e)
        with self._wake:
            self._cut_finished = True
            self._wake.notify_all()  # the sender may finish now

    def _cut(self) -> None:
        try:
            parts = self._sources.cut()
        except Exception as e:  # noqa: BLE001 - keep the agent alive
            log.warning("samprof: cutting the profiles failed: %s", e)
            return
        if not parts:
            return
        self._write_files(parts)
        with self._wake:
            self._counts["parts"] += len(parts)
            if self._uploader is None:
                return
            self._queue.append(parts)
            while len(self._queue) > self.config.queue_size:
                # The oldest, unless it is being sent: then the next.
                oldest = 1 if self._queue[0] is self._in_flight else 0
                dropped = self._queue[oldest]
                del self._queue[oldest]
                self._counts["parts_dropped_queue_full"] += len(dropped)
            self._wake.notify_all()

    def _write_files(self, parts: Sequence[Part]) -> None:
        for part in parts:
            files = self._files.get(part.kind)
            if files is None:
                continue
            try:
                files.write(part.data)
            except OSError as e:
                with self._wake:
                    self._counts["file_errors"] += 1
                    self._note_error(f"writing to {self.config.directory}: {e}")
                continue
            with self._wake:
                self._counts["files"] += 1

    # -- sending ----------------------------------------------------------------

    def _note_error(self, text: str) -> None:
        if text != self._last_error:
            log.warning("samprof: %s", text)
        self._last_error = text

    def _send_all(self) -> None:
        """The sender thread: the oldest interval's parts first, each
        request retried until it succeeds, the backend refuses it, the
        queue drops it or the agent stops."""
        assert self._uploader is not None
        failures = 0
        while True:
            with self._wake:
                while not self._queue and not self._cut_finished:
                    self._wake.wait()
                if not self._queue:
                    return
                batch = self._in_flight = self._queue[0]
                unit = self._uploader.unit(batch)
            timeout = self.config.timeout
            if self._deadline is not None:
                timeout = min(timeout, self._deadline - time.monotonic())
                if timeout <= 0:
                    return
            try:
                self._uploader.send(unit, timeout)
            except (_Refused, OSError, http.client.HTTPException) as e:
                with self._wake:
                    self._counts["upload_errors"] += 1
                    self._note_error(f"upload to {self.config.url} failed: {e}")
                    if isinstance(e, _Refused) and not e.retry:
                        self._counts["parts_refused"] += len(unit)
                        self._done(batch, unit)
                        continue
                failures += 1
                self._counts["retries"] += 1
                delay = random.uniform(0.5, 1) * min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (failures - 1))
                if self._deadline is not None:
                    # Stopping: retry while the exit timeout lasts.
                    delay = min(delay, self._deadline - time.monotonic())
                    if delay <= 0:
                        return
                    time.sleep(delay)
                else:
                    self._stopping.wait(delay)
                continue
            failures = 0
            with self._wake:
                self._counts["uploads"] += 1
                self._counts["parts_sent"] += len(unit)
                self._counts["bytes_sent"] += sum(len(p.data) for p in unit)
                self._done(batch, unit)

    def _done(self, batch: List[Part], unit: Sequence[Part]) -> None:
        """unit, of batch, needs no more sending (lock held)."""
        del batch[: len(unit)]
        if not batch and self._queue and self._queue[0] is batch:
            self._queue.popleft()

    # -- fork -----------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """The parent's threads and profiles are gone here: start an agent
        of this process's own; the parent's queued parts stay the
        parent's."""
        self._lock = threading.Lock()
        was_running = self.running
        self._setup()
        if was_running:
            try:
                self._start()
            except Exception as e:  # noqa: BLE001 - never break the child
                log.warning("samprof: the continuous agent could not start after fork: %s", e)


_agent: Optional[Agent] = None
_agent_lock = threading.Lock()


def current() -> Optional[Agent]:
    """The agent running in this process, or None."""
    return _agent


def start(url: Optional[str] = None, app_name: Optional[str] = None, **settings: Any) -> Agent:
    """Start profiling this process continuously; returns the Agent.

    The settings are :class:`Config`'s keyword arguments. Those left out
    are read from environment variables, then defaults:

    ========================  ================================  ==================
    argument                  environment variable              default
    ========================  ================================  ==================
    ``url``                   ``SAMPROF_PUSH_URL``              (url or directory)
    ``app_name``              ``SAMPROF_PUSH_APP``              the program's name
    ``tags``                  ``SAMPROF_PUSH_TAGS`` (k=v,k=v)   none
    ``profiles``              ``SAMPROF_PUSH_PROFILES``         ``cpu,heap``
    ``interval`` (seconds)    ``SAMPROF_PUSH_INTERVAL``         10
    ``protocol``              ``SAMPROF_PUSH_PROTOCOL``         ``ingest``
    ``hz``                    ``SAMPROF_PUSH_HZ``               100
    ``directory``             ``SAMPROF_PUSH_DIR``              none
    ``basic_auth``            ``SAMPROF_PUSH_BASIC_AUTH`` (u:p) none
    ``token`` (Bearer)        ``SAMPROF_PUSH_TOKEN``            none
    ``tenant``                ``SAMPROF_PUSH_TENANT``           none
    ``timeout`` (seconds)     ``SAMPROF_PUSH_TIMEOUT``          10
    ``exit_timeout``          ``SAMPROF_PUSH_EXIT_TIMEOUT``     3
    ``ca_file``               ``SAMPROF_PUSH_CA_FILE``          the system's CAs
    ========================  ================================  ==================

    ``url`` is the Pyroscope server (or Alloy's ``pyroscope.receive_http``)
    base URL, e.g. ``http://pyroscope:4040``; ``directory`` writes each
    part to a file instead or as well (``APP.PID.SEQ.KIND.pb.gz``, written
    whole; ``samprof top DIR -i cpu`` reads them). ``profiles`` is any of
    ``cpu``, ``wall``, ``heap``; with both ``cpu`` and ``wall``, the CPU
    profile is the wall profile's on-CPU part (user-mode CPU time of
    Python threads). ``tenant`` goes in
    ``X-Scope-OrgID``; ``headers`` are added to every upload.
    ``queue_size`` bounds the parts waiting to be sent (in intervals);
    ``exit_timeout`` (default 3 s) bounds the time the last uploads may
    take at stop or interpreter exit.

    The agent takes the process's CPU or wall profile for as long as it
    runs, so a /debug/pprof/profile capture meanwhile answers that
    profiling is in use, as Go does; it shares a running heap profile.
    Raises ProfilerError if an agent already runs or a profile cannot
    start, ValueError or TypeError for bad settings.
    """
    global _agent
    config = Config(url, app_name, **settings)
    if config.directory is not None:
        os.makedirs(config.directory, exist_ok=True)
    with _agent_lock:
        if _agent is not None and _agent.running and _agent.pid == os.getpid():
            raise ProfilerError("a continuous agent already runs in this process; stop it first")
        agent = Agent(config)
        agent._start()
        _agent = agent
    _watch_process()
    return agent


_watching = False


def _watch_process() -> None:
    """Once per process: the agent's last part is sent at exit (before the
    profilers' own exit handler discards what runs) and on a SIGTERM that
    would otherwise kill the process outright, and a forked child starts
    its own agent."""
    global _watching
    if _watching:
        return
    _watching = True
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    from samprof._middleware import on_sigterm

    on_sigterm(_at_exit)


def _at_exit() -> None:
    agent = _agent
    if agent is not None and agent.pid == os.getpid():
        agent.stop()


def _after_fork_in_child() -> None:
    global _agent_lock
    _agent_lock = threading.Lock()
    agent = _agent
    if agent is not None:
        agent._after_fork_in_child()
