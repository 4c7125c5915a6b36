"""``python -m benchmarks translate --gcs``: the launchers of `translate_bench` with their inputs
and outputs on the test suite's GCS emulator, every request of both clients delayed.

Each size's corpus (`translate_bench.corpus`: ``gs://t<N>/clips/<class>/``, its table
``gs://t<N>/events.csv``) and, with ``--append``, the append corpus (`append_corpus`: the clips
under ``gs://a<N>/clips/``, the dataset recorded locally from them under ``gs://a<N>/dataset``,
its tables naming the local paths: the launcher does not read them) are uploaded to the emulator
(`tests.support.gcs_server`, fake-gcs-server in memory) in parallel threads, untimed. Then every
request both clients send waits ``--latency_ms`` at the emulator's fronts (a listing paged by
``--page`` objects, as GCS pages it: `RequestLog`), and each launcher runs in a fresh process
with `GcsServer.env` (the unfinished run's marker and fingerprint written to its
``gs://out/...`` output first, without latency): timed end to end, and the requests each front
passed on during it counted (Beam's client: google-cloud-storage; TensorFlow's: its own
GCS file system; one child at a time). The job description and its staging stay on the local
disk, as in the test suite's request-count tests. Between repeats every object a translation
left (the outputs, the append's ``appends/``) is deleted through the emulator's JSON API.

The request log: each front's requests, their method and path (query values, clip names and the
other names that differ between sizes and runs folded), kept per child and written to
``<--dir>/translate-gcs-requests.json``; where a launcher's requests differ between the smallest
and the largest size, the kinds that differ are printed.

Sizes 1,024 and 10,240, not 102,400: fake-gcs-server's uploads slow with every object it holds.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import re
import shutil
import statistics
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks.table import num, table
from benchmarks.translate_bench import (
    _timed,
    annotation_table,
    append_corpus,
    corpus,
    growth_table,
)

UPLOAD_THREADS = 4
GCS_PAGE = 1000  # the most objects a GCS listing's page holds (objects.list maxResults)
LAUNCHERS = ("match", "fresh", "resume", "append match", "append", "annotated")


class RequestLog:
    """Every request the emulator's two fronts pass on, as (front, kind): the test suite's
    fronts (`BatchShim.forward` / `.batch`, `_RequestFixer._request`) wrapped in this process
    while `logging` is entered. A JSON-API batch is one request, its sub-requests named in it.

    The wrappers also hold an object listing's page to `page` objects as GCS does (its
    ``maxResults``, at most 1,000, is the default): fake-gcs-server answers a listing without
    ``maxResults`` in one page, however many objects match (0: leave it so)."""

    def __init__(self, page: int = GCS_PAGE) -> None:
        self.page = page
        self.entries: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._in_batch = threading.local()

    def add(self, front: str, method: str, target: str) -> None:
        with self._lock:
            self.entries.append((front, kind(method, target)))

    def since(self, start: int) -> collections.Counter:
        with self._lock:
            return collections.Counter(self.entries[start:])

    def paged(self, method: str, target: str) -> str:
        """`target`, an object listing's with its page held to `page` objects."""
        url = urllib.parse.urlsplit(target)
        if not self.page or method != "GET" or not re.fullmatch(r"/storage/v1/b/[^/]+/o", url.path):
            return target
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        query["maxResults"] = str(min(int(query.get("maxResults") or self.page), self.page))
        return url._replace(query=urllib.parse.urlencode(query)).geturl()

    @contextlib.contextmanager
    def logging(self) -> Iterator[RequestLog]:
        from tests.support import gcs_server, tls_proxy

        log, shim, fixer = self, gcs_server.BatchShim, tls_proxy._RequestFixer
        forward, batch, request = shim.forward, shim.batch, fixer._request

        def logged_forward(self, method, path, headers, body):
            path = log.paged(method, path)
            subs = getattr(log._in_batch, "subs", None)
            if subs is None:
                log.add("beam", method, path)
            else:
                subs.append(kind(method, path))
            return forward(self, method, path, headers, body)

        def logged_batch(self, content_type, body):
            log._in_batch.subs = []
            try:
                return batch(self, content_type, body)
            finally:
                subs, log._in_batch.subs = log._in_batch.subs, None
                log.add("beam", "POST", f"/batch/storage/v1 [{', '.join(sorted(subs))}]")

        def logged_request(self, head, out, replies):
            line, rest = head.split(b"\r\n", 1)
            method, target, version = line.decode("latin-1").split()[:3]
            target = log.paged(method, target)
            log.add("tf", method, target)
            head = f"{method} {target} {version}".encode("latin-1") + b"\r\n" + rest
            return request(self, head, out, replies)

        shim.forward, shim.batch, fixer._request = logged_forward, logged_batch, logged_request
        try:
            yield self
        finally:
            shim.forward, shim.batch, fixer._request = forward, batch, request


