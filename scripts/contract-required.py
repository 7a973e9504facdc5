"""Writes src/tools/contract-required.json: for each tool of the 4.3.0 contract, the skeleton of
its output schema that carries `required` lists (properties, items, anyOf branches), $refs
resolved. The compact structured form keeps exactly these fields (src/tools/compact.ts).
Usage: python3 scripts/contract-required.py test/fixtures/contract/tool-contract.json [out.json]
"""
import json
import sys


def skeleton(s, defs, depth=0):
    if not isinstance(s, dict) or depth > 12:
        return None
    if "$ref" in s:
        return skeleton(defs.get(s["$ref"].split("/")[-1], {}), defs, depth + 1)
    out = {}
    if s.get("required"):
        out["required"] = s["required"]
    props = {}
    for k, v in (s.get("properties") or {}).items():
        sub = skeleton(v, defs, depth + 1)
        if sub:
            props[k] = sub
    if props:
        out["properties"] = props
    if "items" in s:
        sub = skeleton(s["items"], defs, depth + 1)
        if sub:
            out["items"] = sub
    for key in ("anyOf", "oneOf"):
        if key in s:
            branches = [skeleton(b, defs, depth + 1) or {} for b in s[key]]
            if any(branches):
                out["anyOf"] = branches
    return out or None


contract = json.load(open(sys.argv[1]))
result = {}
for tool in contract["tools"]:
    schema = tool.get("outputSchema") or {}
    result[tool["name"]] = skeleton(schema, schema.get("$defs", {})) or {}
out = sys.argv[2] if len(sys.argv) > 2 else "src/tools/contract-required.json"
json.dump(result, open(out, "w"), sort_keys=True, separators=(",", ":"))
print(len(json.dumps(result)), "bytes")
