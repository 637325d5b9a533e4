#!/usr/bin/env python3
"""One set of defaults: the chart's job.* timing defaults against the
coordinator's, read from its source (services/coordinator/job_config.h,
JobSettings; job_config.cc's default for an absent barrier_period).
Each chart default must equal the coordinator's, or its values.schema.json
description must say why it differs ("differs from the coordinator's ...").
A job.* default of 0 / null that leaves the field to the coordinator must
name the coordinator's value in its description. job.hierarchy, which the
trainers read as GRADEX_HIERARCHY, is the client's option: its default is
ClientOptions' (services/client/client.h), its schema enum the values the
option table accepts, and every GRADEX_* variable the chart sets on the
trainers for a client option is one the option table reads
(services/client/option_table.cc).
usage: chart_defaults_check.py REPO_ROOT"""
import json
import re
import sys

import yaml

ROOT = sys.argv[1]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def coordinator_defaults():
    h = open(f"{ROOT}/services/coordinator/job_config.h").read()
    cc = open(f"{ROOT}/services/coordinator/job_config.cc").read()
    m = re.search(r"struct JobSettings \{(.*?)\n\};", h, re.S)
    if not m:
        fail("no struct JobSettings in services/coordinator/job_config.h")
    body = m.group(1)
    unit_ms = {"Milliseconds": 1, "Seconds": 1000, "Minutes": 60000}

    def duration(name):
        d = re.search(rf"absl::Duration {name} = absl::(\w+)\((\d+)\);", body)
        if not d or d.group(1) not in unit_ms:
            fail(f"JobSettings::{name}: no literal default found (update this check)")
        return int(d.group(2)) * unit_ms[d.group(1)]

    b = re.search(r"int barrier_period = (\d+);", body)
    # A job config's barrier_period 0 (absent) takes job_config.cc's default.
    p = re.search(r"period\(c\.barrier_period\(\), (\d+), \"barrier_period\"", cc)
    if not b or not p:
        fail("barrier_period's default not found in job_config.h / job_config.cc")
    if b.group(1) != p.group(1):
        fail(f"the coordinator disagrees with itself: JobSettings::barrier_period {b.group(1)}, "
             f"job_config.cc's default {p.group(1)}")
    return {"barrierPeriod": int(b.group(1)), "leaseMs": duration("lease"),
            "stepDeadlineMs": duration("step_deadline"), "entryTimeoutMs": duration("entry_timeout")}


def client_hierarchy(values, schema):
    h = open(f"{ROOT}/services/client/client.h").read()
    m = re.search(r'std::string hierarchy = "(\w+)";', h)
    if not m:
        fail("no `std::string hierarchy = \"...\";` in services/client/client.h (update this check)")
    if values["hierarchy"] != m.group(1):
        fail(f"job.hierarchy defaults to {values['hierarchy']!r}, the client to {m.group(1)!r}")
    table = open(f"{ROOT}/services/client/option_table.cc").read()
    v = re.search(r"bool IsHierarchy\(absl::string_view s\) \{ return (.*?); \}", table, re.S)
    if not v:
        fail("no IsHierarchy in services/client/option_table.cc (update this check)")
    accepted = sorted(re.findall(r's == "(\w+)"', v.group(1)))
    if sorted(schema["hierarchy"].get("enum", [])) != accepted:
        fail(f"job.hierarchy's schema enum {schema['hierarchy'].get('enum')} differs from the "
             f"client's accepted values {accepted}")
    print(f"job.hierarchy: {values['hierarchy']!r} = the client's; values {accepted} = the client's")
    helpers = open(f"{ROOT}/helm/gradex/templates/_helpers.tpl").read()
    for env in ("GRADEX_HIERARCHY", "GRADEX_NODE"):
        if f"- name: {env}\n" not in helpers:
            fail(f"the trainer container does not set {env}")
        if f'{{"{env}"' not in table:
            fail(f"the chart sets {env}, which the client's option table does not read")
    print("GRADEX_HIERARCHY, GRADEX_NODE: set on the trainers, read by the client")


def main():
    coord = coordinator_defaults()
    values = yaml.safe_load(open(f"{ROOT}/helm/gradex/values.yaml"))["job"]
    schema = json.load(open(f"{ROOT}/helm/gradex/values.schema.json"))["properties"]["job"]["properties"]
    for key, want in coord.items():
        have = values[key]
        desc = schema[key].get("description", "")
        if have == want:
            print(f"job.{key}: {have} = the coordinator's")
        elif have in (0, None):
            if str(want) not in desc:
                fail(f"job.{key} is left to the coordinator ({have}) but its schema description "
                     f"does not name the coordinator's default {want}: {desc!r}")
            print(f"job.{key}: {have} (the coordinator's {want}, named in the schema)")
        elif "differs from the coordinator's" not in desc:
            fail(f"job.{key} defaults to {have}, the coordinator to {want}, and the schema's "
                 f"description does not say why it differs: {desc!r}")
        else:
            print(f"job.{key}: {have}, the coordinator {want}: {desc}")
    client_hierarchy(values, schema)
    print("PASS chart defaults")


if __name__ == "__main__":
    main()
