#!/usr/bin/env python3
"""Minimal S3 client (stdlib only, SigV4) for the benchmark's setup and polls.

Talks to the *unproxied* MinIO port, so polls measure when an object really is
in the bucket, not how fast the proxy answers. Credentials come from
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the endpoint from BENCH_S3_DIRECT.

usage:
  s3.py mkbucket BUCKET
  s3.py wait-size BUCKET KEY SIZE TIMEOUT_S     poll HEAD every 0.1 s until
                                                Content-Length == SIZE
  s3.py wait-count BUCKET PREFIX N TIMEOUT_S    poll ListObjectsV2 every 0.2 s
                                                until >= N keys under PREFIX
  s3.py count BUCKET PREFIX                     print the number of keys
  s3.py put-many BUCKET PREFIX N SIZE [PER_DIR] PUT N objects of SIZE bytes in
                                                parallel (32 connections): keys
                                                PREFIX dNNN/fNNNNNN.txt with PER_DIR
                                                keys per directory (default: all in
                                                PREFIX, names tNNNNN.txt)
  s3.py put-zarr BUCKET PREFIX ROWS COLS SIZE   a Zarr-shaped store (v2): PREFIX.zarray
                                                and ROWS x COLS chunk objects "r.c" of
                                                SIZE bytes (32 connections)
  s3.py delete-prefix BUCKET PREFIX             delete every key under PREFIX
Waits print the epoch time (seconds, float) at which the condition held and
exit 0, or print the last observed value and exit 1 on timeout.
"""
import concurrent.futures
import datetime
import hashlib
import hmac
import http.client
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

REGION = os.environ.get("AWS_REGION", "us-east-1")
EMPTY_SHA = hashlib.sha256(b"").hexdigest()


def _sign(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sign(method, host, path, query, payload_sha=EMPTY_SHA):
    """SigV4 headers (host;x-amz-content-sha256;x-amz-date) and the quoted path+query."""
    query = query or {}
    qs = "&".join(
        "%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
        for k, v in sorted(query.items()))
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    cpath = urllib.parse.quote(path, safe="/-_.~")
    canon = "\n".join([method, cpath, qs, "host:%s" % host,
                       "x-amz-content-sha256:%s" % payload_sha, "x-amz-date:%s" % amz_date, "",
                       "host;x-amz-content-sha256;x-amz-date", payload_sha])
    scope = "%s/%s/s3/aws4_request" % (day, REGION)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canon.encode()).hexdigest()])
    k = _sign(("AWS4" + os.environ["AWS_SECRET_ACCESS_KEY"]).encode(), day)
    for part in (REGION, "s3", "aws4_request"):
        k = _sign(k, part)
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=host;x-amz-content-sha256;"
            "x-amz-date, Signature=%s" % (os.environ["AWS_ACCESS_KEY_ID"], scope, sig))
    return cpath + ("?" + qs if qs else ""), {"x-amz-date": amz_date, "Authorization": auth,
                                              "x-amz-content-sha256": payload_sha}


