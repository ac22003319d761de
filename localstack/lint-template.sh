#!/usr/bin/env bash
# cfn-lint and `sam validate --lint` on the SAM template, offline.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash localstack/install.sh tools >/dev/null
venv=${AGENT_PLATFORM_CACHE:-$HOME/.cache/agent-platform}/venvs/tools/bin
"$venv/cfn-lint" infra/template.yaml
AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0 "$venv/sam" validate --lint -t infra/template.yaml
echo "template: cfn-lint and sam validate --lint passed"
