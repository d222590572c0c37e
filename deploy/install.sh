#!/usr/bin/env bash
# Install hipbot into .venv/ at the repo root.
#   bash deploy/install.sh          the assistant and worker (CPU torch), dev tools, bubblewrap
#                                   (the compile check's sandbox; apt, when run as root)
#   bash deploy/install.sh --test   also what the test suite needs: hipcc (apt), the vLLM CPU
#                                   server in .venv-vllm/, the SmolLM2 base model as safetensors,
#                                   Chromium (apt) for the operator page's browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "usage: bash deploy/install.sh [--test]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch first, so that nothing pulls a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
# PyPI's torchvision/torchaudio/torchcodec break beside the local torch build.
.venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# The operator page's chart (uPlot, MIT), fetched with npm from its registry into the page's
# static folder: the coordinator serves it itself (no CDN at run time, no build step).
vendor=jobs/finetune/web/static/vendor
if [ ! -s "$vendor/uPlot.iife.min.js" ]; then
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  if command -v npm >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent uplot@1.6.32 >/dev/null && tar xzf uplot-1.6.32.tgz)
    mkdir -p "$vendor"
    cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$vendor/"
    rm -rf "$tmp"
  else
    echo "note: npm not found and not root; the operator page draws no loss chart until:" \
      "sudo apt-get install npm && bash deploy/install.sh" >&2
  fi
fi
# The compile check (hipify --check, the bot's /hipify with an arch, port) runs hipcc only inside a
# bubblewrap sandbox; without bwrap it is refused.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "note: bubblewrap not found and not root; compile checks (and their tests) are refused until:" \
      "sudo apt-get install bubblewrap" >&2
  fi
fi
if [ "$want_test" = 1 ]; then
  apt_test="hipcc libamdhip64-dev librocrand-dev libhiprand-dev librocsparse-dev libhipsparse-dev
    librocprim-dev libomp-15-dev libopenmpi-dev freeglut3-dev libglew-dev libgl-dev"
  # shellcheck disable=SC2086
  if ! dpkg -s $apt_test >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      # hipcc and the ROCm libraries Debian packages (no hipBLAS/rocBLAS/hipFFT/rocThrust/hipCUB
      # there), plus what real CUDA projects include beside them (OpenMP, MPI, OpenGL): the port
      # tests compile against these.
      # shellcheck disable=SC2086
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $apt_test >/dev/null
    else
      echo "note: not root; install these for the compile-check and port tests: $apt_test" >&2
    fi
  fi
  # The operator page's browser tests drive Debian's Chromium with Playwright (in the dev extra);
  # Playwright never downloads a browser of its own.
  if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
      echo "note: not root; install Chromium for the operator page's browser tests:" \
        "sudo apt-get install chromium chromium-driver" >&2
    fi
  fi
  .venv/bin/python -m pip install -q "playwright>=1.45"
  .venv/bin/hipbot serve local install
  .venv/bin/hipbot models prepare smollm2
fi
