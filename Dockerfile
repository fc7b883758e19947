# skill-runner: one static-ish Rust binary plus the runtimes engines need (Node/npm for the agent
# CLIs, Python for script skills). Build: docker build -t skill-runner . (see docker/compose.yml)

# The bases are build args so that a machine without a registry can pass its own (the test
# lane, scripts/container-test.sh, builds them from Debian's packages); the defaults are the
# official images, so `docker build .` needs no argument.
ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=node:20-bookworm-slim
# Where the binary comes from: `build` compiles it here; `prebuilt` takes
# `docker/prebuilt/skill-runner` from the build context (a release build made on Debian 12,
# as the test lane does). Only the stage named is built (BuildKit, Docker's builder since 23.0,
# and buildah skip the other).
ARG BINARY=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY templates ./templates
COPY static ./static
RUN cargo build --release --locked --package skill-runner \
    && strip target/release/skill-runner \
    && install -D target/release/skill-runner /out/skill-runner

FROM scratch AS prebuilt
COPY docker/prebuilt/skill-runner /out/skill-runner

# hadolint ignore=DL3006
FROM ${BINARY} AS binary

FROM ${RUNTIME_IMAGE} AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3=3.11.2-1+b1 \
        tini=0.19.0-1+b3 \
        ca-certificates=20250419~deb12u2 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /home/runner runner \
    && mkdir -p /data /skills /shared /opt/cache/skill-runner \
    && chown runner:runner /data /skills /shared /opt/cache/skill-runner
COPY --from=binary /out/skill-runner /usr/local/bin/skill-runner
COPY --chown=runner:runner skills /skills
ENV SKILL_RUNNER_BIND=0.0.0.0:8000 \
    SKILL_RUNNER_DATA_DIR=/data \
    SKILL_RUNNER_SKILLS_DIR=/skills \
    SKILL_RUNNER_AGENT_CACHE_DIR=/opt/cache/skill-runner \
    NPM_CONFIG_PREFIX=/opt/cache/skill-runner/npm
USER runner
WORKDIR /home/runner
VOLUME ["/data", "/skills", "/opt/cache/skill-runner"]
EXPOSE 8000
# Asks /readyz where SKILL_RUNNER_BIND (or PORT) makes the service listen.
HEALTHCHECK --interval=30s --timeout=3s \
    CMD ["skill-runner", "health"]
# tini is PID 1: it forwards signals and reaps the orphaned grandchildren of engine processes.
ENTRYPOINT ["/usr/bin/tini", "--", "skill-runner"]
CMD ["serve"]
