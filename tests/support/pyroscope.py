"""An in-process Pyroscope receiver for the tests of samprof.continuous.

No Pyroscope server can be installed on these machines (it ships as a
GitHub binary or an image; nothing in PyPI or Debian), so this one takes
uploads on loopback the way the server does, following its source
(grafana/pyroscope at 3fe6a457a320):

- ``POST /ingest`` (and ``/pyroscope/ingest``): pkg/api/api.go
  (RegisterDistributor), pkg/ingester/pyroscope/ingest_handler.go
  (parseInputMetadataFromRequest, readInputRawDataFromRequest, ServeHTTP:
  400 for a bad name, 413 over the body limit, 422 for what cannot be
  parsed or is refused), api/model/labelset/labelset.go and validate.go
  (``app{k=v,...}``: allowed characters), pkg/og/util/attime/attime.go
  (``from``/``until``: a 19-digit number is Unix nanoseconds),
  pkg/og/convert/pprof/profile.go (format=pprof takes the whole body;
  multipart: ``profile``, ``prev_profile`` refused, ``sample_type_config``;
  createLabels and metricName: ``__name__`` from the sample types,
  ``service_name``, ``__delta__="false"``, ``pyroscope_spy``),
  pkg/og/util/form/form.go (only file parts are read), pkg/pprof/pprof.go
  (RawFromBytesWithLimit: gzip sniffed, 4 MiB decompressed at most).
- ``POST /push.v1.PusherService/Push``: api/push/v1/push.proto and
  api/types/v1/types.proto (the messages), connect-go's
  protocol_connect.go (Content-Type application/proto or json, 415
  otherwise; Content-Encoding gzip; errors as ``{"code", "message"}``
  with connect's HTTP mapping), pkg/distributor/distributor.go (Push: "no
  profiles received", ``service_name`` filled with ``unknown_service``, an
  undecodable raw profile is 500 ``unknown``).
- Both: pkg/validation/validate.go (ValidateProfile: empty profile, the
  ingestion window of 1 h back and 10 min ahead, 16000 samples, 100
  labels a sample, ids 0, string 0, ``-`` in a sample type; ValidateLabels:
  30 label names, lengths, duplicates, a valid ``__name__``),
  pkg/model/pprofsplit/pprof_split.go (a profile's sample labels become
  series labels), pkg/phlaredb/delta.go (without ``__delta__="false"``
  the server takes differences of ``memory`` alloc values itself, which
  a client sending deltas must prevent), and, with multitenancy on,
  dskit's user/http.go (``X-Scope-OrgID`` or 401 "no org id").

Every accepted profile is decoded twice (samprof.pprof and the independent
protobuf decoder of support.pprof_proto) and kept as an :class:`Upload`.
Faults for the tests: ``fail`` (answer a status for the next N uploads),
``delay`` (answer late), ``hang`` (hold the connection, never answer),
``down()``/``up()`` (stop and start listening on the same port).
"""

from __future__ import annotations

import gzip
import http.server
import json
import re
import socket
import threading
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from samprof.pprof import Profile, read
from support import pprof_proto

MAX_PROFILE_BYTES = 4 << 20  # max_profile_size_bytes
BODY_LIMIT = 256 << 20  # ingestion_body_limit_mb
MAX_SAMPLES = 16000  # max_profile_stacktrace_samples
MAX_SAMPLE_LABELS = 100
MAX_LABEL_NAMES = 30  # max_label_names_per_series
MAX_NAME_LENGTH = 1024
MAX_VALUE_LENGTH = 2048
REJECT_OLDER_NS = 3600 * 10**9
REJECT_NEWER_NS = 600 * 10**9

_SERVICE_RUNE = re.compile(r"[A-Za-z0-9_.\-/]")
_LABEL_RUNE = re.compile(r"[A-Za-z0-9_.]")


