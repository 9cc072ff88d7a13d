# The distflow image: one static binary on a distroless base, for every
# task of a cluster (see deploy/kubernetes).
#
#   docker build -t distflow .
#   docker run --rm distflow train --model mlp --epochs 1
#
# The build uses no cgo (the OpenBLAS back end exists only with -tags
# openblas). The CPU image leaves the CUDA platform out (-tags nocuda), so
# CGO_ENABLED=0 gives a static binary that needs no libc. The GPU image
# (docker build --target gpu) keeps it: the binary then loads libcuda,
# NVRTC and cuBLAS at run time and is linked against glibc, which its base
# has; run it with the NVIDIA container toolkit (docker run --gpus all),
# which mounts the driver. Both run as the distroless non-root user (65532).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# The modules first, in a layer of their own that changes rarely.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -tags nocuda \
      -o /out/distflow ./cmd/distflow \
    && /out/distflow --help >/dev/null \
    && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" \
      -o /out/gpu/distflow ./cmd/distflow

# The GPU image: glibc for the driver's libraries (CUDA's own come from the
# host through the container toolkit, or from an image that adds them).
FROM gcr.io/distroless/base-debian12:nonroot AS gpu
COPY --from=build /out/gpu/distflow /usr/local/bin/distflow
USER 65532:65532
EXPOSE 2222 9100
ENTRYPOINT ["/usr/local/bin/distflow"]
CMD ["--help"]

# The CPU image, the default target: last, so that a plain docker build
# makes it.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/distflow /usr/local/bin/distflow
USER 65532:65532
# 2222: the task's gRPC port (TF_CONFIG); 9100: Prometheus metrics
# (--metrics-port).
EXPOSE 2222 9100
ENTRYPOINT ["/usr/local/bin/distflow"]
CMD ["--help"]
