# ncclwatch-aggregator image: the aggregator and the `ncclwatch` CLI
# (kubectl -n ncclwatch exec deploy/ncclwatch-aggregator -- ncclwatch stragglers).
# Build from the repository root:
#   docker build -f deploy/docker/aggregator.Dockerfile -t ncclwatch-aggregator:0.1.0 .

# --- build ----------------------------------------------------------------------------------------
FROM debian:12 AS build
WORKDIR /src
# The dependencies first, so that editing sources does not re-run apt.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps && rm -rf /var/lib/apt/lists/*
COPY . .
ARG BUILD_JOBS=4
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNCCLWATCH_BUILD_TESTS=OFF \
 && cmake --build build --parallel "${BUILD_JOBS}" --target ncclwatch-aggregator ncclwatch \
 && strip --strip-unneeded build/aggregator/ncclwatch-aggregator build/aggregator/ncclwatch

# --- runtime --------------------------------------------------------------------------------------
FROM debian:12-slim
# The shared libraries of both binaries (from `ldd`). RocksDB is linked statically (Debian's CMake
# package exports librocksdb.a), so only its compression libraries are needed here.
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      libabsl20220623 \
      libbrotli1 \
      libbz2-1.0 \
      libc-ares2 \
      libcpp-httplib0.11 \
      libgrpc++1.51 \
      libgrpc29 \
      liblz4-1 \
      libprotobuf32 \
      libre2-9 \
      libsnappy1v5 \
      libssl3 \
      libtcmalloc-minimal4 \
      libzstd1 \
      zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/aggregator/ncclwatch-aggregator /usr/bin/ncclwatch-aggregator
COPY --from=build /src/build/aggregator/ncclwatch /usr/bin/ncclwatch
# Fail the build, not the rollout, if a library is missing.
RUN ncclwatch-aggregator --help > /dev/null && ncclwatch --help > /dev/null

# A fixed non-root uid/gid (65532), matching runAsUser/fsGroup in the manifests and the chart.
RUN groupadd --system --gid 65532 ncclwatch \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/ncclwatch --no-create-home \
      --shell /usr/sbin/nologin ncclwatch \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/ncclwatch

LABEL org.opencontainers.image.title="ncclwatch-aggregator" \
      org.opencontainers.image.description="ncclwatch aggregator and CLI"
EXPOSE 9470 9471
USER 65532:65532
ENTRYPOINT ["/usr/bin/ncclwatch-aggregator"]
