# koord-descheduler image. Build from the repository root:
#   docker build -f docker/koord-descheduler.Dockerfile -t <registry>/koord-descheduler:<tag> .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p koord-descheduler --bin koord-descheduler \
 && cp target/release/koord-descheduler /koord-descheduler

FROM gcr.io/distroless/cc-debian12:nonroot
# Needs no host access: runs as the distroless nonroot user.
COPY --from=build /koord-descheduler /koord-descheduler
USER 65532:65532
ENTRYPOINT ["/koord-descheduler"]
