#!/usr/bin/env python3
"""The layer check: every `crate::...` path in src/ names a module of the
same rank or a lower one, never a higher one.

The layers below are the crate's module map (docs/architecture.md points
here). A unit is a top-level module of src/, or a module directly under
src/engine/ or src/backends/ (`engine` alone is src/engine/mod.rs, the
`Engine` the handles share). Layers are listed bottom first; inside one,
ranks are listed bottom first too, and the units of one rank (a group
written on one line) may import one another, which only a cycle that
exists in the code justifies. A unit in ISOLATED imports nothing of the
crate and nothing imports it.

Unit tests (files named tests.rs, and `#[cfg(test)] mod tests` blocks)
may import anything: they are not part of the layering. Comments and doc
links are not imports.

Usage: python3 .ci/layers.py [SRC_DIR]   (exit status 1 on a violation)
"""

import pathlib
import re
import sys

LAYERS = [
    ("around: the foundations, nothing of the engine but its telemetry", [
        "clock",
        "fingerprint",
        # Whose records a (scope, key) addresses: the caller's or idemkv's own.
        "keyspace",
        "io",
        "format",
        # Counters and events; `stats` and `lease` report through it.
        "engine::telemetry",
        # `Error::QuotaExceeded` carries a `QuotaLimit`; `Quota` checks
        # return a `Result`.
        "error quota",
        "checkpoint",
        "record",
        "stats",
    ]),
    ("engine internals, pure parts", [
        # The index table knows tags and addresses only.
        "engine::index",
        "engine::entry",
        "engine::compaction_policy",
        "engine::transition",
        "engine::segment",
        "engine::ledger",
        "engine::waiters",
        "engine::background",
    ]),
    ("configuration: its limits are the segment's and the quotas'", [
        "config",
    ]),
    ("engine internals, one shard", [
        "engine::manifest",
        "engine::recovery",
        "engine::shard",
    ]),
    ("engine internals, one store, and the offline tools beside it", [
        "engine",
        "engine::sync",
        # Format 2 to 3 at the first writable open.
        "engine::migrate",
        "engine::open",
        # Repair takes the directory lock and reads the manifest the way
        # open does; `Store::open` adds its advice to a refusal.
        "repair",
        "engine::compactor",
        "verify",
    ]),
    ("the public surface", [
        "lease",
        "claim",
        "store",
        "backend",
        "fuzzing",
        "testing",
    ]),
    ("backends and layers over any backend", [
        # Renews the leases of running requests and closures.
        "keeper",
        "backend::remote::tls",
        "backend::remote::wake",
        "backend::remote::counters",
        "backend::remote",
        "backend::redis",
        "backend::postgres",
        "backends",
        # Webhook signatures: what the HTTP sink signs and the layer checks.
        "webhook",
        # A version per resource over any backend (ETag, If-Match).
        "versions",
        # run_once over any backend, the inbox, the outbox and its relay.
        "once",
        "http",
        "conformance",
    ]),
]

# The calling side: a retry layer for outgoing requests.
ISOLATED = {"client"}

# The crate root declares modules and re-exports; it is the top.
ROOT = "lib"


def ranks():
    """Each declared unit's rank and layer name."""
    rank = {}
    layer_of = {}
    position = 0
    for name, groups in LAYERS:
        for group in groups:
            for unit in group.split():
                if unit in rank:
                    sys.exit(f"layers.py: {unit} is declared twice")
                rank[unit] = position
                layer_of[unit] = name
            position += 1
    return rank, layer_of


def module_path(src, path):
    """`src/engine/shard/mod.rs` -> ["engine", "shard"]."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def unit_of(parts, units):
    """The longest declared unit that is a prefix of `parts`."""
    for length in (2, 1):
        candidate = "::".join(parts[:length])
        if len(parts) >= length and candidate in units:
            return candidate
    return parts[0] if parts else ROOT


def root_reexports(src):
    """`Store` -> ["store"]: where each name `lib.rs` re-exports lives."""
    text = (src / "lib.rs").read_text()
    names = {}
    for match in re.finditer(r"pub use ([a-z_]+(?:::[a-z_]+)*)::(\{[^}]*\}|\w+);", text):
        for name in match.group(2).strip("{}").split(","):
            names[name.strip()] = match.group(1).split("::")
    return names


def without_test_blocks(text):
    """`text` with each `#[cfg(test)] mod tests { ... }` block blanked out
    (newlines kept, so that line numbers stay true)."""
    while match := re.search(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        blank = re.sub(r"[^\n]", " ", text[match.start() : end + 1])
        text = text[: match.start()] + blank + text[end + 1 :]
    return text


def code_of(text):
    """The text without comments and unit-test blocks, line numbers kept."""
    lines = without_test_blocks(text).split("\n")
    return "\n".join("" if line.strip().startswith("//") else line for line in lines)


def imports(code, reexports):
    """(line, path parts) of every `crate::` path in `code`."""
    for match in re.finditer(r"\bcrate::(\{[^}]*\}|[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)", code):
        line = code.count("\n", 0, match.start()) + 1
        found = match.group(1)
        paths = re.split(r"[,\s]+", found.strip("{}")) if found.startswith("{") else [found]
        for path in paths:
            parts = [part for part in path.split("::") if part]
            if not parts or parts[0] == "self":
                continue
            if parts[0] in reexports:
                parts = reexports[parts[0]] + parts[1:]
            yield line, parts


def main():
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    rank, layer_of = ranks()
    units = set(rank) | ISOLATED
    reexports = root_reexports(src)
    problems = []
    checked = 0
    for path in sorted(src.rglob("*.rs")):
        if path.name == "tests.rs" or path == src / "lib.rs":
            continue
        source = unit_of(module_path(src, path), units)
        if source not in units:
            problems.append(f"{path}: module {source} is in no layer of .ci/layers.py")
            continue
        for line, parts in imports(code_of(path.read_text()), reexports):
            target = unit_of(parts, units)
            checked += 1
            if target == source:
                continue
            where = f"{path}:{line}: {source} imports {'::'.join(parts)}"
            if target not in units:
                problems.append(f"{where}, which is in no layer")
            elif source in ISOLATED or target in ISOLATED:
                problems.append(f"{where}; {source if source in ISOLATED else target} stands apart")
            elif rank[target] > rank[source]:
                problems.append(f"{where}, a layer above it ({layer_of[target]})")
    for problem in problems:
        print(problem)
    print(f"layers: {checked} crate paths checked in {src}, {len(problems)} against the declared layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
