#!/usr/bin/python3
"""copy_progress_check.py [--mid] < EVENTS: checks a replacement's shard copy as its
Trainer.WatchEvents reported it (`shardctl watch -o json` lines, read from
stdin): the copy's RecoveryProgress COMPLETE is there, and before it, for
the attempt it completes (same epoch and attempt), at least one
TRANSFERRING_STATE report with 0 <= bytes_done < bytes_total, whose
bytes_total is the COMPLETE's. Every attempt's byte reports start at 0,
strictly increase, stay within their total and number at most 17.
With --mid the completed attempt also has a report with
0 < bytes_done < bytes_total (a copy slow enough to be seen moving). Prints one line per attempt; exits 1 naming what is wrong. Standard
library only."""
import json
import sys

MAX_REPORTS = 17  # ProgressThrottle: the first, then at most 16 more.


def main():
    mid = "--mid" in sys.argv[1:]
    events = [json.loads(line) for line in sys.stdin if line.strip()]
    reports = {}  # (epoch, attempt) -> [(bytes_done, bytes_total, source)]
    complete = None
    for e in events:
        r = e.get("recovery")
        if r is None:
            continue
        key = (int(e.get("epoch", 0)), int(r.get("attempt", 0)))
        done, total = int(r.get("bytes_done", 0)), int(r.get("bytes_total", 0))
        if r.get("phase") == "RECOVERY_PHASE_COMPLETE":
            complete = (key, total, int(r.get("source_rank", 0)))
            break
        if r.get("phase") == "RECOVERY_PHASE_TRANSFERRING_STATE" and total > 0:
            reports.setdefault(key, []).append(
                (done, total, int(r.get("source_rank", 0))))
    errors = []
    for (epoch, attempt), got in sorted(reports.items()):
        done = [d for d, _, _ in got]
        total = got[0][1]
        print("epoch %d attempt %d from rank %d: %d report(s) of %d bytes: %s"
              % (epoch, attempt, got[0][2], len(got), total,
                 " ".join(map(str, done))))
        if attempt < 1:
            errors.append("epoch %d: byte reports without an attempt number"
                          % epoch)
        if done[0] != 0:
            errors.append("epoch %d attempt %d starts at %d, not 0"
                          % (epoch, attempt, done[0]))
        if any(b <= a for a, b in zip(done, done[1:])):
            errors.append("epoch %d attempt %d: bytes_done not increasing"
                          % (epoch, attempt))
        if any(t != total or not 0 <= d <= t for d, t, _ in got):
            errors.append("epoch %d attempt %d: a report outside its total"
                          % (epoch, attempt))
        if len(got) > MAX_REPORTS:
            errors.append("epoch %d attempt %d: %d reports, more than %d"
                          % (epoch, attempt, len(got), MAX_REPORTS))
    if complete is None:
        errors.append("no RecoveryProgress COMPLETE in the events")
    else:
        key, total, source = complete
        print("COMPLETE: epoch %d attempt %d from rank %d, %d bytes"
              % (key[0], key[1], source, total))
        mine = reports.get(key, [])
        if not any(0 <= d < t == total for d, t, _ in mine):
            errors.append(
                "no TRANSFERRING_STATE report with 0 <= bytes_done < %d "
                "for the completed attempt (epoch %d attempt %d)"
                % (total, key[0], key[1]))
        if mid and not any(0 < d < t == total for d, t, _ in mine):
            errors.append(
                "no report with 0 < bytes_done < %d for the completed "
                "attempt (epoch %d attempt %d)" % (total, key[0], key[1]))
    for e in errors:
        print("copy progress: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
