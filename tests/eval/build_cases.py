"""Writes the bundled eval cases (bot/eval/cases/<id>/) and their reference scripts
(tests/eval/scripts/<id>.yaml) from the definitions in tests/eval/cases_*.py.

    python -m tests.eval.build_cases

The case folders are what ships; this is only how they were written. A test checks the
folders are what this writes (edit the definitions, then run it again)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.eval import cases_diagnosis, cases_observe, cases_safety
from tests.eval.kit import CaseDef

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "bot" / "eval" / "cases"
SCRIPTS = Path(__file__).parent / "scripts"


def all_cases() -> list[CaseDef]:
    return [*cases_diagnosis.CASES, *cases_observe.CASES, *cases_safety.CASES]


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def case_files(case: CaseDef) -> dict[str, str]:
    """Relative path -> text of every file of the case's folder."""
    spec: dict[str, Any] = {"id": case.id, "category": case.category, "question": case.question}
    if case.description:
        spec["description"] = case.description
    spec["channel"] = {"cluster": case.cluster, "namespace": case.namespace}
    spec["role"] = case.role
    spec["expect"] = case.expect
    files = {"case.yaml": _dump(spec), "fixture/kube.yaml": _dump(case.objects)}
    if case.logs:
        files["fixture/logs.yaml"] = _dump({"logs": case.logs})
    if case.prometheus is not None:
        files["fixture/prometheus.yaml"] = _dump({"series": case.prometheus})
    if case.loki is not None:
        files["fixture/loki.yaml"] = _dump({"streams": case.loki})
    return files


def main() -> None:
    cases = all_cases()
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    shutil.rmtree(CASES, ignore_errors=True)
    shutil.rmtree(SCRIPTS, ignore_errors=True)
    SCRIPTS.mkdir(parents=True)
    for case in cases:
        for relative, text in case_files(case).items():
            path = CASES / case.id / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        (SCRIPTS / f"{case.id}.yaml").write_text(_dump(case.script.as_data()), encoding="utf-8")
    print(f"wrote {len(cases)} cases to {CASES} and their scripts to {SCRIPTS}")


if __name__ == "__main__":
    main()
