# The konnector image: `make image IMAGE=<repository>:<tag>` (BuildKit, the default builder
# of current docker, or podman/buildah). This file needs docker.io and gcr.io; where they cannot
# be pulled from, `make image` builds Dockerfile.static instead (IMAGE_BUILD=dockerfile insists
# on this file).
#
# Stage 1 builds the konnector with the four built-in policy modules embedded (host/build.rs
# compiles them for wasm32-wasip2). Stage 2 is distroless with nothing but the binary, run as
# the non-root user 65532. The builder's Debian release must match the runtime's (trixie =
# debian13): the binary links that glibc. The image is built for the build machine's
# architecture unless `make image PLATFORM=linux/arm64` asks for the consumer nodes' one.

FROM docker.io/library/rust:1.95-slim-trixie AS builder
# OpenSSL's headers: sigstore-rs (policy signature verification) links libssl, which the
# distroless runtime image ships.
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the target directory between builds; the binary is
# copied out of the cache so that the next stage can take it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p konnector \
    && mkdir -p /out \
    && cp target/release/konnector /out/konnector

FROM gcr.io/distroless/cc-debian13:nonroot
LABEL org.opencontainers.image.title="kbind konnector" \
      org.opencontainers.image.description="Binds provider cluster APIs into a consumer Kubernetes cluster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/konnector /konnector
# Two glibc malloc arenas instead of up to eight per core: less fragmentation, less RSS.
ENV MALLOC_ARENA_MAX=2
# Numeric, so that the kubelet can verify runAsNonRoot.
USER 65532:65532
# Metrics and health probes (the chart's defaults).
EXPOSE 8085 8081
ENTRYPOINT ["/konnector"]
CMD ["run"]
