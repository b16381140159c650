#!/usr/bin/env bash
# Placeholder: the demo (standalone agent on the embedded default config,
# answering on a VIP) is written with the agent and cmd/ work.
echo "demo.sh not written yet" >&2
exit 1
