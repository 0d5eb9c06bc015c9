#!/bin/bash
# app.service's processes: fixture-backend on :8000 and a grower (40 MiB/s up to 320 MiB, more than the unit's
# 256 MiB limit, released on SIGUSR2) whose line of results goes to /run/app/grower.json.
mkfifo /run/app/go
/usr/local/bin/fixture-backend --name app --port 8000 &
/usr/local/bin/grower --rate-mib-s 40 --max-mib 320 </run/app/go >/run/app/grower.json 2>&1 &
wait
