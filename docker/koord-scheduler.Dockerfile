# koord-scheduler image. Build from the repository root:
#   docker build -f docker/koord-scheduler.Dockerfile -t <registry>/koord-scheduler:<tag> .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p koord-scheduler --bin koord-scheduler \
 && cp target/release/koord-scheduler /koord-scheduler

FROM gcr.io/distroless/cc-debian12:nonroot
# Needs no host access: runs as the distroless nonroot user.
COPY --from=build /koord-scheduler /koord-scheduler
USER 65532:65532
ENTRYPOINT ["/koord-scheduler"]
