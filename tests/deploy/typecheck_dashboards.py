#!/usr/bin/env python3
"""Type-checks every dashboard against Grafana's published schema
(@grafana/schema's TypeScript types, with typescript@5): each dashboard as an
object literal `satisfies Dashboard` (so unknown fields fail too), and each
timeseries / stat / table panel's options and field config against that panel's
own types. usage: typecheck_dashboards.py NODE_DIR DASHBOARD.json...
(NODE_DIR holds node_modules with @grafana/schema and typescript)."""
import json
import os
import subprocess
import sys
import tempfile

PANELS = {
    "timeseries": "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen",
    "stat": "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen",
    "table": "@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen",
}


def main():
    node_dir, files = sys.argv[1], sys.argv[2:]
    lines = ['import type { Dashboard } from "@grafana/schema";',
             # JSON holds an enum's value, not the enum: compare against the
             # enums' string values ("list" for LegendDisplayMode.List).
             "type Json<T> = T extends string ? `${T}` : T extends (infer U)[] ? Json<U>[]",
             "  : T extends object ? { [K in keyof T]: Json<T[K]> } : T;"]
    for kind, mod in PANELS.items():
        k = kind.capitalize()
        field = f", FieldConfig as {k}Field" if kind == "timeseries" else ""
        lines.append(f'import type {{ Options as {k}Options{field} }} from "{mod}";')
    for i, path in enumerate(files):
        with open(path) as f:
            d = json.load(f)
        lines.append(f"// {os.path.basename(path)}")
        lines.append(f"export const dashboard{i} = {json.dumps(d)} satisfies Json<Dashboard>;")
        for p in d.get("panels", []):
            kind = p.get("type")
            if kind not in PANELS:
                continue
            k = kind.capitalize()
            lines.append(f"export const d{i}p{p['id']}o = {json.dumps(p.get('options', {}))} satisfies Json<{k}Options>;")
            custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom")
            if custom is not None and kind == "timeseries":
                lines.append(f"export const d{i}p{p['id']}f = {json.dumps(custom)} satisfies Json<{k}Field>;")
    with tempfile.TemporaryDirectory(dir=node_dir) as tmp:
        src = os.path.join(tmp, "dashboards.ts")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        tsc = os.path.join(node_dir, "node_modules", ".bin", "tsc")
        r = subprocess.run([tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "es2022",
                            "--module", "nodenext", "--moduleResolution", "nodenext", src],
                           cwd=node_dir, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(r.stdout + r.stderr, file=sys.stderr)
            print(f"FAIL: dashboards do not type-check against @grafana/schema ({src})", file=sys.stderr)
            return 1
    print(f"dashboards type-check against @grafana/schema: {len(files)} dashboards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
