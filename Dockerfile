# The engine image: the operator (kopf), `achilles db upgrade` (the chart's migration
# hook) and, by default, the run Jobs (`achilles runner`). The chart sets each command.
#
#   docker build -t achilles-agent-engine .
# runner_image/Dockerfile is this image with `achilles runner` as its entry point.

# Layers are ordered for the build cache: the locked requirements come from pyproject.toml
# and uv.lock alone, so an edit of the sources rebuilds only the wheel and its layer.

# --- build: the locked, hashed requirements, then the project wheel ---
FROM python:3.11-slim AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /bin/uv
WORKDIR /src
COPY pyproject.toml uv.lock ./
RUN mkdir /deps \
 && uv export --frozen --no-dev --no-emit-project --format requirements-txt \
      --output-file /deps/requirements.txt
COPY README.md ./
COPY operator/achilles ./operator/achilles
RUN uv build --wheel --out-dir /dist

# --- runtime: slim Python, the dependencies, the wheel, a non-root user ---
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /deps /tmp/deps
RUN pip install --require-hashes -r /tmp/deps/requirements.txt \
 && rm -rf /tmp/deps \
 && useradd --system --uid 10001 --gid 0 --no-create-home --shell /usr/sbin/nologin achilles
COPY --from=build /dist /tmp/dist
RUN pip install --no-deps /tmp/dist/*.whl \
 && rm -rf /tmp/dist
USER 10001
ENTRYPOINT ["achilles"]
CMD ["--help"]
