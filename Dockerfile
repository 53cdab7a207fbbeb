# Ferry bridge image: a static binary on a distroless base, running as a non-root user.
#
#   docker build -t ferry .
#   docker run --rm -p 127.0.0.1:1883:1883 -p 127.0.0.1:8080:8080 \
#       -v "$PWD/configs/compose.yaml:/etc/ferry/ferry.yaml:ro" ferry
#
# The image reads /etc/ferry/ferry.yaml (mount your own; examples are in /etc/ferry/examples).
# docker-compose.yml runs it next to a single-node Apache Kafka.

# ---- build stage: compile a static binary (no cgo, no libc dependency).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/ferry-bridge ./cmd/bridge

# ---- runtime stage: nothing but the binary, CA roots and the example configs.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ferry-bridge /usr/local/bin/ferry-bridge
COPY configs/ /etc/ferry/examples/
# distroless "nonroot" is uid/gid 65532: never run as root.
USER 65532:65532
# 1883 MQTT, 8883 MQTT over TLS, 1882 MQTT over WebSocket, 8080 /metrics /healthz /readyz.
EXPOSE 1883 8883 1882 8080
ENTRYPOINT ["/usr/local/bin/ferry-bridge"]
CMD ["--config", "/etc/ferry/ferry.yaml"]
