#!/bin/bash
# HyperPod lifecycle script for EKS-orchestrated instance groups. HyperPod runs it once per
# node after boot; the EKS bootstrap itself is done by HyperPod, so this only prepares the
# node for model servers: a large /dev/shm and the local NVMe as the image/model cache.
set -euo pipefail
logger -t igw-on-create "preparing HyperPod node for inference"
if [ -d /opt/dlami/nvme ]; then
  mkdir -p /opt/dlami/nvme/models
  chmod 0755 /opt/dlami/nvme/models
fi
logger -t igw-on-create "done"
