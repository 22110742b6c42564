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
# On GPU nodes the NVIDIA container runtime mounts libnvidia-ml.so.1 into
# containers that ask for it; koordlet loads it at run time to report the
# node's Device (feature gate Accelerators). Elsewhere these do nothing.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=utility

ENTRYPOINT ["/koordlet"]
