# koord-manager image. Build from the repository root:
#   docker build -f docker/koord-manager.Dockerfile -t <registry>/koord-manager:<tag> .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p koord-manager --bin koord-manager \
 && cp target/release/koord-manager /koord-manager

FROM gcr.io/distroless/cc-debian12:nonroot
# Needs no host access: runs as the distroless nonroot user.
COPY --from=build /koord-manager /koord-manager
USER 65532:65532
ENTRYPOINT ["/koord-manager"]
