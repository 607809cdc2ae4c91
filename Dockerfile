# syntax=docker/dockerfile:1
#
# gatebot container image.
#
#   docker build -t gatebot:0.1.0 .
#   docker run --rm -p 8080:8080 -v gatebot-data:/data gatebot:0.1.0
#
# Size: the distroless cc base (gcr.io/distroless/cc-debian12, ~24 MB compressed: glibc,
# libgcc, CA certificates, no shell, no package manager) plus the stripped release binary
# and the message templates.
# binary: see BENCHMARKS.md

FROM rust:1-bookworm AS builder
# The context has no .git: pass the commit for gatebot_build_info, e.g.
#   docker build --build-arg GATEBOT_BUILD_COMMIT=$(git rev-parse --short=12 HEAD) .
ARG GATEBOT_BUILD_COMMIT=
WORKDIR /app
COPY . .
RUN cargo build --release --locked \
    && mkdir -p /data-skeleton

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /app/target/release/gatebot /gatebot
# /data holds the SQLite database by default, owned by the nonroot user; mount a volume there.
COPY --from=builder --chown=65532:65532 /data-skeleton /data
# The message templates are compiled into the binary; the policy file's [templates] dir
# overrides them.
ENV GATEBOT_LISTEN=0.0.0.0:8080 \
    GATEBOT_DATABASE_URL=sqlite:///data/gatebot.db
USER 65532:65532
EXPOSE 8080
VOLUME ["/data"]
ENTRYPOINT ["/gatebot"]
CMD ["serve"]
