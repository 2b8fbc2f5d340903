# syntax=docker/dockerfile:1
# SuperNode/ClientApp image for NVIDIA Jetson (arm64, JetPack 6 = L4T r36).
# flwr 1.41 needs Python >= 3.11, while NVIDIA's L4T PyTorch images ship Python 3.8 (JetPack 5)
# or 3.10 (JetPack 6). The default base is therefore a jetson-containers PyTorch image for
# L4T r36.4 built on Ubuntu 24.04 (Python 3.12, CUDA 12.8 torch). Any other L4T PyTorch image
# with Python >= 3.11 works: docker build --build-arg BASE_IMAGE=... (the first RUN checks).
# Build on the Jetson (or with an arm64 builder) from the repository root:
#   docker build -f docker/jetson.Dockerfile -t fedapp-supernode-jetson:0.1.0 .
# Run with the NVIDIA runtime so the ClientApp sees the GPU: docker run --runtime nvidia ...
ARG BASE_IMAGE=dustynv/pytorch:2.6-r36.4.0-cu128-24.04
FROM ${BASE_IMAGE}
RUN python3 -c "import sys; assert sys.version_info >= (3, 11), 'flwr 1.41 needs Python >= 3.11, base image has ' + sys.version" \
 && python3 -c "import torch; print('base torch', torch.__version__, 'cuda', torch.version.cuda)"
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_HOME=/var/lib/fedapp/flwr
WORKDIR /opt/fedapp
COPY pyproject.toml README.md server_app.py client_app.py ./
COPY fedapp ./fedapp
COPY docker/node_requirements.py docker/
# A venv that sees the base image's CUDA torch; every other dependency is installed into it with
# torch pinned to the version already there, so pip can never swap in a CPU wheel from PyPI, and
# torchvision pinned to the release made for that torch (2.6 -> 0.21; one the base has is kept).
RUN python3 -m venv --system-site-packages /opt/venv \
 && python3 -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > /tmp/constraints.txt \
 && /opt/venv/bin/python docker/node_requirements.py pyproject.toml "$(python3 -c 'import torch; print(torch.__version__)')" \
    > /tmp/requirements.txt \
 && /opt/venv/bin/pip install -c /tmp/constraints.txt -r /tmp/requirements.txt \
 && /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/python -c "import flwr, torch, torchvision; print('flwr', flwr.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__)"
ENV PATH=/opt/venv/bin:$PATH
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/fedapp fedapp
USER fedapp
WORKDIR /var/lib/fedapp
ENTRYPOINT ["fedapp", "deploy", "supernode", "--no-restart"]
