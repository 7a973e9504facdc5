#!/usr/bin/env python3
"""Merges the JUnit files of the suite's parts into one: OUT IN [IN ...].

scripts/test runs the suite in two `bun test` invocations (files that need the machine alone, then
the rest in parallel); the counts and the files each part reported are added up, so
count-results.py reads the whole run from one file as before. A missing part (it never finished) is
left out, and count-results.py then names its files as not loaded.
"""
import os
import sys
import xml.etree.ElementTree as ET

FIELDS = ("tests", "assertions", "failures", "errors", "skipped")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, parts = argv[1], argv[2:]
    merged = ET.Element("testsuites", name="bun test")
    totals = dict.fromkeys(FIELDS, 0)
    seconds = 0.0
    for part in parts:
        if not os.path.exists(part):
            print(f"merge-junit: {part} is missing (that part did not finish)", file=sys.stderr)
            continue
        root = ET.parse(part).getroot()
        for field in FIELDS:
            totals[field] += int(root.get(field, "0"))
        seconds += float(root.get("time", "0"))
        for suite in root:
            merged.append(suite)
    for field in FIELDS:
        merged.set(field, str(totals[field]))
    merged.set("time", f"{seconds:.3f}")
    ET.ElementTree(merged).write(out, encoding="UTF-8", xml_declaration=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
