#!/usr/bin/env bash
# Set up (idempotent) and run the demo: prepare Multi30k, train a small many-to-many
# attention-bridge model for a few minutes, translate (zero-shot too) and embed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# In this repository's checkout, a Multi30k copy beside it (../shared/data) is used instead of a download.
if [ -z "${INTERLINGUA_DATA:-}" ] && [ -f ../shared/data/multi30k/train.en.gz ]; then
  export INTERLINGUA_DATA="$(cd ../shared/data && pwd)"
fi
.venv/bin/interlingua demo "$@"
