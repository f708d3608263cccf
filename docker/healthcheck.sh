#!/bin/bash
# The image's HEALTHCHECK: asks the reaper's /healthz on this container's loopback with bash alone
# (the image has no curl). Healthy only on "200": the reaper answers 503 after --unhealthy-after
# failed cycles in a row. Port: DBLOCK_HEALTH_PORT, default 9464 (the reaper's --listen default).
set -u
port=${DBLOCK_HEALTH_PORT:-9464}
exec 3<> "/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
IFS= read -r -t 3 status <&3 || exit 1
[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
