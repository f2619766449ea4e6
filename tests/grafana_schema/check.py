"""Checks dashboards against Grafana's own dashboard schema with `tsc --noEmit`.

Each dashboard becomes a TypeScript file that assigns its JSON, as an object literal, to the
type dashboard.ts builds from one Grafana release's schema, so the compiler's excess-property
and type checks see every key and value. Two releases are checked, both pinned in package.json:
the newest one, and the oldest one the dashboards support (the `grafana-schema-*` alias). The
compiler's diagnostics come back as findings that name the JSON path they point at.

    python -m tests.grafana_schema.check    # the committed dashboards; exit 1 on any finding
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
INSTALL = ROOT / "build" / "grafana-schema"
SCHEMA_PACKAGE = "@grafana/schema"
TIMEOUT_S = 300
# A diagnostic's message quotes whole types; past this it is noise.
MESSAGE_CHARS = 600

Kind = Literal["provisioned", "grafana-com"]
TYPE_OF_KIND: Mapping[Kind, str] = {
    "provisioned": "ProvisionedDashboard",
    "grafana-com": "ImportDashboard",
}
DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s(]+)\((?P<line>\d+),(?P<column>\d+)\): error (?P<code>TS\d+): (?P<text>.*)$"
)


class SchemaToolError(RuntimeError):
    """The check itself could not run; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Release:
    """A Grafana release whose schema the dashboards are checked against."""

    role: Literal["newest", "oldest"]
    version: str
    package_dir: str  # under node_modules

    @property
    def label(self) -> str:
        return f"Grafana {self.version} schema"


@dataclass(frozen=True, slots=True)
class Finding:
    release: str
    path: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.release}] {self.path or '(top level)'}: {self.code} {self.message}"


def _dependencies() -> dict[str, str]:
    return json.loads((HERE / "package.json").read_text())["dependencies"]


def releases() -> tuple[Release, Release]:
    """The newest release checked and the oldest one supported, from package.json."""
    deps = _dependencies()
    newest = Release("newest", deps[SCHEMA_PACKAGE], SCHEMA_PACKAGE)
    prefix = f"npm:{SCHEMA_PACKAGE}@"
    aliases = [(name, spec) for name, spec in deps.items() if spec.startswith(prefix)]
    if len(aliases) != 1:
        raise SchemaToolError(f"package.json must alias exactly one older {SCHEMA_PACKAGE}")
    alias, spec = aliases[0]
    return newest, Release("oldest", spec.removeprefix(prefix), alias)


def tool_versions() -> dict[str, str]:
    newest, oldest = releases()
    deps = _dependencies()
    return {
        "newest schema": newest.version,
        "oldest schema": oldest.version,
        "typescript": deps["typescript"],
        "foundation sdk": deps["@grafana/grafana-foundation-sdk"],
    }


def _compiler() -> Path:
    tsc = INSTALL / "node_modules" / ".bin" / "tsc"
    # `make grafana-schema-deps` writes the lockfile it installed from last, after `npm ci`.
    stamp = INSTALL / ".installed"
    pinned = (HERE / "package-lock.json").read_bytes()
    if not tsc.is_file() or not stamp.is_file() or stamp.read_bytes() != pinned:
        raise SchemaToolError(
            f"Grafana's dashboard schema is not installed in {INSTALL.relative_to(ROOT)}, or not "
            "the pinned one: run `make grafana-schema-deps` (Node.js, npm, then `npm ci`)"
        )
    return tsc


def _json_lines(
    value: Any, path: str = "", indent: int = 0, lead: str = ""
) -> Iterator[tuple[str, str]]:
    """`value` as indented JSON, one (text, JSON path) pair per line."""
    pad = "  " * indent
    if isinstance(value, dict | list) and value:
        pairs = (
            [(json.dumps(k) + ": ", f"{path}.{k}" if path else k, v) for k, v in value.items()]
            if isinstance(value, dict)
            else [("", f"{path}[{i}]", v) for i, v in enumerate(value)]
        )
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        yield f"{pad}{lead}{opening}", path
        for position, (key, child_path, child) in enumerate(pairs):
            lines = list(_json_lines(child, child_path, indent + 1, key))
            if position < len(pairs) - 1:
                lines[-1] = (lines[-1][0] + ",", lines[-1][1])
            yield from lines
        yield f"{pad}{closing}", path
    else:
        yield f"{pad}{lead}{json.dumps(value)}", path


