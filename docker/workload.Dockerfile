# The image Trainyard's own workloads run in on GPU hosts: the LoRA trainer
# (`python -m trainer`) and the serving engine (`python -m engine`), with the runner.
#
# torch from PyPI is its CUDA build (it carries CUDA's libraries), so this image runs on any
# host with the NVIDIA driver and the NVIDIA Container Toolkit; no CUDA base image is needed.
# For a CPU-only image, build with --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
#
#   docker build -f docker/workload.Dockerfile -t REGISTRY/trainyard-workload:VERSION .
#   docker push REGISTRY/trainyard-workload:VERSION
#   TRAINER_IMAGE=REGISTRY/trainyard-workload:VERSION ENGINE_IMAGE=REGISTRY/trainyard-workload:VERSION
#
# (Hosts without a registry: `manage.py build_images` builds a CPU image offline instead.)
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

# The `train` and `trackers` (W&B, MLflow reporting) extras of pyproject.toml, exactly as
# pinned there, and the hub client.
COPY pyproject.toml /tmp/pyproject.toml
RUN python -c "import tomllib; extras = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']['optional-dependencies']; open('/tmp/train.txt', 'w').write('\n'.join(extras['train'] + extras['trackers']) + '\nhuggingface_hub\n')" \
    && if [ -n "$TORCH_INDEX" ]; then pip install --extra-index-url "$TORCH_INDEX" -r /tmp/train.txt; \
       else pip install -r /tmp/train.txt; fi \
    && rm /tmp/pyproject.toml /tmp/train.txt

# The project's workload packages (standard library and the packages above only).
COPY runner /opt/trainyard-packages/runner
COPY trainer /opt/trainyard-packages/trainer
COPY engine /opt/trainyard-packages/engine
RUN echo /opt/trainyard-packages > "$(python -c 'import site; print(site.getsitepackages()[0])')/trainyard.pth" \
    && echo "trainyard workload image" > /etc/trainyard-image

# The runner is the entrypoint the container runtime names (`python3 -m runner`).
CMD ["python3", "-m", "runner"]
