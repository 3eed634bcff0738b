#!/usr/bin/env python3
"""docs/fuzzing.json and the "Fuzzing at length" table in docs/security.md.

  fuzz_table.py update MINUTES TARGET...   record scripts/fuzz-long's runs of TARGETs (their
                                           logs under target/fuzz-long/) and rewrite the table
  fuzz_table.py check TARGET...            CI: every TARGET (all of `cargo fuzz list`) has a
                                           run of at least MIN_MINUTES on record, its kept
                                           corpus holds the files the record says, and the
                                           table is the one the record makes
"""
import json
import os
import re
import subprocess
import sys

JSON = "docs/fuzzing.json"
PAGE = "docs/security.md"
BEGIN, END = "<!-- fuzz-long:begin -->", "<!-- fuzz-long:end -->"
MIN_MINUTES = 10


def corpus(t):
    d = f"fuzz/corpus/{t}"
    files = [f for f in os.listdir(d) if os.path.isfile(os.path.join(d, f))] if os.path.isdir(d) else []
    return len(files), sum(os.path.getsize(os.path.join(d, f)) for f in files)


def table(doc):
    rows = ["| target | minutes | executions | edges (cov) | features | corpus files | date |",
            "|---|---:|---:|---:|---:|---:|---|"]
    for t, r in sorted(doc["targets"].items()):
        rows.append(f"| `{t}` | {r['minutes']} | {r['executions'] or 0:,} | {r['edges'] or 0:,} | "
                    f"{r['features'] or 0:,} | {r['corpus_files']:,} | {r['date']} |")
    return "\n" + "\n".join(rows) + "\n"


def page_table(sec):
    if BEGIN not in sec:
        sys.exit(f"{PAGE} has no {BEGIN} marker")
    return sec.index(BEGIN) + len(BEGIN), sec.index(END)


def update(minutes, targets):
    doc = json.load(open(JSON)) if os.path.exists(JSON) else {"targets": {}}
    for t in targets:
        log = open(f"target/fuzz-long/{t}.log", errors="replace").read()
        runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
        cov = re.findall(r"#\d+\s+\w+\s+cov: (\d+) ft: (\d+)", log)
        files, size = corpus(t)
        doc["targets"][t] = {
            "minutes": minutes,
            "executions": int(runs[-1]) if runs else None,
            "edges": int(cov[-1][0]) if cov else None,
            "features": int(cov[-1][1]) if cov else None,
            "corpus_files": files,
            "corpus_bytes": size,
            "date": subprocess.run(["date", "-u", "+%Y-%m-%d"], capture_output=True,
                                   text=True).stdout.strip(),
        }
    with open(JSON, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    sec = open(PAGE).read()
    a, b = page_table(sec)
    open(PAGE, "w").write(sec[:a] + table(doc) + sec[b:])
    print(f"{PAGE} and {JSON} updated", file=sys.stderr)


def check(targets):
    doc = json.load(open(JSON))
    bad = []
    for t in targets:
        r = doc["targets"].get(t)
        if r is None:
            bad.append(f"{t}: no run on record (scripts/fuzz-long {t})")
            continue
        if r["minutes"] < MIN_MINUTES or not r["executions"]:
            bad.append(f"{t}: {r['minutes']} min, {r['executions']} executions on record")
        files, size = corpus(t)
        if (files, size) != (r["corpus_files"], r["corpus_bytes"]):
            bad.append(f"{t}: fuzz/corpus/{t} holds {files} files ({size} B), "
                       f"the record says {r['corpus_files']} ({r['corpus_bytes']} B)")
    for t in sorted(set(doc["targets"]) - set(targets)):
        bad.append(f"{t}: on record but no such fuzz target")
    sec = open(PAGE).read()
    a, b = page_table(sec)
    if sec[a:b] != table(doc):
        bad.append(f"the table in {PAGE} is not the one {JSON} makes (tools/fuzz-table/fuzz_table.py)")
    if bad:
        sys.exit("fuzzing at length:\n  " + "\n  ".join(bad))
    print(f"fuzzing at length: {len(targets)} targets on record, "
          f"{sum(doc['targets'][t]['executions'] for t in targets):,} executions")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "update":
        update(int(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "check":
        check(sys.argv[2:])
    else:
        sys.exit(__doc__)
