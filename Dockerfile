# skill-runner: one static-ish Rust binary plus the runtimes engines need (Node/npm for the agent
# CLIs, Python for script skills). Build: docker build -t skill-runner . (see docker/compose.yml)

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY templates ./templates
COPY static ./static
RUN cargo build --release --locked --package skill-runner \
    && strip target/release/skill-runner

FROM node:20-bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3=3.11.2-1+b1 \
        tini=0.19.0-1+b3 \
        ca-certificates=20230311+deb12u1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --create-home --home-dir /home/runner runner \
    && mkdir -p /data /skills /shared /opt/cache/skill-runner \
    && chown runner:runner /data /skills /shared /opt/cache/skill-runner
COPY --from=build /src/target/release/skill-runner /usr/local/bin/skill-runner
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
HEALTHCHECK --interval=30s --timeout=3s \
    CMD ["node", "-e", "fetch('http://127.0.0.1:8000/v1/system/ping').then(r => process.exit(r.status === 204 ? 0 : 1)).catch(() => process.exit(1))"]
# tini is PID 1: it forwards signals and reaps the orphaned grandchildren of engine processes.
ENTRYPOINT ["/usr/bin/tini", "--", "skill-runner"]
CMD ["serve"]
