#!/bin/sh
# Run a task image with ferry bind-mounted from the host as /usr/bin/fusion.
# usage: run.sh IMAGE COMMAND…   (AWS_* / FUSION_* variables are passed through)
set -eu
img=$1; shift
exec docker run --rm --device /dev/fuse --cap-add SYS_ADMIN \
  -v /opt/ferry/ferry:/usr/bin/fusion:ro \
  -v /mnt/nvme/ferry-cache:/tmp/ferry-cache \
  -e AWS_REGION -e AWS_S3_ENDPOINT -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_SESSION_TOKEN \
  --entrypoint /usr/bin/fusion "$img" "$@"
