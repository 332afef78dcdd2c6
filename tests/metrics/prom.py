#!/usr/bin/python3
"""HTTP and PromQL helper for prometheus_recovery_test.sh (stdlib only).

Each call is one Python start (slow on a loaded machine), so the commands
take many arguments at once.

  prom.py free_port
      a TCP port on 127.0.0.1 that was free a moment ago (bind, release)
  prom.py ready URL SECONDS PID
      polls URL until it answers 200 (exit 0); exit 1 at the deadline or
      when process PID has exited
  prom.py get URL
      the body of an HTTP GET (exit 1 on any error or a status other than 200)
  prom.py save URL FILE [URL FILE]...
      GETs each URL into FILE
  prom.py query BASE EXPR...
      each instant query's samples, one line each: '{labels} value' (a
      scalar: 'value'); with several EXPRs each is preceded by a line
      '  EXPR'; exit 1 if the API answers an error
  prom.py values BASE EXPR...
      one line per EXPR: the value of its single sample, or 'error: ...'
      (no sample, several, or an API error)
  prom.py wait BASE EXPR SECONDS
      polls an instant query until it returns at least one sample (exit 0),
      or the deadline passes (exit 1, the last answer on stderr)
  prom.py families FILE...
      the metric family names of Prometheus text expositions (# TYPE lines)
  prom.py sd FILE JOB TARGET[=LABEL:VALUE,...]...
      writes a file_sd target file atomically (write, then rename)
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT_S = 5


def http_get(url):
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        if r.status != 200:
            raise RuntimeError(f"GET {url}: HTTP {r.status}")
        return r.read().decode("utf-8")


def instant_query(base, expr):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = http_get(url)
    except urllib.error.HTTPError as e:  # 400/422: the answer says why
        body = e.read().decode("utf-8", "replace")
    answer = json.loads(body)
    if answer.get("status") != "success":
        raise RuntimeError(f"query {expr!r}: {answer.get('errorType')}: "
                           f"{answer.get('error')}")
    data = answer["data"]
    if data["resultType"] in ("scalar", "string"):
        return [({}, data["result"][1])]
    if data["resultType"] == "vector":
        return [(s["metric"], s["value"][1]) for s in data["result"]]
    raise RuntimeError(f"query {expr!r}: unexpected {data['resultType']}")


def alive(pid):
    """Whether process pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def fmt(samples):
    lines = []
    for labels, value in samples:
        if labels:
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.append(f"{{{inner}}} {value}")
        else:
            lines.append(f"{value}")
    return "\n".join(lines)


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "free_port":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
        s.close()
    elif cmd == "ready":
        deadline = time.monotonic() + float(args[1])
        while time.monotonic() < deadline and alive(int(args[2])):
            try:
                http_get(args[0])
                return 0
            except (OSError, RuntimeError):
                time.sleep(0.1)
        return 1
    elif cmd == "get":
        sys.stdout.write(http_get(args[0]))
    elif cmd == "save":
        for url, path in zip(args[0::2], args[1::2]):
            with open(path, "w", encoding="utf-8") as f:
                f.write(http_get(url))
    elif cmd == "query":
        for expr in args[1:]:
            if len(args) > 2:
                print(f"  {expr}")
            text = fmt(instant_query(args[0], expr))
            if len(args) > 2 and text:
                text = "\n".join("    " + line for line in text.split("\n"))
            print(text)
    elif cmd == "values":
        for expr in args[1:]:
            try:
                samples = instant_query(args[0], expr)
                if len(samples) == 1:
                    print(samples[0][1])
                else:
                    print(f"error: {len(samples)} samples, expected 1: "
                          + fmt(samples).replace("\n", "; "))
            except (OSError, RuntimeError, ValueError, KeyError) as e:
                print("error: " + str(e).replace("\n", " "))
    elif cmd == "wait":
        deadline = time.monotonic() + float(args[2])
        last = ""
        while True:
            try:
                samples = instant_query(args[0], args[1])
                if samples:
                    print(fmt(samples))
                    return 0
                last = "(no samples)"
            except (OSError, RuntimeError, ValueError) as e:
                last = str(e)
            if time.monotonic() > deadline:
                print(f"timed out after {args[2]} s waiting for {args[1]!r}: "
                      f"{last}", file=sys.stderr)
                return 1
            time.sleep(0.2)
    elif cmd == "families":
        names = set()
        for path in args:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("# TYPE "):
                        names.add(line.split()[2])
        print("\n".join(sorted(names)))
    elif cmd == "sd":
        path, job, targets = args[0], args[1], args[2:]
        groups = []
        for t in targets:
            addr, _, extra = t.partition("=")
            labels = {"job": job}
            for kv in filter(None, extra.split(",")):
                k, _, v = kv.partition(":")
                labels[k] = v
            groups.append({"targets": [addr], "labels": labels})
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(groups, f)
        os.replace(tmp, path)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, RuntimeError, ValueError, KeyError, IndexError) as e:
        print(f"prom.py {' '.join(sys.argv[1:2])}: {e}", file=sys.stderr)
        sys.exit(1)
