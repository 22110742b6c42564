#!/usr/bin/env python3
"""Finds file-level import circles inside each crate of the workspace.

A circle is a set of source files of one crate that reach each other through
paths: `use crate::...`, `use super::...`, `use self::...`, a `use` or an
expression path through a child module (`hooks::resctrl::apply(..)`), and
`crate::`/`super::` paths written inline in code. Each file is one node (an
inline `mod x { .. }` belongs to its file); `mod x;` declarations are not
edges, only the paths that name items are, and `pub use` re-exports are
followed to the file that defines the item rather than counted as edges of the
re-exporting file (a `mod.rs` facade is no circle). Code under `#[cfg(test)]` (test
modules, inline or in their own file, and `#[cfg(test)] use`) is left out:
a test reaching across layers is not a layering fault.

The circles are the strongly connected components of that graph. Each one is
printed with the edges that hold it together (file:line of the first path that
makes each edge), so the one to cut can be chosen.

Circles that exist today are listed in hack/module-cycles.allow, one per line:
the repository-relative paths of its files, separated by spaces (`#` starts a
comment). A circle passes when all its files are in one
allowlisted line, so a circle may shrink or split without touching the list,
but a new circle, or a file joining an old one, fails. An allowlist line that
names files no longer in any circle is reported so it can be removed or
shortened (with --strict that fails too).

Usage:
  hack/check-module-cycles.py                     check; exit 1 on a circle not allowed
  hack/check-module-cycles.py --strict            also exit 1 on a stale allowlist line
  hack/check-module-cycles.py --write-allowlist   rewrite the allowlist with today's circles
  hack/check-module-cycles.py --allowlist FILE    use another allowlist ("" or /dev/null: none)
Exit status: 0 clean, 1 a circle not allowed (or stale entries with --strict), 2 usage
or parse error. Needs only python3 (standard library).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_ALLOWLIST = os.path.join(REPO, "hack", "module-cycles.allow")


# ---------------------------------------------------------------------------
# Lexing: blank out comments, strings and char literals, keep line numbers.


def strip_code(src: str) -> str:
    """Returns `src` with comments, string and char literals replaced by spaces
    (newlines kept), so later regexes see only code."""
    out = []
    i, n = 0, len(src)

    def blank(text: str) -> str:
        return "".join("\n" if ch == "\n" else " " for ch in text)

    while i < n:
        ch = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if ch == "/" and nxt == "/":
            end = src.find("\n", i)
            end = n if end < 0 else end
            out.append(blank(src[i:end]))
            i = end
        elif ch == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif ch in "rb" and re.match(r"(?:br|r)#*\"", src[i:i + 260]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r"(?:br|r)(#*)\"", src[i:])
            hashes = m.group(1)
            close = '"' + hashes
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(src[i:j]))
            i = j
        elif ch == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(blank(src[i:j + 1]))
            i = j + 1
        elif ch == "'":
            # A char literal ('x', '\n', '\u{1F600}'); otherwise a lifetime or label.
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", src[i:i + 12])
            if m:
                out.append(blank(m.group(0)))
                i += m.end()
            else:
                out.append(ch)
                i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# ---------------------------------------------------------------------------
# Module tree of one crate root.


@dataclass
class SourceFile:
    path: str  # repository-relative
    module: tuple[str, ...]  # module path from the crate root
    test_only: bool
    code: str = ""
    # Names of the items it defines, and its `pub use` re-exports (name -> the
    # path it re-exports, globs as paths of modules), so that a path through a
    # re-export leads to the file that defines the item.
    defined: set[str] = field(default_factory=set)
    named_reexports: dict[str, list[str]] = field(default_factory=dict)
    glob_reexports: list[list[str]] = field(default_factory=list)


MOD_DECL = re.compile(r"\bmod\s+(?:r#)?([A-Za-z_]\w*)\s*([;{])")
ATTR_BEFORE = re.compile(r"((?:#\s*\[[^\]]*\]\s*)*)(?:pub\s*(?:\([^)]*\))?\s*)?$")


def attrs_before(code: str, pos: int) -> str:
    """The attributes written right before the item starting at `pos`."""
    m = ATTR_BEFORE.search(code[max(0, pos - 400):pos])
    return m.group(1) if m else ""


def is_cfg_test(attrs: str) -> bool:
    return re.search(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", attrs) is not None


def path_attr(raw_attrs: str) -> str | None:
    m = re.search(r"#\s*\[\s*path\s*=\s*\"([^\"]+)\"\s*\]", raw_attrs)
    return m.group(1) if m else None


class Crate:
    def __init__(self, name: str, root_file: str):
        self.name = name
        self.root_file = root_file
        self.files: dict[str, SourceFile] = {}
        self.by_module: dict[tuple[str, ...], str] = {}
        # Every module (file or inline) and its child module names.
        self.module_children: dict[tuple[str, ...], set[str]] = {}
        self._load(root_file, (), False, is_mod_rs=True)

    def _load(self, rel: str, module: tuple[str, ...], test_only: bool, is_mod_rs: bool) -> None:
        if rel in self.files:
            return
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            raw = f.read()
        code = strip_code(raw)
        sf = SourceFile(rel, module, test_only, code)
        sf.defined = set(re.findall(r"\b(?:fn|struct|enum|union|trait|type|const|static|mod)\s+(?:r#)?([A-Za-z_]\w*)", code))
        sf.defined |= set(re.findall(r"\bmacro_rules!\s*([A-Za-z_]\w*)", code))
        for m in re.finditer(r"\bpub\s*(?:\([^)]*\))?\s*use\s+([^;]*);", code):
            for segs, alias, glob in expand_use_tree_full(m.group(1), []):
                if glob:
                    sf.glob_reexports.append(segs)
                elif segs:
                    sf.named_reexports[alias or segs[-1]] = segs
        self.files[rel] = sf
        self.by_module[module] = rel
        self.module_children.setdefault(module, set())
        # The directory where this file's child module files live.
        here = os.path.dirname(rel)
        if is_mod_rs:
            child_dir = here
        else:
            child_dir = os.path.join(here, os.path.splitext(os.path.basename(rel))[0])
        # Walk the declarations with a stack of inline modules.
        stack: list[tuple[str | None, bool]] = []  # (inline module name or None for a plain brace, test)
        for m in re.finditer(r"\bmod\s+(?:r#)?([A-Za-z_]\w*)\s*([;{])|[{}]", code):
            tok = m.group(0)
            inline = tuple(name for name, _ in stack if name is not None)
            in_test = test_only or any(t for _, t in stack)
            if tok == "{":
                stack.append((None, False))
                continue
            if tok == "}":
                if stack:
                    stack.pop()
                continue
            name, end = m.group(1), m.group(2)
            # Raw text (strings intact) for the #[path = ".."] attribute.
            attrs = attrs_before(code, m.start())
            # strip_code keeps offsets, so the raw text at the same place has the strings.
            raw_attrs = raw[m.start() - len(attrs):m.start()]
            test = in_test or is_cfg_test(attrs)
            self.module_children.setdefault(module + inline, set()).add(name)
            if end == "{":
                stack.append((name, is_cfg_test(attrs)))
                self.module_children.setdefault(module + inline + (name,), set())
                continue
            explicit = path_attr(raw_attrs)
            if explicit is not None:
                base = here if not inline else os.path.join(child_dir, *inline)
                candidates = [os.path.normpath(os.path.join(base, explicit))]
            else:
                sub = os.path.join(child_dir, *inline)
                candidates = [os.path.join(sub, name + ".rs"), os.path.join(sub, name, "mod.rs")]
            for cand in candidates:
                if os.path.isfile(os.path.join(REPO, cand)):
                    self._load(cand, module + inline + (name,), test, is_mod_rs=cand.endswith("mod.rs") and explicit is None)
                    break
            else:
                raise SystemExit(f"check-module-cycles: {rel}:{line_of(code, m.start())}: no file for `mod {name};` (tried {', '.join(candidates)})")

    def file_for(self, path: tuple[str, ...]) -> str | None:
        """The file that defines what `path` names: the nearest enclosing file
        module, or, when the next name is re-exported there, where it comes from."""
        for k in range(len(path), -1, -1):
            f = self.by_module.get(path[:k])
            if f is None:
                continue
            if k == len(path):
                return f
            return self._locate(path[:k], path[k:], 0) or f
        return None

    def _locate(self, module: tuple[str, ...], rest: tuple[str, ...], depth: int) -> str | None:
        """The file defining `rest[0]` as seen from file module `module`
        (following `pub use`), or None when that module does not provide it."""
        f = self.by_module.get(module)
        if f is None or depth > 8:
            return None
        sf, name = self.files[f], rest[0]
        if name in self.module_children.get(module, set()):
            child = module + (name,)
            if child not in self.by_module:
                return f  # an inline module of this file
            return self._locate(child, rest[1:], depth + 1) or self.by_module[child] if len(rest) > 1 else self.by_module[child]
        if name in sf.defined:
            return f
        target = sf.named_reexports.get(name)
        if target is not None:
            resolved = resolve(self, module, target)
            return self.file_for(resolved + rest[1:]) if resolved is not None else f
        for glob in sf.glob_reexports:
            resolved = resolve(self, module, glob)
            if resolved is not None and resolved in self.by_module:
                found = self._locate(resolved, rest, depth + 1)
                if found is not None:
                    return found
        return None


# ---------------------------------------------------------------------------
# Paths in one file.

USE_STMT = re.compile(r"\buse\s+")
INLINE_PATH = re.compile(r"(?<![\w$:])(?:(crate|super|self)|([A-Za-z_]\w*))\s*::\s*")
IDENT = r"(?:r#)?[A-Za-z_]\w*"


def split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_use_tree_full(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None, bool]]:
    """`a::{b as x, c::{d, self}, e::*}` -> ([a,b], x, False), ([a,c,d], None, False),
    ([a,c], None, False), ([a,e], None, True): path, alias, glob."""
    tree = tree.strip()
    alias = None
    m = re.search(r"\s+as\s+(\w+)\s*$", tree)
    if m:
        alias, tree = m.group(1), tree[:m.start()]
    if not tree:
        return []
    brace = tree.find("{")
    if brace < 0:
        segs = [s.strip() for s in tree.split("::") if s.strip()]
        glob = bool(segs) and segs[-1] == "*"
        if glob:
            segs = segs[:-1]
        if segs and segs[-1] == "self" and (prefix or len(segs) > 1):
            segs = segs[:-1]
        return [(prefix + segs, alias, glob)]
    head = [s.strip() for s in tree[:brace].split("::") if s.strip()]
    inner = tree[brace + 1:tree.rfind("}")]
    out = []
    for part in split_top(inner):
        out.extend(expand_use_tree_full(part, prefix + head))
    return out


def expand_use_tree(tree: str, prefix: list[str]) -> list[list[str]]:
    return [segs for segs, _, _ in expand_use_tree_full(tree, prefix)]


def resolve(crate: Crate, current: tuple[str, ...], segs: list[str]) -> tuple[str, ...] | None:
    """The module path `segs` names from module `current`, or None when it leaves the crate."""
    if not segs:
        return None
    segs = [s[2:] if s.startswith("r#") else s for s in segs]
    first = segs[0]
    if first == "crate":
        base, rest = (), segs[1:]
    elif first in ("super", "self"):
        base, rest = current, segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
    elif first in crate.module_children.get(current, set()):
        base, rest = current, segs
    else:
        return None  # another crate, std, or a name imported by an earlier `use`
    return base + tuple(rest)


@dataclass
class Edge:
    src: str
    dst: str
    line: int


def file_edges(crate: Crate, sf: SourceFile) -> list[Edge]:
    code = sf.code
    edges: dict[str, Edge] = {}

    def add(target_module: tuple[str, ...] | None, pos: int) -> None:
        if target_module is None:
            return
        dst = crate.file_for(target_module)
        if dst is None or dst == sf.path or crate.files[dst].test_only:
            return
        edges.setdefault(dst, Edge(sf.path, dst, line_of(code, pos)))

    # Current inline module at each position: walk braces and `mod x {`.
    events = []
    for m in re.finditer(r"\bmod\s+(?:r#)?([A-Za-z_]\w*)\s*\{|[{}]|\buse\s+|(?<![\w$:])(?:crate|super|self|[A-Za-z_]\w*)\s*::", code):
        events.append(m)
    stack: list[tuple[str | None, bool]] = []
    skip_until = -1
    for m in events:
        if m.start() < skip_until:
            continue
        tok = m.group(0)
        inline = tuple(name for name, _ in stack if name is not None)
        current = sf.module + inline
        in_test = sf.test_only or any(t for _, t in stack)
        if tok == "{":
            stack.append((None, False))
        elif tok == "}":
            if stack:
                stack.pop()
        elif tok.startswith("mod"):
            stack.append((m.group(1), is_cfg_test(attrs_before(code, m.start()))))
        elif tok.startswith("use"):
            end = code.find(";", m.end())
            end = len(code) if end < 0 else end
            skip_until = end
            if in_test or is_cfg_test(attrs_before(code, m.start())):
                continue
            # A re-export forwards names and is followed by whoever uses them
            # (Crate._locate), so `mod.rs` re-exporting a child is no edge.
            if re.search(r"\bpub\s*(?:\([^)]*\))?\s*$", code[max(0, m.start() - 60):m.start()]):
                continue
            tree = code[m.end():end]
            for segs in expand_use_tree(tree, []):
                add(resolve(crate, current, segs), m.start())
        else:
            if in_test:
                continue
            pm = re.match(rf"((?:{IDENT}\s*::\s*)+{IDENT})", code[m.start():m.start() + 400])
            if not pm:
                continue
            segs = [s.strip() for s in pm.group(1).split("::")]
            # `pub(in crate::x)` names a scope, not an item.
            if re.search(r"\bin\s*$", code[max(0, m.start() - 8):m.start()]):
                continue
            add(resolve(crate, current, segs), m.start())
    return list(edges.values())


# ---------------------------------------------------------------------------
# Circles.


def strongly_connected(nodes: list[str], adj: dict[str, list[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        # Iterative Tarjan.
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            succ = adj.get(v, [])
            while i < len(succ):
                w = succ[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def crate_roots() -> list[tuple[str, str]]:
    with open(os.path.join(REPO, "Cargo.toml"), encoding="utf-8") as f:
        manifest = f.read()
    m = re.search(r"members\s*=\s*\[(.*?)\]", manifest, re.S)
    if not m:
        raise SystemExit("check-module-cycles: no [workspace] members in Cargo.toml")
    members = re.findall(r"\"([^\"]+)\"", m.group(1))
    roots = []
    for member in members:
        for rel in ("src/lib.rs", "src/main.rs"):
            if os.path.isfile(os.path.join(REPO, member, rel)):
                roots.append((f"{member} ({os.path.basename(rel)})", os.path.join(member, rel)))
        bindir = os.path.join(REPO, member, "src", "bin")
        if os.path.isdir(bindir):
            for entry in sorted(os.listdir(bindir)):
                if entry.endswith(".rs"):
                    roots.append((f"{member} (bin/{entry})", os.path.join(member, "src", "bin", entry)))
    return roots


def read_allowlist(path: str) -> list[tuple[int, frozenset[str]]]:
    if not path or not os.path.exists(path):
        return []
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            files = line.split("#", 1)[0].split()
            if files:
                entries.append((lineno, frozenset(files)))
    return entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allowlist", default=DEFAULT_ALLOWLIST)
    ap.add_argument("--write-allowlist", action="store_true")
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()

    circles: list[tuple[str, list[str], list[Edge]]] = []
    for name, root in crate_roots():
        crate = Crate(name, root)
        adj: dict[str, list[str]] = {}
        all_edges: list[Edge] = []
        for sf in crate.files.values():
            if sf.test_only:
                continue
            es = file_edges(crate, sf)
            all_edges.extend(es)
            adj[sf.path] = sorted(e.dst for e in es)
        for comp in strongly_connected(sorted(adj), adj):
            members = set(comp)
            inner = sorted((e for e in all_edges if e.src in members and e.dst in members), key=lambda e: (e.src, e.dst))
            circles.append((name, comp, inner))

    if args.write_allowlist:
        with open(args.allowlist, "w", encoding="utf-8") as f:
            f.write("# File-level import circles that exist today (hack/check-module-cycles.py).\n")
            f.write("# One circle a line; remove or shorten a line when its circle goes. Do not add lines:\n")
            f.write("# a new circle is a layering fault to fix, not to allow.\n")
            for name, comp, _ in circles:
                f.write(f"# {name}: {len(comp)} files\n{' '.join(comp)}\n")
        print(f"wrote {len(circles)} circle(s) to {os.path.relpath(args.allowlist, REPO)}")
        return 0

    allow = read_allowlist(args.allowlist)
    used: set[int] = set()
    failures = 0
    for name, comp, inner in circles:
        covering = [lineno for lineno, files in allow if set(comp) <= files]
        used.update(covering)
        status = f"allowed (allowlist line {covering[0]})" if covering else "NEW"
        if not covering:
            failures += 1
        print(f"{name}: circle of {len(comp)} files, {status}")
        for e in inner:
            print(f"  {e.src}:{e.line} -> {e.dst}")
    in_circles = {f for _, comp, _ in circles for f in comp}
    stale = [(lineno, files) for lineno, files in allow if lineno not in used or not files <= in_circles]
    for lineno, files in stale:
        gone = sorted(files - in_circles)
        if lineno not in used:
            print(f"allowlist line {lineno}: no longer a circle ({len(files)} files); remove it")
        else:
            print(f"allowlist line {lineno}: {len(gone)} file(s) no longer in a circle, shorten it: {' '.join(gone)}")
    print(f"{len(circles)} circle(s), {failures} not allowed, {len(stale)} stale allowlist line(s)")
    if failures:
        return 1
    if stale and args.strict:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
