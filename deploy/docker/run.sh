#!/bin/sh
# Run a task image with ferry bind-mounted from the host as /usr/bin/fusion
# (for an image with ferry baked in, see Dockerfile.task, drop the -v of it).
# usage: run.sh IMAGE COMMAND…   (AWS_* variables are passed through)
# FUSE needs /dev/fuse and CAP_SYS_ADMIN; Docker's default AppArmor profile
# forbids mount(2), hence apparmor=unconfined (a no-op without AppArmor).
# The cache (/tmp/ferry-cache, ferry's default) is a host directory on local
# disk (ext4, xfs or btrfs), not the container's overlay: shared by every task
# on the host (each block fetched once per host), and a file system that takes
# fanotify pre-content events, so that cold files pass through too (tmpfs and
# overlayfs refuse them; ferry then says so at mount and reads them itself).
# The task does not see that directory (ferry covers it in the task's mount
# namespace), but a root task can get around the cover on purpose: one host
# directory per tenant where tenants do not trust each other.
set -eu
img=$1; shift
exec docker run --rm --device /dev/fuse --cap-add SYS_ADMIN --security-opt apparmor=unconfined \
  -v /opt/ferry/ferry:/usr/bin/fusion:ro \
  -v /mnt/nvme/ferry-cache:/tmp/ferry-cache \
  -e AWS_REGION -e AWS_S3_ENDPOINT -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_SESSION_TOKEN \
  --entrypoint /usr/bin/fusion "$img" "$@"
