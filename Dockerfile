# One image for web, worker and beat; docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
# The SSH provider drives its hosts with the system OpenSSH client; the worker drives the
# host's container runtime through its socket with the docker CLI (docker-compose.yml).
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client docker.io \
    && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md constraints.txt ./
COPY config ./config
COPY apps ./apps
RUN pip install -c constraints.txt .

COPY . .
# collectstatic needs settings to load; these build-time values are not used at run time.
# (REDIS_URL too: unset, settings would make a Redis password under var/ in the image.)
RUN DEBUG=0 SECRET_KEY=build-only SECRETS_KEYS=YnVpbGQtb25seS1mZXJuZXQta2V5LTAxMjM0NTY3ODk= \
    REDIS_URL=redis://build-only:6379/0 \
    STATIC_ROOT=/app/staticfiles python manage.py collectstatic --noinput --verbosity 0

ENV STATIC_ROOT=/app/staticfiles TRAINYARD_VAR_DIR=/app/var
RUN mkdir -p /app/var && useradd --create-home --uid 1000 trainyard && chown -R trainyard /app/var
# By number, so Kubernetes can check runAsNonRoot (deploy/kubernetes runs it as 1000).
USER 1000
EXPOSE 8000
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers"]
