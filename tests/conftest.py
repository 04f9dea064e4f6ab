"""Test-wide setup: LiteLLM must not fetch its price map over the network at import."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
