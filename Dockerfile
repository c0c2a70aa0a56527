# Builds the static ferry binary and a minimal image that carries it at
# /usr/bin/fusion (the Nextflow drop-in path) and /usr/bin/ferry.
# Use it as a base (FROM … AS ferry; COPY --from=ferry /usr/bin/ferry …) or as
# an init container that copies the binary into a shared emptyDir.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build

FROM busybox:stable
COPY --from=build /src/bin/ferry /usr/bin/ferry
RUN ln -s ferry /usr/bin/fusion
ENTRYPOINT ["/usr/bin/fusion"]
