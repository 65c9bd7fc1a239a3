# LoopWarden: multi-stage build; the final image holds the virtualenv and the policies only.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/loopwarden
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# proxy/policies links to ../policies: the wheel ships the policies and prices as package data.
COPY policies ./policies
# hadolint ignore=DL3013
RUN /opt/loopwarden/bin/pip install ".[otel]"

FROM python:3.11-slim
RUN groupadd --system --gid 10001 loopwarden \
    && useradd --system --uid 10001 --gid loopwarden --no-create-home --shell /usr/sbin/nologin loopwarden
COPY --from=build /opt/loopwarden /opt/loopwarden
COPY policies /etc/loopwarden/policies
ENV PATH=/opt/loopwarden/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LOOPWARDEN_HOST=0.0.0.0 \
    LOOPWARDEN_PORT=8080 \
    LOOPWARDEN_METRICS_HOST=0.0.0.0 \
    LOOPWARDEN_METRICS_PORT=9464 \
    LOOPWARDEN_POLICIES_DIR=/etc/loopwarden/policies
USER 10001:10001
# 8080: the API; 9464: /metrics only (publish it to the scraper alone).
EXPOSE 8080 9464
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LOOPWARDEN_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["loopwarden", "serve"]
