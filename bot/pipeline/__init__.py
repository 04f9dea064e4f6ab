"""The call pipeline, in one package: every tool call passes one ordered list of stages.

abort → provider skip → channel role → PreToolUse hooks → firewall → guardian → permission
(`flow.py`, `hooks.py`, `firewall.py`, `guardian.py`: each a small class returning a
`Decision`), then approval → execute with timeout → mask → PostToolUse hooks → audit
(`tail.py`). `harness.py` is the entry a model's call takes; a refusal is a `Refusal` value,
rendered into words in one place (`flow.refused`). This package sits above `toolsets/`
(it runs their tools) and below `approvals/` and `agent/`; toolsets import nothing from it.
"""
