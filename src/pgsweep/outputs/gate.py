"""The regression gate's outputs: the one line a CI log shows, and JUnit XML (one test case
per configuration compared; levels from a results folder escaped into valid XML)."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

from .safetext import xml


def junit_xml(result: dict[str, Any], before: str, after: str) -> str:
    """One test case per matched configuration; a failure where it is slower than allowed."""
    cases = result["matched"]
    suite = ET.Element("testsuite", name="pgsweep compare", tests=str(len(cases)),
                       failures=str(len(result["regressions"])))  # fmt: skip
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="before",
                  value=xml(before))  # fmt: skip
    for r in cases:
        name = ", ".join(f"{k}={v}" for k, v in r["levels"].items()) or "(no factors)"
        case = ET.SubElement(suite, "testcase", classname="pgsweep.tps", name=xml(name))
        if r["slower_beyond_threshold"]:
            ET.SubElement(case, "failure", message=xml(r["verdict"])).text = xml(
                f"TPS in {after} against {before}: {r['verdict']}")  # fmt: skip
        ET.SubElement(case, "system-out").text = xml(r["verdict"])
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def gate_line(result: dict[str, Any]) -> str:
    """The one line a CI log shows: the decision, and what slowdown the gate catches with
    80% power (the largest over the rows), so a PASS that could not have failed says so."""
    threshold = result["fail_if_slower"]
    bad = result["regressions"]
    catches = [r["catches"] for r in result["matched"] if r.get("catches") is not None]
    power = (f"; it catches a slowdown of {max(catches):.0%} or more with 80% power"
             if catches else "")  # fmt: skip
    skipped = result.get("not_gated", 0)
    if skipped:
        power += (f"; {skipped} comparison(s) across levels built once not gated (no "
                  "verdict: replicate them)")  # fmt: skip
    if not bad:
        return (f"pgsweep gate: PASS: no configuration is significantly more than "
                f"{threshold * 100:g}% slower ({len(result['matched'])} compared)"
                + power)  # fmt: skip
    worst = min(bad, key=lambda r: r.get("bound") or r["ci_high"])
    name = ", ".join(f"{k}={v}" for k, v in worst["levels"].items()) or "(no factors)"
    return (f"pgsweep gate: FAIL: {len(bad)} of {len(result['matched'])} configuration(s) "
            f"slower than {threshold * 100:g}%; worst {name}: {worst['verdict']}"
            + power)  # fmt: skip
