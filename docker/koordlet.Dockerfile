# koordlet image. Build from the repository root:
#   docker build -f docker/koordlet.Dockerfile -t <registry>/koordlet:<tag> .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p koordlet --bin koordlet \
 && cp target/release/koordlet /koordlet

FROM gcr.io/distroless/cc-debian12
# Runs as root: it writes cgroup, resctrl and procfs files on the host.
COPY --from=build /koordlet /koordlet

ENTRYPOINT ["/koordlet"]
