"""Turns a `bazel test` run into herd's one-line summary: "N passed, N failed".

Counts individual test cases from each target's JUnit XML (gtest writes one),
so the line reflects real tests rather than Bazel targets. A target that
failed without reporting a failing case (crash, timeout, build error) counts
as one failure. Each `--extra NAME=RC` (a check run outside `bazel test`,
such as the CUDA build) counts as one case, passed when RC is 0.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

log_path, bazel_rc = sys.argv[1], int(sys.argv[2])
# --extra "NAME=RC": a check outside `bazel test` (the CUDA build), one case.
extras = [arg.rsplit("=", 1) for flag, arg in zip(sys.argv[3::2], sys.argv[4::2]) if flag == "--extra"]
passed = failed = skipped = 0
status_re = re.compile(r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY|FAILED TO BUILD)\b")
targets = []
with open(log_path, errors="replace") as f:
    for line in f:
        m = status_re.match(line.strip())
        if m:
            targets.append((m.group(1), m.group(2)))

for target, status in targets:
    pkg, name = target[2:].split(":")
    xml_path = os.path.join("bazel-testlogs", pkg, name, "test.xml")
    cases = case_failures = 0
    if status != "FAILED TO BUILD" and os.path.exists(xml_path):
        try:
            root = ET.parse(xml_path).getroot()
            for case in root.iter("testcase"):
                if case.get("status") == "notrun":
                    continue
                if case.get("result") == "skipped" or case.find("skipped") is not None:
                    skipped += 1  # e.g. GPU tests on a machine without a GPU
                    continue
                cases += 1
                if case.find("failure") is not None or case.find("error") is not None:
                    case_failures += 1
        except ET.ParseError:
            pass
    if status in ("PASSED", "FLAKY"):
        passed += max(cases - case_failures, 1 if cases == 0 else 0)
        failed += case_failures
    else:
        passed += cases - case_failures
        failed += max(case_failures, 1)
        print(f"FAILED: {target} ({status})")

extra_failed = 0
for name, rc in extras:
    if int(rc) == 0:
        passed += 1
    else:
        extra_failed += 1
        failed += 1
        print(f"FAILED: {name} (exit {rc})")

if bazel_rc not in (0, 3) and failed == extra_failed:
    failed += 1  # the build itself failed: no test could run
    print(f"FAILED: bazel exited with code {bazel_rc} before running the tests")
if passed + failed == 0:
    failed = 1
    print("FAILED: no test ran")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(0 if failed == 0 and bazel_rc == 0 else 1)