class Refusal(Exception):
    """An upload refused: the status and the Connect-style error."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Upload:
    """One accepted profile and the series labels Pyroscope would store it
    under (before its sample labels split it further)."""

    protocol: str
    labels: Dict[str, str]
    profile: Profile  # samprof's reader
    raw: bytes  # the pprof, decompressed
    from_ns: int
    until_ns: int
    headers: Dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.labels["__name__"]

    def sample_labels(self) -> List[Dict[str, str]]:
        return [
            {lab.key: lab.str_value for lab in s.labels if lab.str_value}
            for s in self.profile.samples
        ]


def value_of(uploads: List[Upload], type_name: str, function: str = "", **labels: str) -> int:
    """The sum over uploads of the values of type_name of the samples
    through function (any, if "") with these labels."""
    total = 0
    for u in uploads:
        p = u.profile
        i = [t.type for t in p.sample_types].index(type_name)
        for s in p.samples:
            got = {lab.key: lab.str_value for lab in s.labels}
            if any(got.get(k) != v for k, v in labels.items()):
                continue
            if function and not any(_named(f.function, function) for f in p.stack_of(s)):
                continue
            total += s.values[i]
    return total


def _named(qualified: str, name: str) -> bool:
    """A frame's function is name: its qualified name (3.11+) or its name."""
    return qualified == name or qualified.endswith("." + name)


# -- push.proto ------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto


def _push_classes() -> Dict[str, Any]:
    """push.v1 and types.v1 messages, transcribed from push.proto and
    types.proto (the fields the server reads)."""
    fd = descriptor_pb2.FileDescriptorProto(name="samprof_test_push.proto", package="push.v1")
    fd.syntax = "proto3"
    messages = {
        "LabelPair": [("name", 1, _F.TYPE_STRING, ""), ("value", 2, _F.TYPE_STRING, "")],
        "RawSample": [("raw_profile", 1, _F.TYPE_BYTES, ""), ("ID", 2, _F.TYPE_STRING, "")],
        "RawProfileSeries": [
            ("labels", 1, _F.TYPE_MESSAGE, "LabelPair"),
            ("samples", 2, _F.TYPE_MESSAGE, "RawSample"),
        ],
        "PushRequest": [("series", 1, _F.TYPE_MESSAGE, "RawProfileSeries")],
    }
    repeated = {"labels", "samples", "series"}
    for name, fields in messages.items():
        m = fd.message_type.add(name=name)
        for fname, number, ftype, tname in fields:
            f = m.field.add(name=fname, number=number, type=ftype)
            f.label = _F.LABEL_REPEATED if fname in repeated else _F.LABEL_OPTIONAL
            if tname:
                f.type_name = f".push.v1.{tname}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"push.v1.{name}"))
        for name in messages
    }


_PUSH = _push_classes()


# -- parsing as the server does --------------------------------------------------------


def parse_name(name: str) -> Dict[str, str]:
    """labelset.Parse: ``app{k=v,...}`` -> {"__name__": app, k: v}."""
    if not name:
        raise Refusal(400, "invalid_argument", "name: service name is required")
    if "{" not in name:
        name += "{"
    app, _, rest = name.partition("{")
    app = app.strip()
    if not app:
        raise Refusal(400, "invalid_argument", "name: service name is required")
    for r in app:
        if not _SERVICE_RUNE.match(r):
            raise Refusal(
                400,
                "invalid_argument",
                f"name: invalid service name: {app}: character is not allowed: '{r}'",
            )
    labels = {"__name__": app}
    body = rest.split("}", 1)[0]
    for item in body.split(","):
        if not item.strip():
            continue
        key, _, value = item.partition("=")
        key = key.strip()
        if not key:
            raise Refusal(400, "invalid_argument", "name: label name is required")
        if key != "__name__":
            for r in key:
                if not _LABEL_RUNE.match(r):
                    raise Refusal(
                        400,
                        "invalid_argument",
                        f"name: invalid label name: {key}: character is not allowed: '{r}'",
                    )
        labels[key] = value.strip()
    return labels


def parse_time(text: Optional[str], now_ns: int) -> int:
    """attime.Parse for the forms a client sends: empty is now, an
    all-digit value is read by its length (13 ms, 16 us, 19 ns, else s)."""
    if not text:
        return now_ns
    if text.isdigit():
        n = int(text)
        return {13: n * 10**6, 16: n * 10**3, 19: n}.get(len(text), n * 10**9)
    return now_ns


