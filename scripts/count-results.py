#!/usr/bin/env python3
"""The counts of one `bun test` run: "PASSED FAILED SKIPPED" on stdout, problems on stderr.

Usage: count-results.py JUNIT_XML CONSOLE_LOG [--all-files]

Bun 1.4.4's JUnit file records only files that loaded: a file that fails to load (a missing import,
a syntax error, a throw at top level) or an error between tests leaves no trace there, while bun's own
summary says "N fail" and "N errors". So a run is counted from both: the JUnit failures, plus every
test file bun should have collected but the JUnit file does not name (--all-files, for a whole-suite
run), and never fewer failures than bun's summary lines report.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

# The names `bun test` collects (its documented patterns), outside these folders.
PATTERN = re.compile(r"(\.test|_test|\.spec|_spec)\.(ts|tsx|js|jsx|mjs|cjs|mts|cts)$")
SKIP_DIRS = {"node_modules", ".tools", ".git", "dist", "build", "results"}


def discovered(root):
    found = set()
    for here, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for f in files:
            if PATTERN.search(f):
                found.add(os.path.relpath(os.path.join(here, f), root))
    return found


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    junit, console = argv[1], argv[2]
    all_files = "--all-files" in argv[3:]
    tests = failures = skipped = 0
    reported = set()
    if os.path.exists(junit):
        r = ET.parse(junit).getroot()
        tests = int(r.get("tests", "0"))
        failures = int(r.get("failures", "0")) + int(r.get("errors", "0"))
        skipped = int(r.get("skipped", "0"))
        reported = {s.get("file") for s in r.iter("testsuite") if s.get("file")}
    else:
        print("count-results: no JUnit file, the run did not finish", file=sys.stderr)
        failures += 1
    bun_fail = bun_errors = 0
    if os.path.exists(console):
        with open(console, errors="replace") as f:
            for line in f:
                # One summary per `bun test` invocation: scripts/test runs two.
                m = re.match(r"^\s*(\d+) fail\s*$", line)
                if m:
                    bun_fail += int(m.group(1))
                m = re.match(r"^\s*(\d+) errors?\s*$", line)
                if m:
                    bun_errors += int(m.group(1))
    missing = sorted(discovered(os.path.dirname(os.path.abspath(junit))) - reported) if all_files else []
    for name in missing:
        print(f"count-results: {name} did not load (no result in the JUnit file)", file=sys.stderr)
    if bun_errors:
        print(f"count-results: bun reported {bun_errors} error(s) outside tests (load or between tests)",
              file=sys.stderr)
    failed = max(failures + len(missing), failures + bun_errors, bun_fail)
    passed = max(tests - failures - skipped, 0)
    print(passed, failed, skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
