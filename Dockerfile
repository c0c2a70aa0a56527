# ferry from source: a static binary in a FROM scratch image, at
# /usr/bin/ferry and /usr/bin/fusion (the Nextflow drop-in path), with /tmp
# (default cache), /fusion (mount point) and the CA bundle.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) -t ferry .
# Without a registry (or with a prebuilt bin/ferry) use `make image`, which
# builds the same final stage from deploy/docker/Dockerfile.prebuilt.
# Run it with --device /dev/fuse --cap-add SYS_ADMIN; bake it into a task
# image with deploy/docker/Dockerfile.task.
FROM golang:1.26 AS build
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build VERSION="$VERSION" COMMIT="$COMMIT" && ./scripts/rootfs.sh image bin/ferry /rootfs

FROM scratch
COPY --from=build /rootfs/ /
ENTRYPOINT ["/usr/bin/fusion"]
