#!/usr/bin/env bash
# Set up (idempotent) and run the demo: prepare Multi30k, train a small many-to-many
# attention-bridge model for a few minutes, translate (zero-shot too) and embed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/interlingua demo "$@"