def request(method, path, query=None):
    """Send one signed request; return (status, headers, body)."""
    endpoint = os.environ["BENCH_S3_DIRECT"].rstrip("/")
    host = urllib.parse.urlparse(endpoint).netloc
    url, headers = sign(method, host, path, query)
    req = urllib.request.Request(endpoint + url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def head_size(bucket, key):
    st, hdr, _ = request("HEAD", "/%s/%s" % (bucket, key))
    return int(hdr.get("Content-Length", -1)) if st == 200 else -1


def count(bucket, prefix):
    """Number of keys under prefix (follows continuation tokens)."""
    n, token = 0, None
    while True:
        q = {"list-type": "2", "prefix": prefix}
        if token:
            q["continuation-token"] = token
        st, _, body = request("GET", "/%s" % bucket, q)
        if st != 200:
            return -1
        root = ET.fromstring(body)
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        n += int(root.findtext(ns + "KeyCount") or 0)
        token = root.findtext(ns + "NextContinuationToken")
        if root.findtext(ns + "IsTruncated") != "true" or not token:
            return n


_local = threading.local()


def _conn_request(method, path, body=b"", payload_sha=EMPTY_SHA, query=None):
    """One signed request on this thread's keep-alive connection; returns the status."""
    host = urllib.parse.urlparse(os.environ["BENCH_S3_DIRECT"]).netloc
    for attempt in range(5):
        c = getattr(_local, "conn", None)
        if c is None:
            c = _local.conn = http.client.HTTPConnection(host, timeout=60)
        url, headers = sign(method, host, path, query, payload_sha)
        headers["Content-Length"] = str(len(body))
        try:
            c.request(method, url, body=body, headers=headers)
            r = c.getresponse()
            r.read()
            if r.status < 500:
                return r.status
        except (OSError, http.client.HTTPException):
            pass
        c.close()
        _local.conn = None
        time.sleep(0.1 * (attempt + 1))
    raise RuntimeError("%s %s failed 5 times" % (method, path))


def put_many(bucket, prefix, n, size, per_dir):
    """PUT n objects of size bytes under prefix with 32 parallel connections."""
    blob = os.urandom(size)
    sha = hashlib.sha256(blob).hexdigest()

    def key(i):
        if per_dir:
            return "%sd%03d/f%06d.txt" % (prefix, i // per_dir, i)
        return "%st%05d.txt" % (prefix, i)

    def put(i):
        st = _conn_request("PUT", "/%s/%s" % (bucket, key(i)), blob, sha)
        if st != 200:
            raise RuntimeError("PUT %s: HTTP %d" % (key(i), st))

    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        for _ in ex.map(put, range(n), chunksize=64):
            pass


def put_zarr(bucket, prefix, rows, cols, size):
    """PUT a Zarr v2 array: .zarray and rows x cols chunks of size bytes."""
    blob = os.urandom(size)
    sha = hashlib.sha256(blob).hexdigest()
    n = size // 8
    meta = json.dumps({"zarr_format": 2, "shape": [rows * n, cols], "chunks": [n, 1], "dtype": "<f8",
                       "compressor": None, "fill_value": 0.0, "filters": None, "order": "C"}).encode()
    st = _conn_request("PUT", "/%s/%s.zarray" % (bucket, prefix), meta, hashlib.sha256(meta).hexdigest())
    if st != 200:
        raise RuntimeError("PUT .zarray: HTTP %d" % st)

    def put(i):
        k = "%s%d.%d" % (prefix, i // cols, i % cols)
        st = _conn_request("PUT", "/%s/%s" % (bucket, k), blob, sha)
        if st != 200:
            raise RuntimeError("PUT %s: HTTP %d" % (k, st))

    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        for _ in ex.map(put, range(rows * cols), chunksize=16):
            pass


def list_keys(bucket, prefix):
    keys, token = [], None
    while True:
        q = {"list-type": "2", "prefix": prefix}
        if token:
            q["continuation-token"] = token
        st, _, body = request("GET", "/%s" % bucket, q)
        if st != 200:
            raise RuntimeError("list %s: HTTP %d" % (prefix, st))
        root = ET.fromstring(body)
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        keys += [c.findtext(ns + "Key") for c in root.findall(ns + "Contents")]
        token = root.findtext(ns + "NextContinuationToken")
        if root.findtext(ns + "IsTruncated") != "true" or not token:
            return keys


def delete_prefix(bucket, prefix):
    """Delete every key under prefix (16 parallel DELETEs); returns the count."""
    keys = list_keys(bucket, prefix)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        for _ in ex.map(lambda k: _conn_request("DELETE", "/%s/%s" % (bucket, k)), keys):
            pass
    return len(keys)


def wait(check, want, timeout, every):
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        last = check()
        if last >= want:
            print("%.3f" % time.time())
            return 0
        time.sleep(every)
    print("timeout last=%s" % last)
    return 1


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "mkbucket":
        st, _, body = request("PUT", "/%s" % argv[2])
        return 0 if st in (200, 409) else (print(body.decode(), file=sys.stderr) or 1)
    if cmd == "wait-size":
        b, k, size, t = argv[2], argv[3], int(argv[4]), float(argv[5])
        return wait(lambda: head_size(b, k) == size and size or -1, size, t, 0.1)
    if cmd == "wait-count":
        b, p, n, t = argv[2], argv[3], int(argv[4]), float(argv[5])
        return wait(lambda: count(b, p), n, t, 0.2)
    if cmd == "put-many":
        put_many(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]) if len(argv) > 6 else 0)
        return 0
    if cmd == "put-zarr":
        put_zarr(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]))
        return 0
    if cmd == "delete-prefix":
        print(delete_prefix(argv[2], argv[3]))
        return 0
    if cmd == "count":
        print(count(argv[2], argv[3]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
