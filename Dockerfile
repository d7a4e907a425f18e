# syntax=docker/dockerfile:1
# The hcclwatch image: the daemon (`hcclwatch run`, DaemonSet) and the remediation
# receiver (`hcclwatch remediate`, Deployment) in one binary.
#
#   docker build -t ghcr.io/hcclwatch/hcclwatch:0.1.0 .
#
# That tag is the image deploy/kubernetes and the Helm chart (deploy/helm/hcclwatch, its
# appVersion) name; tests/image.rs keeps the three in step.
# No Docker engine runs in this project's CI: the file is linted with hadolint there,
# not built (docs/deployment.md).

# --- build: the release binary, from the locked dependency set -------------------------
# Stripped, without the line tables the release profile keeps for local profiling (about
# 23 MB instead of 136 MB). Only the hcclwatch binary leaves this stage: the test doubles
# (tests/fake-dcmi, tests/fake-hccn) are workspace members but are not built here.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
ENV CARGO_PROFILE_RELEASE_DEBUG=none \
    CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo build --release --locked --bin hcclwatch

# --- runtime: Debian slim, CA certificates (OTLP over https, the Kubernetes API) --------
# Not distroless: DCMI (libdcmi.so) and hccn_tool come from the host's driver at run time
# and link against the image's glibc and libstdc++, which Debian slim is known to carry.
FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/hcclwatch /usr/local/bin/hcclwatch
COPY deploy/config/hcclwatch.toml /etc/hcclwatch/hcclwatch.toml
LABEL org.opencontainers.image.title="hcclwatch" \
      org.opencontainers.image.ref.name="ghcr.io/hcclwatch/hcclwatch:0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# DCMI and the driver come from the host, mounted read-only by the DaemonSet at these
# paths (hostPath /usr/local/dcmi and /usr/local/Ascend/driver).
ENV LD_LIBRARY_PATH=/usr/local/dcmi:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64
# Non-root by default (the receiver runs so). The DaemonSet runs the daemon as root only
# because DCMI opens /dev/davinci_manager, /dev/devmm_svm and /dev/hisi_hdc, which the
# driver creates root-only.
USER 65532:65532
EXPOSE 9478 9479
ENTRYPOINT ["/usr/local/bin/hcclwatch"]
CMD ["run", "--config.file=/etc/hcclwatch/hcclwatch.toml"]
