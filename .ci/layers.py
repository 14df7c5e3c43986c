#!/usr/bin/env python3
"""The layer check of src/: every import runs down the declared layers, and
no folder's modules import one another in a cycle.

What it reads: every path a module names with `crate::`, `$crate::`,
`super::` or `self::`, in `use` trees (nested braces, renames, globs) and
inline; a name a module re-exports (`pub use`, `pub(crate) use`, ...) is
followed to where it lives. Comments, string literals, unit tests (files
named tests.rs, `#[cfg(test)] mod tests` blocks) are not read.

The rules:
1. Units are the top-level modules of src/ and the modules directly under
   src/engine/ and src/backend/ (`engine` alone is src/engine/mod.rs, the
   `Engine` the handles share; `backend` alone is the trait). LAYERS below
   lists them bottom first, one unit a rank: a unit may import only units
   declared before it. There is no exception list. A unit in ISOLATED
   imports nothing of the crate and nothing imports it.
2. In every folder (src/ itself included), the modules directly in it (its
   files and subfolders) do not import one another in a cycle. A folder's
   own mod.rs is its front: what it declares and re-exports, and what its
   children share, is not counted as an edge at that folder's level (the
   rank check still holds between units).
3. docs/architecture.md carries the module map this declaration prints
   (`--map`), between its `<!-- layers:begin -->` and `<!-- layers:end -->`
   lines.

Usage:
  python3 .ci/layers.py [SRC_DIR]   check (exit status 1 on a violation)
  python3 .ci/layers.py --map       print the module map
  python3 .ci/layers.py --self-test plant a cycle and an up-import in a copy
                                    of src/ and show that both fail
"""

import pathlib
import re
import shutil
import sys
import tempfile
from collections import defaultdict

from fnlen import blank as blank_literals

# Bottom first; one unit a rank; each with what it is, for the module map.
LAYERS = [
    ("the foundations", [
        ("clock", "time: the wall clock and leases' monotonic time"),
        ("fingerprint", "what a request is, hashed"),
        ("keyspace", "whose records a (scope, key) addresses"),
        ("events", "events and spans through tracing"),
        ("io", "the file system, and its test doubles"),
        ("format", "the on-disk format's version and sizes"),
        ("error", "every error, typed"),
        ("quota", "per-scope quotas"),
        ("checkpoint", "a holder's recovery point"),
        ("record", "the stored record and its state"),
        ("stats", "the store's counters and census, as read"),
        ("config", "the store's and backends' settings"),
    ]),
    ("the engine's internals, pure parts", [
        ("engine::telemetry", "per-shard counters and histograms"),
        ("engine::frame", "the frame codec"),
        ("engine::index", "the compact index table"),
        ("engine::entry", "what the index knows of a record; the lease table; the key hash"),
        ("engine::compaction_policy", "which segments to drop or rewrite"),
        ("engine::transition", "the state machine's transitions"),
        ("engine::segment", "segments: header, writer, commit, scanner, hints, catalog"),
        ("engine::ledger", "fencing tokens and LSNs"),
        ("engine::waiters", "claims waiting on a key"),
        ("engine::background", "background threads and the stop signal"),
    ]),
    ("the engine's internals, one shard", [
        ("engine::manifest", "the store's manifest"),
        ("engine::recovery", "rebuilding a shard at open"),
        ("engine::shard", "one shard: claims, leases, compaction steps, quotas"),
    ]),
    ("the engine, one store, and its offline tools", [
        ("engine", "the engine the handles share"),
        ("engine::sync", "fsync of dirty shards"),
        ("engine::migrate", "format 2 to 3 at the first writable open"),
        ("engine::open", "opening a store directory"),
        ("engine::repair", "repair of a damaged store"),
        ("engine::compactor", "compaction passes and the background compactor"),
        ("engine::verify", "verify of a store, read-only"),
    ]),
    ("the public surface", [
        ("lease", "a claim's lease and its token; how a finishing write is tried again"),
        ("claim", "the claim request, its answer, the claim-and-wait loop"),
        ("store", "the Store handle: claim, read, iterate, maintain"),
        ("backend", "the backend trait"),
        ("backend::any", "a backend behind a pointer"),
        ("backend::near", "a near cache of completed answers over any backend"),
        ("backend::keeper", "renews the leases of running requests"),
        ("backend::finish", "the write that ends a run, tried again while the lease is held"),
        ("backend::run_once", "RunOnce: claim, run, finish over any backend"),
        ("backend::versions", "versions of resources over any backend"),
        ("backend::remote", "what the networked backends share"),
        ("backend::redis", "Redis and Valkey, standalone or Cluster"),
        ("backend::postgres", "PostgreSQL"),
        ("testing", "the reference model; the fuzz targets' entry points"),
    ]),
    ("faces over any backend", [
        ("webhook", "webhook signatures"),
        ("messaging", "inbox, outbox, relay, sinks"),
        ("http", "the tower layer for the Idempotency-Key contract"),
        ("conformance", "the contract's scenarios over any backend, the HTTP layer's too"),
    ]),
]

