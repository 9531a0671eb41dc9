# The operator image: uv-built virtual environment on a slim Python, running as a numeric non-root user.
FROM python:3.11-slim AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PROJECT_ENVIRONMENT=/opt/specpilot
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-install-project --no-dev
COPY operator ./operator
RUN uv sync --locked --no-dev --no-editable

FROM python:3.11-slim
# jemalloc, which the chart preloads (LD_PRELOAD) as the operator's allocator, at one path on every architecture
RUN apt-get update \
    && apt-get install -y --no-install-recommends libjemalloc2 \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(find /usr/lib -name libjemalloc.so.2 | head -n 1)" /usr/local/lib/libjemalloc.so.2
COPY --from=build /opt/specpilot /opt/specpilot
ENV PATH=/opt/specpilot/bin:$PATH PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["python", "-m", "specpilot"]
CMD ["run"]
