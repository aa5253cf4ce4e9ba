# ncclwatch-agent image: the node agent, plus the NCCL profiler plugin that its DaemonSet's init
# container copies onto each GPU node, plus the CSI driver (ncclwatch-csi-driver) that the
# DaemonSet's csi container runs. Build from the repository root:
#   docker build -f deploy/docker/agent.Dockerfile -t ncclwatch-agent:0.1.0 .

# --- build ----------------------------------------------------------------------------------------
FROM debian:12 AS build
WORKDIR /src
# The dependencies first, so that editing sources does not re-run apt. patchelf is for the
# plugin bundle below.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps \
 && apt-get install -y -qq --no-install-recommends patchelf \
 && rm -rf /var/lib/apt/lists/*
COPY . .
ARG BUILD_JOBS=4
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLWATCH_BUILD_TESTS=OFF \
 && cmake --build build --parallel "${BUILD_JOBS}" --target ncclwatch-agent ncclwatch-csi-driver \
      nccl-profiler-ncclwatch \
 && strip --strip-unneeded build/agent/ncclwatch-agent build/agent/csi/ncclwatch-csi-driver \
      build/plugin/libnccl-profiler-ncclwatch.so \
      build/plugin/libncclwatch-engine.so build/plugin/libncclwatch-hostlibc.so
# The plugin runs inside training containers that have no Debian gRPC: give it its libraries.
RUN deploy/docker/bundle-plugin.sh build/plugin/libnccl-profiler-ncclwatch.so /out/plugin

# --- runtime --------------------------------------------------------------------------------------
FROM debian:12-slim
# The shared libraries of the agent (from `ldd ncclwatch-agent`) and of the CSI driver (the
# --help checks below fail the build if one is missing); ca-certificates for --aggregator-tls
# without --aggregator-ca-file (the system's roots).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      ca-certificates \
      libabsl20220623 \
      libbrotli1 \
      libc-ares2 \
      libcpp-httplib0.11 \
      libgrpc++1.51 \
      libgrpc29 \
      libprotobuf32 \
      libre2-9 \
      libssl3 \
      libtcmalloc-minimal4 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/agent/ncclwatch-agent /usr/bin/ncclwatch-agent
COPY --from=build /src/build/agent/csi/ncclwatch-csi-driver /usr/bin/ncclwatch-csi-driver
COPY --from=build /out/plugin/ /usr/lib/ncclwatch/
COPY deploy/docker/install-plugin.sh /usr/bin/ncclwatch-install-plugin
# Fail the build, not the rollout, if a library is missing.
RUN ncclwatch-agent --help > /dev/null \
 && ncclwatch-csi-driver --help > /dev/null \
 && test -f /usr/lib/ncclwatch/libnccl-profiler-ncclwatch.so \
 && test -f /usr/lib/ncclwatch/libncclwatch-engine.so && test -f /usr/lib/ncclwatch/libncclwatch-hostlibc.so

LABEL org.opencontainers.image.title="ncclwatch-agent" \
      org.opencontainers.image.description="ncclwatch node agent, NCCL profiler plugin (/usr/lib/ncclwatch) and CSI driver"
EXPOSE 9472 9473
# Root on purpose: in Kubernetes the agent serves its socket from a hostPath directory and reads
# the kubelet's pod-resources socket, both owned by root (deploy/k8s/base/agent-daemonset.yaml
# drops every capability and makes the root filesystem read-only). The CSI driver's container
# overrides the entrypoint with /usr/bin/ncclwatch-csi-driver and runs privileged: it mounts.
USER root
ENTRYPOINT ["/usr/bin/ncclwatch-agent"]