# The calling side: a retry layer for outgoing requests.
ISOLATED = {"client": "the calling side: a tower layer for outgoing requests"}

MAP_BEGIN = "<!-- layers:begin -->"
MAP_END = "<!-- layers:end -->"


def ranks():
    """Each declared unit's rank."""
    rank = {}
    for _, units in LAYERS:
        for unit, _ in units:
            if unit in rank:
                sys.exit(f"layers.py: {unit} is declared twice")
            rank[unit] = len(rank)
    return rank


def module_map():
    """The module map, as docs/architecture.md carries it."""
    lines = ["```text", "bottom first; a module imports only those above it in this list"]
    for layer, units in LAYERS:
        lines.append(f"{layer}:")
        for unit, what in units:
            lines.append(f"  {unit:<27} {what}")
    lines.append("apart, importing nothing of the crate:")
    for unit, what in ISOLATED.items():
        lines.append(f"  {unit:<27} {what}")
    lines.append("```")
    return "\n".join(lines)


# --- reading the source ---------------------------------------------------


def module_of(src, path):
    """`src/engine/shard/mod.rs` -> ("engine", "shard"); lib.rs -> ()."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def blank(text, start, end):
    """`text` with `start..end` blanked, newlines kept."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def without_test_blocks(text):
    """`text` with each `#[cfg(test)] mod ... { ... }` block blanked."""
    while match := re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod \w+\s*\{", text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = blank(text, match.start(), end + 1)
    return text


def code_of(text):
    """The text without comments, string and character literals (blanked
    as the function-length check blanks them), and unit-test blocks; line
    numbers kept."""
    return without_test_blocks(blank_literals(text))


def split_top(tree):
    """`a, b::{c, d}` -> ["a", "b::{c, d}"]: split on commas outside braces."""
    parts, depth, current = [], 0, ""
    for char in tree:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


def expand(tree, prefix=()):
    """A `use` tree -> [(path segments, name it binds or None)]."""
    tree = re.sub(r"\s*::\s*", "::", tree.strip())
    if tree.startswith("::"):
        tree = tree[2:]
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = [part for part in tree[:brace].split("::") if part]
        found = []
        for sub in split_top(tree[brace + 1 : -1]):
            found += expand(sub, prefix + tuple(head))
        return found
    name = None
    if renamed := re.fullmatch(r"(.*\S)\s+as\s+(\w+)", tree):
        tree, name = renamed.group(1), renamed.group(2)
    segments = prefix + tuple(part for part in tree.split("::") if part)
    if segments and segments[-1] == "self":
        segments = segments[:-1]
    if name is None and segments and segments[-1] != "*":
        name = segments[-1]
    return [(segments, name)]


def absolute(segments, module, names=()):
    """`segments` as named in `module` -> segments from the crate root, or
    None for a path outside the crate. A `use` path may start with a child
    module of `module` (`names`: every module)."""
    if not segments:
        return None
    head, rest = segments[0], list(segments[1:])
    if module + (head,) in names:
        return module + tuple(segments)
    if head in ("crate", "$crate"):
        return tuple(rest)
    if head == "self":
        return module + tuple(rest)
    if head == "super":
        base = list(module)
        while True:
            if not base:
                return None
            base.pop()
            if rest and rest[0] == "super":
                rest.pop(0)
                continue
            return tuple(base) + tuple(rest)
    return None


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE = re.compile(r"(?<![\w:])(\$crate|crate|super|self)((?:::[A-Za-z_]\w*)+)")


class Module:
    def __init__(self, name, path, code):
        self.name, self.path, self.code = name, path, code
        self.reexports = {}  # name -> absolute segments
        self.paths = []  # (line, absolute segments)


def read(src):
    """Every module of `src`, with its re-exports and the paths it names."""
    modules = {}
    for path in sorted(src.rglob("*.rs")):
        if path.name == "tests.rs":
            continue
        name = module_of(src, path)
        modules[name] = Module(name, path, code_of(path.read_text()))
    for module in modules.values():
        code = module.code
        for match in USE.finditer(code):
            line = code.count("\n", 0, match.start()) + 1
            for segments, name in expand(match.group(2)):
                target = absolute(segments, module.name, modules)
                if target is None:
                    continue
                if match.group(1) and name:
                    module.reexports[name] = target
                    if is_within(target, module.name):
                        continue  # a front naming its own module's item
                module.paths.append((line, target))
            code = blank(code, match.start(), match.end())
        for match in INLINE.finditer(code):
            segments = (match.group(1),) + tuple(part for part in match.group(2).split("::") if part)
            target = absolute(segments, module.name)
            if target is not None:
                module.paths.append((code.count("\n", 0, match.start()) + 1, target))
    return modules


def resolve(target, modules, depth=0):
    """The module where the item `target` (absolute segments) lives:
    re-exports followed, the deepest module on the path."""
    current = ()
    for index, segment in enumerate(target):
        if current + (segment,) in modules:
            current += (segment,)
            continue
        module = modules.get(current)
        if module and segment in module.reexports and depth < 8:
            followed = module.reexports[segment] + tuple(target[index + 1 :])
            if followed != target:
                return resolve(followed, modules, depth + 1)
        break
    return current


# --- the checks -----------------------------------------------------------


def unit_of(name, rank):
    """The declared unit of module `name`, the longest that is a prefix."""
    for length in (2, 1):
        candidate = "::".join(name[:length])
        if len(name) >= length and (candidate in rank or candidate in ISOLATED):
            return candidate
    return "::".join(name[:1])


def edges(modules):
    """(source module, target module, line) of every import between two
    modules."""
    for module in modules.values():
        for line, target in module.paths:
            found = resolve(target, modules)
            if found != module.name:
                yield module.name, found, line


def is_within(name, folder):
    return name[: len(folder)] == folder


def cycles(graph):
    """The strongly connected components of `graph` with more than one node
    (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def check_ranks(modules, rank):
    problems = []
    for source, target, line in edges(modules):
        if not source:
            continue  # lib.rs declares and re-exports
        from_unit, to_unit = unit_of(source, rank), unit_of(target, rank)
        where = f"{modules[source].path}:{line}: {'::'.join(source)} imports {'::'.join(target) or 'the crate root'}"
        if not target:
            problems.append(f"{where}: import from the module that declares it, not from the crate root")
            continue
        for unit in (from_unit, to_unit):
            if unit not in rank and unit not in ISOLATED:
                problems.append(f"{where}: {unit} is in no layer of .ci/layers.py")
        if from_unit == to_unit or from_unit not in rank and from_unit not in ISOLATED:
            continue
        if from_unit in ISOLATED or to_unit in ISOLATED:
            problems.append(f"{where}: {from_unit if from_unit in ISOLATED else to_unit} stands apart")
        elif to_unit in rank and rank[to_unit] > rank[from_unit]:
            problems.append(f"{where}: {to_unit} is declared above {from_unit}")
    return problems


def check_cycles(modules):
    problems = []
    folders = {name[:-1] for name in modules if name} | {()}
    found = list(edges(modules))
    for folder in sorted(folders):
        graph, lines = defaultdict(set), {}
        for source, target, line in found:
            if not (is_within(source, folder) and is_within(target, folder)):
                continue
            if len(source) <= len(folder) or len(target) <= len(folder):
                continue  # the folder's front
            a, b = source[len(folder)], target[len(folder)]
            if a != b:
                graph[a].add(b)
                lines.setdefault((a, b), f"{modules[source].path}:{line}")
        for component in cycles(graph):
            members = set(component)
            witness = [f"{a} -> {b} ({where})" for (a, b), where in sorted(lines.items()) if a in members and b in members]
            place = "::".join(folder) or "src/"
            problems.append(f"a cycle in {place}: {', '.join(component)}: " + "; ".join(witness))
    return problems


def check_map(src):
    doc = src.parent / "docs" / "architecture.md"
    if not doc.exists():
        return []
    text = doc.read_text()
    if MAP_BEGIN not in text or MAP_END not in text:
        return [f"{doc}: no module map between {MAP_BEGIN} and {MAP_END}"]
    block = text.split(MAP_BEGIN, 1)[1].split(MAP_END, 1)[0].strip()
    if block != module_map():
        return [f"{doc}: the module map differs from .ci/layers.py's (print it with --map)"]
    return []


def check(src):
    rank = ranks()
    modules = read(src)
    problems = check_ranks(modules, rank) + check_cycles(modules) + check_map(src)
    count = sum(len(module.paths) for module in modules.values())
    return problems, count, len(modules)


def self_test(src):
    """Plants an up-import and a cycle in copies of `src`; both must fail."""
    plants = {
        "an import up a layer (the clock imports the store)": [
            ("clock.rs", "\n#[allow(unused_imports)]\nuse crate::store::Store as _Planted;\n"),
        ],
        "a cycle inside a folder (http: config imports guard)": [
            ("http/config.rs", "\n#[allow(unused_imports)]\nuse super::guard::_planted as _;\n"),
        ],
        "a cycle through a re-export (messaging: envelope imports the outbox)": [
            ("messaging/envelope.rs", "\n#[allow(unused_imports)]\nuse super::Outbox as _Planted;\n"),
        ],
    }
    clean, _, _ = check(src)
    if [problem for problem in clean if "module map" not in problem]:
        print("self-test: the tree itself fails the check")
        return 1
    failed = 0
    for what, edits in plants.items():
        with tempfile.TemporaryDirectory() as temp:
            copy = pathlib.Path(temp) / "src"
            shutil.copytree(src, copy)
            for file, text in edits:
                with open(copy / file, "a") as out:
                    out.write(text)
            problems, _, _ = check(copy)
        problems = [problem.replace(str(copy), "src") for problem in problems if "module map" not in problem]
        if problems:
            print(f"self-test: {what}: caught:")
            for problem in problems:
                print(f"  {problem}")
        else:
            print(f"self-test: {what}: NOT caught")
            failed = 1
    return failed


def main():
    args = sys.argv[1:]
    if "--map" in args:
        print(module_map())
        return 0
    src = pathlib.Path(next((arg for arg in args if not arg.startswith("--")), "src"))
    if "--self-test" in args:
        return self_test(src)
    problems, count, modules = check(src)
    for problem in problems:
        print(problem)
    print(f"layers: {count} paths in {modules} modules of {src} checked, {len(problems)} against the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
