#!/usr/bin/env bash
# The Python tools the tests drive, from PyPI, pinned, each in a virtual environment outside the
# working tree (reused when the pinned version is already there):
# - the official MCP Python SDK: tests/service/mcp.rs drives the server with
#   tests/fixtures/mcp_client.py;
# - skills-ref, the Agent Skills standard's reference validator (`agentskills validate`):
#   tests/service/skills_ref.rs holds our SKILL.md verdicts to its;
# - standardwebhooks, the Standard Webhooks reference library: tests/runs/webhooks.rs verifies
#   every delivery with its own verifier (tests/fixtures/webhook_receiver.py);
# - moto's server, an S3-compatible store on loopback: tests/runs/cluster.rs runs the shared-
#   storage tests against `s3://` too.
set -euo pipefail

# install <venv name> <package> <version> <variable naming another venv folder>
install() {
  local name=$1 package=$2 version=$3 override=$4
  local venv="${!override:-${XDG_CACHE_HOME:-$HOME/.cache}/skill-runner-tests/$name-venv}"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$package') != '$version')" 2>/dev/null; then
    echo "$package $version already in $venv"
    return
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$package==$version" ${5:-}
  echo "$package $version installed in $venv"
}

install mcp mcp 2.3.0 SKILL_RUNNER_MCP_VENV
install skills-ref skills-ref 0.1.1 SKILL_RUNNER_SKILLS_REF_VENV
install standardwebhooks standardwebhooks 1.1.0 SKILL_RUNNER_STANDARDWEBHOOKS_VENV
install moto moto 5.2.5 SKILL_RUNNER_MOTO_VENV "moto[server]==5.2.5"