def _source(kind: Kind, dashboard: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The TypeScript file for one dashboard and the JSON path of each of its lines."""
    lines = list(_json_lines(dashboard))
    header = f"import type {{ {TYPE_OF_KIND[kind]} }} from './dashboard';"
    body = [text for text, _ in lines]
    body[0] = f"export const dashboard: {TYPE_OF_KIND[kind]} = {body[0]}"
    body[-1] += ";"
    return "\n".join([header, *body]) + "\n", ["", *(path for _, path in lines)]


def _diagnostics(output: str) -> list[tuple[str, int, str, str]]:
    """(file, line, code, message) of each error tsc printed with `--pretty false`."""
    found: list[tuple[str, int, str, str]] = []
    for line in output.splitlines():
        match = DIAGNOSTIC.match(line)
        if match:
            found.append((match["file"], int(match["line"]), match["code"], match["text"]))
        elif line.startswith(" ") and found:
            file, number, code, text = found[-1]
            found[-1] = (file, number, code, f"{text} {line.strip()}")
        elif line.strip():
            raise SchemaToolError(f"tsc printed what is no diagnostic: {line!r}\n{output}")
    return found


def _shorten(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _tsconfig(release: Release, files: list[str]) -> dict[str, Any]:
    config: dict[str, Any] = {"extends": str(HERE / "tsconfig.json"), "files": files}
    if release.package_dir != SCHEMA_PACKAGE:
        # The older package under its own name, for the package's imports of itself too.
        package = INSTALL / "node_modules" / release.package_dir
        types = json.loads((package / "package.json").read_text())["types"]
        config["compilerOptions"] = {
            "paths": {
                SCHEMA_PACKAGE: [str(package / types)],
                f"{SCHEMA_PACKAGE}/*": [f"{package}/*"],
            }
        }
    return config


def _check_release(
    release: Release,
    tsc: Path,
    folder: Path,
    dashboards: Mapping[str, tuple[Kind, Mapping[str, Any]]],
) -> dict[str, list[Finding]]:
    folder.mkdir()
    shutil.copyfile(HERE / "dashboard.ts", folder / "dashboard.ts")
    shutil.copyfile(HERE / f"schema-{release.role}.ts", folder / "schema.ts")
    sources: dict[str, tuple[str, list[str]]] = {}
    for index, (name, (kind, dashboard)) in enumerate(dashboards.items()):
        text, paths = _source(kind, dashboard)
        (folder / f"d{index}.ts").write_text(text)
        sources[f"d{index}.ts"] = (name, paths)
    config = _tsconfig(release, [*sources, "dashboard.ts", "schema.ts"])
    (folder / "tsconfig.json").write_text(json.dumps(config, indent=2))
    result = subprocess.run(
        [str(tsc), "--project", "tsconfig.json", "--pretty", "false"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = result.stdout + result.stderr
    findings: dict[str, list[Finding]] = {name: [] for name in dashboards}
    diagnostics = _diagnostics(output)
    for file, line, code, text in diagnostics:
        if file not in sources:
            raise SchemaToolError(f"tsc failed outside the dashboards ({release.label}):\n{output}")
        name, paths = sources[file]
        path = paths[line - 1] if 0 < line <= len(paths) else ""
        findings[name].append(Finding(release.label, path, code, _shorten(text)))
    if (result.returncode == 0) == bool(diagnostics):
        raise SchemaToolError(
            f"tsc exited {result.returncode} with {len(diagnostics)} diagnostics "
            f"({release.label}):\n{output}"
        )
    return findings


def check(
    dashboards: Mapping[str, tuple[Kind, Mapping[str, Any]]],
) -> dict[str, list[Finding]]:
    """Name -> findings for each (kind, dashboard), against the newest and the oldest release;
    one compiler run per release for all of them."""
    tsc = _compiler()
    findings: dict[str, list[Finding]] = {name: [] for name in dashboards}
    with tempfile.TemporaryDirectory(dir=INSTALL, prefix="run-") as run:
        for release in releases():
            found = _check_release(release, tsc, Path(run) / release.role, dashboards)
            for name, items in found.items():
                findings[name].extend(items)
    return findings


def committed_dashboards() -> dict[str, tuple[Kind, dict[str, Any]]]:
    """Repository path -> (kind, dashboard) for every committed dashboard of every flavour."""
    from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths

    found: dict[str, tuple[Kind, dict[str, Any]]] = {}
    for version in FLAVOURS:
        paths = flavour_paths(version)
        kinds: tuple[tuple[Kind, tuple[Path, ...]], ...] = (
            ("provisioned", paths.provisioned),
            ("grafana-com", paths.grafana_com),
        )
        for kind, files in kinds:
            for path in files:
                found[path.as_posix()] = (kind, json.loads((ROOT / path).read_text()))
    return found


def main() -> int:
    started = time.monotonic()
    try:
        findings = check(committed_dashboards())
    except SchemaToolError as exc:
        print(f"grafana schema: {exc}", file=sys.stderr)
        return 2
    versions = ", ".join(f"{tool} {version}" for tool, version in tool_versions().items())
    for name, items in findings.items():
        for finding in items:
            print(f"{name}: {finding}")
    total = sum(map(len, findings.values()))
    print(
        f"grafana schema: {len(findings)} dashboards, {total} findings in "
        f"{time.monotonic() - started:.1f} s ({versions})",
        file=sys.stderr,
    )
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