FOLDED = (  # what differs between sizes and runs in a name, not in what is asked
    (r"c\d{7}\.wav", "<clip>"),
    (r"class\d+/", "<class>/"),
    (r"(/b/|^/)([ta])\d+(?=/|$)", r"\1\2<N>"),  # the size's buckets
    (r"/\d+-\d+/", "/<N>-<repeat>/"),  # its output directories
    (r"[0-9a-f]{8,}", "<hex>"),  # tokens, digests, temporary names
)


def kind(method: str, target: str) -> str:
    """A request's method and path, URL-decoded, with `FOLDED` names and no query values."""
    url = urllib.parse.urlsplit(target)
    path = urllib.parse.unquote(url.path)
    for pattern, folded in FOLDED:
        path = re.sub(pattern, folded, path)
    keys = sorted({k for k, _ in urllib.parse.parse_qsl(url.query, keep_blank_values=True)})
    return f"{method} {path}" + (f"?{'&'.join(keys)}" if keys else "")


def _delete(gcs, bucket: str, name: str) -> None:
    quoted = urllib.parse.quote(name, safe="")
    url = f"{gcs.endpoint}/storage/v1/b/{bucket}/o/{quoted}"
    with urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30):
        pass


def _upload(gcs, bucket: str, files: dict[str, Path]) -> float:
    """`files` (object name: local file) into `bucket` in `UPLOAD_THREADS` threads; seconds."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        done = pool.map(
            lambda item: gcs.upload_bytes(bucket, item[0], item[1].read_bytes()), files.items()
        )
        list(done)
    return time.perf_counter() - start


def _tree(local: Path, prefix: str) -> dict[str, Path]:
    return {
        f"{prefix}/{p.relative_to(local).as_posix()}": p
        for p in sorted(local.rglob("*"))
        if p.is_file()
    }


def _children(gcs, log: RequestLog, n: int, r: int, work: Path, args, pats: dict) -> dict:
    """One repeat at size `n`: each launcher's (seconds, Beam's requests, TF's, request kinds)."""
    env = gcs.env()
    fronts = (gcs.beam_faults, gcs.tf_faults)
    got = {}

    def launch(name: str, mode: str, pattern: str, *where: str) -> dict:
        place = work / name.replace(" ", "-")
        place.mkdir(parents=True, exist_ok=True)
        before, logged = [f.requests for f in fronts], len(log.entries)
        seconds, line = _timed(mode, pattern, place, *where, env=env)
        beam, tf = (f.requests - b for f, b in zip(fronts, before, strict=True))
        got[name] = {
            "seconds": line["seconds"] if mode == "match" else seconds,
            "beam": beam,
            "tf": tf,
            "kinds": log.since(logged),
        }
        return line

    out = f"gs://out/{n}-{r}"
    launch("match", "match", pats["clips"])
    launch("fresh", "fresh", pats["clips"], f"{out}/fresh")
    latency = gcs.beam_faults.latency_s
    gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = 0.0  # the killed run's leftovers
    _timed("unfinished", pats["clips"], work / "unfinished", f"{out}/resume", env=env)
    gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = latency
    line = launch("resume", "resume", pats["clips"], f"{out}/resume")
    resumed = f"{n}-{r}/resume/.tmp/resume.json" in gcs.list_names("out", f"{n}-{r}/resume/")
    if line.get("code") or not resumed:
        raise SystemExit(f"--resume at {n}: {line}, resume record compared: {resumed}")
    if args.append:
        launch("append match", "match", pats["append"])
        line = launch("append", "append", pats["append"], pats["dataset"])
        if not line.get("translated"):
            raise SystemExit(f"--append at {n} was not translated only: {line}")
    if args.annotations:
        line = launch("annotated", "annotated", pats["clips"], f"{out}/annotated", pats["table"])
        if not line.get("translated"):
            raise SystemExit(f"--annotations at {n} was not translated only: {line}")
    return got


