#!/usr/bin/env python3
"""scripts/gpu_check.sh's summary: reads the parts' outputs in RESULTS_DIR and
prints ONE JSON line: each part's status (passed, failed or skipped) and
figures, the GPU's name, the total seconds, and ok. On cuda a skipped part
fails the check (the GPU machine must run everything); on cpu (a dry run)
the NCCL parts may skip. Exit status 0 when ok.

Usage: gpu_check_summary.py RESULTS_DIR cuda|cpu SECONDS
"""
import json
import os
import sys


def read(results, name, default=None):
    try:
        with open(os.path.join(results, name)) as f:
            return f.read()
    except OSError:
        return default


def last_json(text):
    """The last line of `text` that parses as a JSON object, or None."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def rc(results, name):
    text = read(results, name + ".rc", "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def timed_out(code):
    return code in (124, 137)


def nccl_smoke(results):
    code = rc(results, "nccl_smoke")
    out = last_json(read(results, "nccl_smoke.json"))
    part = {"rc": code, "seconds": int(read(results, "nccl_smoke.seconds", "0") or 0)}
    if out is None:
        return dict(part, status="failed", error="timed out" if timed_out(code) else "no JSON line")
    checks = out.get("checks", [])
    part.update(checks_ok=sum(1 for c in checks if c.get("ok")), checks=len(checks), device=out.get("device"),
                nccl_version=out.get("nccl_version"))
    failed = [c["name"] + ": " + c.get("error", "") for c in checks if not c.get("ok")]
    if failed:
        part["failed_checks"] = failed
    if out.get("skipped"):
        return dict(part, status="skipped", reason=out.get("reason"))
    return dict(part, status="passed" if code == 0 and out.get("ok") else "failed")


def gtest(results, name):
    """A gtest binary's part from NAME.rc, NAME.seconds and its JSON report NAME.json."""
    code = rc(results, name)
    part = {"rc": code, "seconds": int(read(results, name + ".seconds", "0") or 0)}
    try:
        report = json.loads(read(results, name + ".json", ""))
    except ValueError:
        return dict(part, status="failed", error="timed out" if timed_out(code) else "no gtest JSON report")
    passed, skipped, failed = 0, [], []
    for suite in report.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{case.get('name')}"
            if case.get("failures"):
                failed.append(name)
            elif case.get("result") == "SKIPPED":
                skipped.append(name)
            elif case.get("result") == "COMPLETED":
                passed += 1
    part.update(passed=passed, skipped=len(skipped), failed=len(failed), skipped_tests=skipped)
    if failed:
        part["failed_tests"] = failed
    if code != 0 or failed:
        return dict(part, status="failed")
    return dict(part, status="passed" if passed else "skipped")


def herd_job(results):
    code = rc(results, "herd_job")
    out = last_json(read(results, "herd_job.json"))
    if out is None:
        return {"rc": code, "status": "failed", "error": "timed out" if timed_out(code) else "no JSON line"}
    out.pop("logs", None)
    out.pop("ok", None)
    return dict(out, rc=code, status="passed" if code == 0 else "failed")


def gpu_bench(results):
    code = rc(results, "gpu_bench")
    part = {"rc": code}
    try:
        report = json.loads(read(results, "gpu_bench.json", ""))
    except ValueError:
        return dict(part, status="failed", error="timed out before any result" if timed_out(code) else "no results")
    rows = []
    for r in report.get("results", []):
        rows.append({k: r.get(k) for k in (
            "shape", "precision", "herd_samples_per_s", "eager_samples_per_s", "ddp_samples_per_s", "herd_vs_eager",
            "herd_vs_ddp", "herd_peak_bytes", "eager_peak_bytes", "memory_vs_eager", "meets_speed_target",
            "meets_memory_target", "herd_metrics_scraped", "herd_host_seconds_per_step",
            "resident_samples_per_s", "loader_samples_per_s", "compile_samples_per_s", "compile_ro_samples_per_s",
            "compile_compile_seconds", "compile_ro_compile_seconds", "best_eager_peer", "herd_vs_best_eager",
            "memory_vs_best_eager", "herd_vs_compile_ro", "memory_vs_compile_ro", "meets_compile_target",
            "meets_compile_memory_target", "meets_launch_target", "unavailable")} | {"runs": len(r.get("herd_samples_per_s_runs", [])),
                                        "errors": len(r.get("errors", []))})
    part.update(complete=report.get("complete"), seconds=report.get("seconds"), torch=report.get("torch"),
                threads=report.get("threads"), results=rows)
    ok = code == 0 and report.get("complete") and rows and not any(r["errors"] for r in rows)
    if timed_out(code):
        part["error"] = "timed out; results so far"
    return dict(part, status="passed" if ok else "failed")


def main():
    results, device, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    parts = {"nccl_smoke": nccl_smoke(results), "nccl_communicator_test": gtest(results, "nccl_test"),
             "fused_optimizer_test": gtest(results, "fused_optimizer_test"),
             "cuda_graph_replay_test": gtest(results, "cuda_graph_replay_test"),
             "graphed_step_test": gtest(results, "graphed_step_test"),
             "herd_job": herd_job(results), "gpu_bench": gpu_bench(results)}
    allowed = {"passed"} if device == "cuda" else {"passed", "skipped"}
    ok = all(p["status"] in allowed for p in parts.values())
    gpu = (read(results, "nvidia-smi.txt", "") or "").strip()
    print(json.dumps({"gpu_check": "ok" if ok else "FAILED", "ok": ok, "device": device, "gpu": gpu or None,
                      "seconds": seconds, "parts": parts}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
