#!/usr/bin/env python3
"""Checks the rules docs/architecture.md states about the source tree.

Usage: scripts/check_layers.py [ROOT]      (ROOT: the checkout, default this one's)

The part graph is written once, in docs/architecture.md's "The part graph"
block: one line per part, `PART -> PART PART ...`, the parts it may include
(`#include "..."`). A part is lib, passes, tools, include/ppc, runtime (the
files directly in runtime/: the public API's implementation) or runtime/X.
Checked:
  - every #include between two parts is an edge of the graph, and every
    edge of the graph is used (the doc and the code agree);
  - include/ppc includes nothing of the implementation and no LLVM header;
  - in runtime/ and lib/, no environment is read (getenv) and no PPC_TEST_
    knob is named outside runtime/link/LaunchEnv.{h,cpp}, where every knob is
    read;
  - no production source file (lib, passes, runtime, tools, include) is
    over 900 lines;
  - runtime/ names no flag: no string literal or comment quotes "--name"
    (the runtime names options by optionName(), lib/OptionName.h);
  - at most MAX_LONG_FUNCTIONS functions of the production tree are over
    MAX_FUNCTION_LINES lines, from the line that starts a definition at
    the left margin to its closing brace there (the pickle opcode switch
    is one of them).
Prints one `error:` line per violation and exits 1, or prints a summary and
exits 0. tests/cli/test_layers.py runs it in CI.
"""
import os
import re
import sys

PARTS_DIRS = ("lib", "passes", "runtime", "tools", "include")
SOURCES = (".h", ".cpp", ".def", ".inc")
MAX_LINES = 900
MAX_FUNCTION_LINES = 100
MAX_LONG_FUNCTIONS = 3
FLAG_LITERAL = re.compile(r'"--[a-z]')
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
# A definition's first line: at the left margin, not a preprocessor line,
# comment, access label or type/namespace declaration.
NOT_A_FUNCTION = re.compile(r"^(#|//|/\*|\*|namespace\b|class\b|struct\b|enum\b|union\b|"
                            r"using\b|typedef\b|template\b|extern\b|static_assert\b|\}|\{|"
                            r"public:|private:|protected:)")
ENV_HOME = ("runtime/link/LaunchEnv.h", "runtime/link/LaunchEnv.cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
GRAPH_BEGIN = "<!-- part graph: checked by scripts/check_layers.py -->"


def part_of(path):
    """The part a repository path belongs to, or None (not a source part)."""
    p = path.split("/")
    if p[0] == "runtime":
        return "runtime/" + p[1] if len(p) > 2 else "runtime"
    if p[0] == "include":
        return "include/ppc"
    if p[0] in ("lib", "passes", "tools"):
        return p[0]
    return None


def read_graph(root):
    """The edges the doc declares: {part: set of parts}."""
    text = open(os.path.join(root, "docs", "architecture.md")).read()
    if GRAPH_BEGIN not in text:
        raise SystemExit("error: docs/architecture.md has no part graph block (%s)" % GRAPH_BEGIN)
    block = text.split(GRAPH_BEGIN, 1)[1].split("```", 2)[1]
    graph = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        source, _, targets = line.partition("->")
        graph.setdefault(source.strip(), set()).update(targets.split())
    return graph


def sources(root):
    for top in PARTS_DIRS:
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(files):
                if name.endswith(SOURCES):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root).replace(os.sep, "/"), full


def long_functions(path, lines):
    """(where, name, length) of each function definition in `lines` over
    MAX_FUNCTION_LINES lines, as clang-format lays them out: a definition
    starts at the left margin (or two spaces in, a member defined in its
    class) on a line that opens a parenthesis, and runs, by its braces, to
    the brace that closes its body; lambdas count in their function."""
    found, start, depth = [], None, 0
    for number, line in enumerate(lines, 1):
        code = STRING.sub('""', line.split("//", 1)[0])
        if start is None:
            m = re.match(r"^(  )?\S", line)
            if not m or NOT_A_FUNCTION.match(line.strip()) or "(" not in code \
                    or code.rstrip().endswith(";"):
                continue
            start, depth, opened = number, 0, False
        elif not opened and code.rstrip().endswith(";") and depth == 0:
            start = None  # a declaration over several lines
            continue
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth <= 0:
            length = number - start + 1
            if length > MAX_FUNCTION_LINES:
                name = re.search(r"([\w:~]+)\s*\(", lines[start - 1])
                found.append(("%s:%d" % (path, start), name.group(1) if name else "?", length))
            start = None
    return found


def check(root):
    graph = read_graph(root)
    errors, used, long_ones = [], set(), []
    for path, full in sources(root):
        source = part_of(path)
        with open(full, errors="replace") as f:
            lines = f.read().splitlines()
        if len(lines) > MAX_LINES and not path.endswith(".def"):
            errors.append("%s has %d lines, over the limit of %d" % (path, len(lines), MAX_LINES))
        if path.endswith(".cpp"):
            long_ones += long_functions(path, lines)
        for number, line in enumerate(lines, 1):
            where = "%s:%d" % (path, number)
            m = INCLUDE.match(line)
            if m:
                target_path = m.group(1)
                if source == "include/ppc":
                    if not target_path.startswith("ppc/") or target_path.startswith("llvm/"):
                        errors.append('%s: the public API includes "%s"' % (where, target_path))
                    continue
                if target_path.startswith("ppc/"):
                    target_path = "include/" + target_path
                target = part_of(target_path)
                if target and target != source:
                    if target not in graph.get(source, ()):
                        errors.append('%s: %s includes "%s" (%s), not an edge of the part '
                                      "graph in docs/architecture.md" %
                                      (where, source, m.group(1), target))
                    used.add((source, target))
            code = line.split("//", 1)[0]
            if path.startswith(("runtime/", "lib/")) and path not in ENV_HOME:
                if "getenv" in code:
                    errors.append("%s: reads the environment outside runtime/link/LaunchEnv "
                                  "(every knob is read there)" % where)
                if "PPC_TEST_" in line:
                    errors.append("%s: names a PPC_TEST_ knob outside runtime/link/LaunchEnv" %
                                  where)
            if path.startswith("runtime/") and FLAG_LITERAL.search(line):
                errors.append("%s: names a flag in the runtime (name options by "
                              "optionName(), lib/OptionName.h)" % where)
    if len(long_ones) > MAX_LONG_FUNCTIONS:
        for where, name, length in long_ones:
            errors.append("%s: %s has %d lines; %d functions are over %d lines, more than the "
                          "%d allowed" % (where, name, length, len(long_ones),
                                          MAX_FUNCTION_LINES, MAX_LONG_FUNCTIONS))
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if (source, target) not in used:
                errors.append("docs/architecture.md: the part graph's edge %s -> %s is used by "
                              "no #include" % (source, target))
    return errors, graph


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    errors, graph = check(root)
    for e in errors:
        print("error: " + e)
    if errors:
        return 1
    print("check_layers: %d parts, %d edges, every include an edge of the graph" %
          (len(graph), sum(len(t) for t in graph.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
