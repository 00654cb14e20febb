# syntax=docker/dockerfile:1
# livefuse CPU image: the daemon on NumPy + the ONNX Runtime CPU provider (docs/deploy.md "Images").
#   docker build -t livefuse:cpu .
#   docker run --rm -p 8080:8080 -v /srv/livefuse/models:/models:ro -e LIVEFUSE_TOKEN=... livefuse:cpu
# The default models (models/bundled/) are in the image; mount more (inswapper, GFPGAN, the dlib
# embedder) at /models (LIVEFUSE_MODELS).
FROM python:3.12-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LIVEFUSE_MODELS=/models \
    XDG_CACHE_HOME=/cache

WORKDIR /app

# dependencies first, so a code change does not reinstall them (every package is a binary wheel:
# av bundles FFmpeg and its codecs, opencv is the headless build, nothing needs apt)
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

# non-root user; /models is the mount point for the model volume, /cache holds the batch-dynamic model
# copies the daemon converts once (XDG_CACHE_HOME/livefuse/converted)
RUN groupadd --system --gid 10001 livefuse \
    && useradd --system --uid 10001 --gid livefuse --home-dir /home/livefuse --create-home livefuse \
    && mkdir -p /models /cache \
    && chown livefuse:livefuse /models /cache

# the product only: .dockerignore lets through run_stream.py, the four packages and bench/ (`bench --gpu` on a GPU node)
COPY --chown=livefuse:livefuse . .

USER 10001:10001
VOLUME ["/models", "/cache"]
EXPOSE 8080

# /health answers from the event loop alone (no token needed); slim has no curl, so Python asks
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"]

# SIGTERM: the daemon refuses new sessions and closes open ones within --drain-timeout, then exits;
# python is PID 1 and installs its own SIGTERM handler, so the signal is not ignored
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "run_stream.py"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--execution-provider", "cpu", "--drain-timeout", "10"]
