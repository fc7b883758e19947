#!/usr/bin/env bash
# The official MCP Python SDK, pinned, in a virtual environment outside the working tree, for
# the MCP tests (tests/service/mcp.rs drives the server with tests/fixtures/mcp_client.py). Reused
# when the pinned version is already there.
set -euo pipefail
MCP_VERSION="2.3.0"
venv="${SKILL_RUNNER_MCP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/skill-runner-tests/mcp-venv}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_VERSION')" 2>/dev/null; then
  echo "mcp $MCP_VERSION already in $venv"
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_VERSION"
echo "mcp $MCP_VERSION installed in $venv"
