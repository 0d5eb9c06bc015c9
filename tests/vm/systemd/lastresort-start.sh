#!/bin/bash
# lastresort.service's processes. This script is the master (its parent, systemd, is outside the group and its
# children are in it); fixture-backend on :8001 is the worker; the grower ignores SIGUSR2 (the abort signal) and
# grows at 64 MiB/s towards 320 MiB, past the unit's 256 MiB limit, so only a SIGKILL or the OOM killer stops it.
mkfifo /run/lastresort/go
/usr/local/bin/fixture-backend --name worker --port 8001 &
/usr/local/bin/grower --ignore-signal --rate-mib-s 64 --max-mib 320 </run/lastresort/go >/dev/null 2>&1 &
wait
