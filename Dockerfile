# inferbus: one image for ingest, workers and the scaler (the command picks the role).
# GPU workers need the NVIDIA container toolkit on the host; the CUDA runtime comes from the
# base image, onnxruntime-gpu and TensorRT from the `gpu` extra.
ARG CUDA_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
FROM ${CUDA_IMAGE} AS base

ARG EXTRAS=gpu,k8s,fast
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/inferbus \
    PATH=/opt/inferbus/bin:$PATH

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/inferbus

WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY services ./services
COPY scaler ./scaler
COPY infra ./infra
COPY tracing ./tracing
RUN pip install --upgrade pip && pip install ".[${EXTRAS}]"

# Demo models, so the image serves something without a mounted repository.
# The runtime user is numeric (10001:10001): Kubernetes' runAsNonRoot can verify a number,
# not a name. What it writes at run time: the TensorRT engine cache (model.yaml's
# engine_cache_dir, by default .inferbus/trt-cache under /app: made here so that a named
# volume mounted there starts owned by 10001) and, under `inferbus up`, .inferbus/logs;
# k8s mounts an emptyDir at /cache for the cache (infra/k8s/workers.yaml).
RUN inferbus models init --dir /models \
 && groupadd --system --gid 10001 inferbus \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app inferbus \
 && mkdir -p /app/.inferbus/trt-cache && chown -R 10001:10001 /app/.inferbus /models
USER 10001:10001

ENV INFERBUS_MODELS_DIR=/models \
    INFERBUS_KAFKA_BOOTSTRAP=kafka:9092
EXPOSE 9100 9101 9102
ENTRYPOINT ["inferbus"]
CMD ["--help"]

# The scaler with the compose actuator drives the host's Docker engine: it needs the client.
FROM base AS scaler
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends docker.io docker-compose-v2 \
 && rm -rf /var/lib/apt/lists/*

# Default target: ingest, workers, topics, and the scaler under Kubernetes.
FROM base AS runtime