def raw_pprof(data: bytes) -> bytes:
    """RawFromBytesWithLimit: gunzipped if it is gzip, else as it is;
    refused past 4 MiB decompressed."""
    if data[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(data, MAX_PROFILE_BYTES + 1)
        except zlib.error as e:
            raise Refusal(422, "unknown", f"parsing IngestInput-pprof failed gzip: {e}") from None
    else:
        out = data
    if len(out) > MAX_PROFILE_BYTES:
        raise Refusal(
            422,
            "unknown",
            f"decompressed size exceeds maximum allowed size of {MAX_PROFILE_BYTES} bytes",
        )
    return out


def metric_name(profile: Profile, display: Dict[str, str]) -> str:
    """metricName: __name__ from the sample types."""
    types = [t.type for t in profile.sample_types]
    if "wall" in types:
        return "wall"
    default = {"samples": "cpu"}
    names = [display.get(t, default.get(t, t)) for t in types]
    for t in names:
        if "cpu" in t:
            return "process_cpu"
        if "alloc_" in t or "inuse_" in t or t in ("space", "objects"):
            return "memory"
        if "mutex_" in t:
            return "mutex"
        if "block_" in t:
            return "block"
        if "goroutines" in t:
            return "goroutines"
    return names[-1] if names else ""


def validate_profile(profile: Profile, raw: bytes, now_ns: int) -> None:
    """ValidateProfile, and both decoders must read it."""
    try:
        msg = pprof_proto.decode(raw)
        pprof_proto.check_well_formed(msg)
    except Exception as e:  # noqa: BLE001 - any failure is a refusal
        raise Refusal(400, "invalid_argument", f"malformed profile: {e}") from None
    if not profile.sample_types:
        raise Refusal(400, "invalid_argument", "empty profile")
    t = profile.time_nanos
    if t > 0 and not now_ns - REJECT_OLDER_NS < t < now_ns + REJECT_NEWER_NS:
        raise Refusal(
            400,
            "invalid_argument",
            f"profile is outside of ingestion window (profile timestamp: {t})",
        )
    if len(profile.samples) > MAX_SAMPLES:
        raise Refusal(400, "invalid_argument", "exceeds the samples count limit")
    for s in profile.samples:
        if len(s.labels) > MAX_SAMPLE_LABELS:
            raise Refusal(400, "invalid_argument", "exceeds the sample labels limit")
        if len(s.values) != len(profile.sample_types):
            raise Refusal(400, "invalid_argument", "sample value length mismatch")
    if any(loc.id == 0 for loc in profile.locations):
        raise Refusal(400, "invalid_argument", "location id is 0")
    if any(f.id == 0 for f in profile.functions):
        raise Refusal(400, "invalid_argument", "function id is 0")
    if msg.string_table and msg.string_table[0] != "":
        raise Refusal(400, "invalid_argument", "string 0 should be empty string")
    if any("-" in t.type for t in profile.sample_types):
        raise Refusal(400, "invalid_argument", "sample type contains -")


def validate_labels(labels: Dict[str, str], profile: Profile) -> None:
    """ValidateLabels, on each series the sample labels split off
    (pprofsplit)."""
    if not labels.get("__name__"):
        raise Refusal(400, "invalid_argument", "invalid labels with error: invalid metric name")
    seen = set()
    for s in profile.samples:
        keys = tuple(sorted({lab.key for lab in s.labels if lab.str_value} - set(labels)))
        if keys in seen:
            continue
        seen.add(keys)
        names = set(labels) | set(keys)
        if len(names) > MAX_LABEL_NAMES:
            raise Refusal(
                400,
                "invalid_argument",
                f"profile series has {len(names)} label names; limit {MAX_LABEL_NAMES}",
            )
    for name, value in labels.items():
        if len(name) > MAX_NAME_LENGTH:
            raise Refusal(400, "invalid_argument", f"label name too long: '{name}'")
        if len(value) > MAX_VALUE_LENGTH:
            raise Refusal(400, "invalid_argument", f"label value too long: '{value}'")


def multipart_files(content_type: str, body: bytes) -> Dict[str, bytes]:
    """The file parts of a multipart/form-data body (form.ReadField reads
    only parts that carry a filename)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise Refusal(422, "unknown", "multipart: no boundary")
    boundary = b"--" + m.group(1).encode()
    files: Dict[str, bytes] = {}
    for chunk in body.split(boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise Refusal(422, "unknown", "multipart: malformed part")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        disposition = head.decode("latin-1")
        name = re.search(r'name="([^"]*)"', disposition)
        if name and re.search(r'filename="([^"]*)"', disposition) and content:
            files[name.group(1)] = content
    return files


# -- the server ----------------------------------------------------------------------------


class Receiver:
    """The receiver: ``with Receiver() as r: ... r.url ... r.uploads``."""

    def __init__(
        self,
        multitenancy: bool = False,
        basic_auth: Optional[Tuple[str, str]] = None,
        port: int = 0,
        tls: Optional[Tuple[str, str]] = None,
    ) -> None:
        """tls: (certificate file, key file) to serve https."""
        self.multitenancy = multitenancy
        self.tls = tls
        self.basic_auth = basic_auth
        self.uploads: List[Upload] = []
        self.refused: List[Refusal] = []
        self.requests = 0
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.fail: List[int] = []  # statuses to answer, one per request
        self.delay = 0.0
        self.hang = threading.Event()  # set: hold every request
        self._release = threading.Event()
        self._port = port
        self._server: Optional[http.server.ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self.up()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._port}"

    def up(self) -> None:
        receiver = self

        class Handler(_Handler):
            pass

        Handler.receiver = receiver
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._port = server.server_address[1]
        self._server = server
        self._release.clear()
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop listening: connections are refused until up()."""
        server, self._server = self._server, None
        if server is not None:
            self._release.set()
            server.shutdown()
            server.server_close()

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hang.clear()
        self.down()

    def wait_for(self, predicate, timeout: float) -> bool:
        """Waits until predicate(uploads) holds; its last value."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while not predicate(self.uploads):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.arrived.wait(left)
        return True

    def of(self, name: str, pid: Optional[int] = None) -> List[Upload]:
        with self.lock:
            return [
                u
                for u in self.uploads
                if u.name == name and (pid is None or u.labels.get("pid") == str(pid))
            ]

    # -- one request ---------------------------------------------------------------

    def handle(self, path: str, headers: Dict[str, str], body: bytes) -> List[Upload]:
        now = time.time_ns()
        if self.multitenancy and not headers.get("x-scope-orgid"):
            raise Refusal(401, "unauthenticated", "no org id")
        if self.basic_auth is not None:
            import base64

            want = "Basic " + base64.b64encode(":".join(self.basic_auth).encode()).decode()
            if headers.get("authorization") != want:
                raise Refusal(401, "unauthenticated", "bad credentials")
        url = urllib.parse.urlsplit(path)
        if url.path in ("/ingest", "/pyroscope/ingest"):
            return [self._ingest(url.query, headers, body, now)]
        if url.path == "/push.v1.PusherService/Push":
            return self._push(headers, body, now)
        raise Refusal(404, "not_found", "404 page not found")

    def _ingest(self, query: str, headers: Dict[str, str], body: bytes, now: int) -> Upload:
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
        tags = parse_name(params.get("name", ""))
        from_ns = parse_time(params.get("from"), now)
        until_ns = parse_time(params.get("until"), now)
        spy = params.get("spyName") or "unknown"
        content_type = headers.get("content-type", "")
        display: Dict[str, str] = {}
        fmt = params.get("format", "")
        if fmt == "pprof":
            data = body
        elif fmt == "" and "multipart/form-data" in content_type:
            files = multipart_files(content_type, body)
            if files.get("prev_profile"):
                raise Refusal(
                    422,
                    "unknown",
                    "unsupported client version. Please update github.com/grafana/pyroscope-go "
                    "to the latest version",
                )
            config = files.get("sample_type_config")
            if config is not None:
                try:
                    parsed = json.loads(config)
                except ValueError as e:
                    raise Refusal(422, "unknown", f"sample_type_config: {e}") from None
                display = {
                    k: v.get("display-name", k) for k, v in parsed.items() if isinstance(v, dict)
                }
            data = files.get("profile", b"")
        else:
            # The server would read the body as folded stacks ("groups");
            # samprof never sends those.
            raise Refusal(
                422, "unknown", f"this receiver reads only pprof uploads, got format={fmt!r}"
            )
        if not data:
            raise Refusal(200, "", "empty profile: nothing stored")
        raw = raw_pprof(data)
        try:
            profile = read(raw)
        except Exception as e:  # noqa: BLE001
            raise Refusal(422, "unknown", f"parsing IngestInput-pprof failed {e}") from None
        if profile.time_nanos == 0:  # fixTime
            profile.time_nanos = from_ns
        try:
            validate_profile(profile, raw, now)
        except Refusal as e:
            raise Refusal(422, "unknown", f"pushing IngestInput-pprof failed {e.message}") from None
        labels = {k: v for k, v in tags.items() if not k.startswith("__")}
        labels.setdefault("service_name", tags["__name__"])
        labels["__name__"] = metric_name(profile, display)
        labels["__delta__"] = "false"
        labels["pyroscope_spy"] = spy
        try:
            validate_labels(labels, profile)
        except Refusal as e:
            raise Refusal(422, "unknown", e.message) from None
        return Upload("ingest", labels, profile, raw, from_ns, until_ns, dict(headers))

    def _push(self, headers: Dict[str, str], body: bytes, now: int) -> List[Upload]:
        content_type = headers.get("content-type", "")
        if content_type not in ("application/proto", "application/json"):
            raise Refusal(415, "unknown", f"unsupported content type {content_type!r}")
        encoding = headers.get("content-encoding", "identity")
        if encoding == "gzip":
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError) as e:
                raise Refusal(400, "invalid_argument", f"gzip: {e}") from None
        elif encoding != "identity":
            raise Refusal(501, "unimplemented", f'unknown compression "{encoding}"')
        request = _PUSH["PushRequest"]()
        try:
            if content_type == "application/json":
                from google.protobuf import json_format

                json_format.Parse(body, request)
            else:
                request.ParseFromString(body)
        except Exception as e:  # noqa: BLE001
            raise Refusal(400, "invalid_argument", f"unmarshal message: {e}") from None
        if not any(series.samples for series in request.series):
            raise Refusal(400, "invalid_argument", "no profiles received")
        out = []
        for series in request.series:
            labels: Dict[str, str] = {}
            for pair in series.labels:
                if pair.name in labels:
                    raise Refusal(400, "invalid_argument", f"duplicate label name: '{pair.name}'")
                if pair.value:  # empty values are dropped
                    labels[pair.name] = pair.value
            labels.setdefault("service_name", "unknown_service")
            for sample in series.samples:
                if not sample.raw_profile:
                    raise Refusal(500, "unknown", "gzip reset: EOF")
                try:
                    raw = raw_pprof(sample.raw_profile)
                    profile = read(raw)
                except Refusal as e:
                    raise Refusal(400, "invalid_argument", e.message) from None
                except Exception as e:  # noqa: BLE001
                    raise Refusal(500, "unknown", f"{e}") from None
                validate_profile(profile, raw, now)
                validate_labels(labels, profile)
                start = profile.time_nanos
                out.append(
                    Upload(
                        "push",
                        dict(labels),
                        profile,
                        raw,
                        start,
                        start + profile.duration_nanos,
                        dict(headers),
                    )
                )
        return out


class _Handler(http.server.BaseHTTPRequestHandler):
    receiver: Receiver
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(405, b"method not allowed\n", "text/plain")

    def do_POST(self) -> None:
        r = self.receiver
        length = int(self.headers.get("Content-Length") or 0)
        if length > BODY_LIMIT:
            self._answer(413, b'{"code":"invalid_argument","message":"request body too large"}\n')
            return
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with r.lock:
            r.requests += 1
            status = r.fail.pop(0) if r.fail else None
        if r.hang.is_set():
            r._release.wait(60)
            self.close_connection = True
            return
        if r.delay:
            time.sleep(r.delay)
        if status is not None:
            self._answer(status, b'{"code":"unavailable","message":"injected"}\n')
            return
        try:
            uploads = r.handle(self.path, headers, body)
        except Refusal as e:
            with r.lock:
                r.refused.append(e)
            if e.status == 200:
                self._answer(200, b"")
                return
            text = json.dumps({"code": e.code, "message": e.message}).encode() + b"\n"
            self._answer(e.status, text)
            return
        with r.arrived:
            r.uploads.extend(uploads)
            r.arrived.notify_all()
        self._answer(200, b"")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