def _shown(values: list[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else ", ".join(str(v) for v in values)


def run(args, root: Path, sizes: list[int]) -> None:
    """The ``--gcs`` runs (`translate_bench.main`'s options)."""
    from tests.support.gcs_server import running_gcs_server

    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"host: load average {load} before", flush=True)
    latency_s = args.latency_ms / 1000
    work = root / "translate-gcs-work"
    results: dict[int, dict[str, list[dict]]] = {}
    log = RequestLog(args.page)
    with (
        tempfile.TemporaryDirectory(prefix="translate-gcs-") as tls,
        running_gcs_server(Path(tls)) as gcs,
        log.logging(),
    ):
        gcs.create_bucket("out")
        for n in sizes:
            pats = {"clips": f"gs://t{n}/clips/*/*.wav"}
            corpus(root, n)
            files = _tree(root / f"translate-{n}" / "clips", "clips")
            gcs.create_bucket(f"t{n}")
            if args.annotations:
                files["events.csv"] = Path(annotation_table(root, n))
                pats["table"] = f"gs://t{n}/events.csv"
            took = _upload(gcs, f"t{n}", files)
            print(f"{len(files):,} objects uploaded to gs://t{n} in {took:.1f} s", flush=True)
            if args.append:
                _, dataset = append_corpus(root, n, args.new)
                files = _tree(dataset.parent / "clips", "clips") | _tree(dataset, "dataset")
                gcs.create_bucket(f"a{n}")
                took = _upload(gcs, f"a{n}", files)
                print(f"{len(files):,} objects uploaded to gs://a{n} in {took:.1f} s", flush=True)
                pats["append"] = f"gs://a{n}/clips/*/*.wav"
                pats["dataset"] = f"gs://a{n}/dataset"
            buckets = ["out", f"t{n}", *([f"a{n}"] if args.append else [])]
            kept = {b: set(gcs.list_names(b)) for b in buckets}
            gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = latency_s
            runs: dict[str, list[dict]] = collections.defaultdict(list)
            for r in range(args.repeats):
                shutil.rmtree(work, ignore_errors=True)
                for name, got in _children(gcs, log, n, r, work / f"{n}-{r}", args, pats).items():
                    runs[name].append(got)
                gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = 0.0
                for b in buckets:  # what the translations left
                    for name in set(gcs.list_names(b)) - kept[b]:
                        _delete(gcs, b, name)
                gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = latency_s
            gcs.beam_faults.latency_s = gcs.tf_faults.latency_s = 0.0
            shutil.rmtree(work, ignore_errors=True)
            results[n] = dict(runs)
            medians = {
                k: round(statistics.median(g["seconds"] for g in v), 3) for k, v in runs.items()
            }
            print(f"{n:,} clips: {medians}", flush=True)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    report(results, sizes, args.latency_ms, args.page)
    print(f"\nhost: load average {load} after")
    kinds = {
        f"{n} {name} {r}": sorted([*key, count] for key, count in g["kinds"].items())
        for n in sizes
        for name, runs in results[n].items()
        for r, g in enumerate(runs)
    }
    logged = root / "translate-gcs-requests.json"
    logged.write_text(json.dumps(kinds, indent=1))
    print(f"every launcher's requests (front, kind, count): {logged}")


def report(
    results: dict[int, dict[str, list[dict]]], sizes: list[int], latency_ms: float, page: int
) -> None:
    """The tables: seconds and requests per size and launcher, the growth, the request counts'
    sameness across sizes and the kinds of request that differ."""
    rows = []
    for n in sizes:
        for name in (k for k in LAUNCHERS if k in results[n]):
            runs = results[n][name]
            seconds = [g["seconds"] for g in runs]
            rows.append(
                [
                    f"{n:,}",
                    name,
                    num(statistics.median(seconds)),
                    ", ".join(num(s) for s in seconds),
                    _shown([g["beam"] for g in runs]),
                    _shown([g["tf"] for g in runs]),
                ]
            )
    print(
        f"\ngs:// on the emulator, {latency_ms:g} ms a request, a listing's page "
        f"{page or 'unbounded'} objects (match: the best of 3 matches in its child, its requests "
        "those of the 3)\n"
    )
    header = ["clips", "launcher", "median s", "each repeat s", "Beam requests", "TF requests"]
    print(table(header, rows, align="lllrrr"))
    small, large = sizes[0], sizes[-1]
    med = {
        n: {k: statistics.median(g["seconds"] for g in v) for k, v in results[n].items()}
        for n in sizes
    }
    same = []
    print()
    print(growth_table(med, [k for k in LAUNCHERS if k in results[small] and "match" not in k]))
    print()
    pages = {}  # one listing's requests at each size: the match child's, of 3 matches
    for name in (k for k in LAUNCHERS if k in results[small]):
        counts = {n: sorted({(g["beam"], g["tf"]) for g in results[n][name]}) for n in sizes}
        shown = "; ".join(
            f"{n:,}: " + " | ".join(f"Beam {b}, TF {t}" for b, t in counts[n]) for n in sizes
        )
        flat = {c for n in sizes for c in counts[n]}
        grew = [counts[large][0][i] - counts[small][0][i] for i in (0, 1)]
        if "match" in name:
            pages[name] = grew[0] / 3
        listing = pages["append match" if name == "append" else "match"]
        verdict = (
            "the same"
            if len(flat) == 1
            else (
                f"NOT the same: Beam {grew[0]:+d}, TF {grew[1]:+d}; a listing of its pattern "
                f"{listing:+g} (the match child's growth / 3)"
            )
        )
        same.append(f"- {name}: {verdict} ({shown})")
        if len(flat) > 1:
            a, b = results[small][name][0]["kinds"], results[large][name][0]["kinds"]
            for key in sorted(set(a) | set(b)):
                if a[key] != b[key]:
                    front, what = key
                    same.append(f"    {front} {what}: {a[key]} at {small:,}, {b[key]} at {large:,}")
    print("request counts at every size (each repeat):")
    print("\n".join(same))
