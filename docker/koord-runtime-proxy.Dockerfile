# koord-runtime-proxy image. Build from the repository root:
#   docker build -f docker/koord-runtime-proxy.Dockerfile -t <registry>/koord-runtime-proxy:<tag> .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p koord-runtime-proxy --bin koord-runtime-proxy \
 && cp target/release/koord-runtime-proxy /koord-runtime-proxy

FROM gcr.io/distroless/cc-debian12
# Runs as root: it serves kubelet's CRI socket in a host directory.
COPY --from=build /koord-runtime-proxy /koord-runtime-proxy

ENTRYPOINT ["/koord-runtime-proxy"]
