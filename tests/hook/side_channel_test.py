#!/usr/bin/env python3
"""Every line the start-up hook (python/vramtrace/_hook/sitecustomize.py, and its parts
_vramtrace_*.py beside it) writes is one that
common/side_channel.h declares, with its fields in the declared order and of the declared types,
and every line declared is written; the hook's mark constants are the table's, in its order.
The collector's reader is made from the same table (collector/ingest/torch_trace.cpp), so that what one
side writes the other reads. Read from the sources alone: nothing of the hook runs."""
import ast
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TABLE = os.path.join(ROOT, "common", "side_channel.h")
HOOK = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "python", "vramtrace", "_hook",
                                                        "sitecustomize.py")

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def macro(text, name):
    """The body of `#define NAME(...)`, its continuation lines joined, its comments removed."""
    m = re.search(r"#define %s\([^)]*\)((?:[^\n]*\\\n)*[^\n]*)" % name, text)
    if m is None:
        sys.exit("side_channel_test: no %s in %s" % (name, TABLE))
    body = m.group(1).replace("\\\n", " ")
    return re.sub(r"/\*.*?\*/", " ", body)


def fields_of(body):
    """[(kind, name)] of F(kind, name) and T(name, keep) (kind Text)."""
    out = []
    for f, a, b in re.findall(r"\b([FT])\(\s*(\w+)\s*,\s*(\w+)\s*\)", body):
        out.append((a, b) if f == "F" else ("Text", a))
    return out


source = open(TABLE, encoding="utf-8").read()
rows = {}
for m in re.finditer(r"\bX\(\s*(\w+)\s*,\s*\"([^\"]+)\"\s*,\s*(\d+)\s*,\s*(\w+)\s*,\s*\"[^\"]*\"\s*,"
                     r"(.*?)\)\s*(?=\bX\(|$)", macro(source, "VRAMTRACE_SIDE_LINES")):
    rows[m.group(2)] = (m.group(1), fields_of(m.group(5)))
header = fields_of(macro(source, "VRAMTRACE_SIDE_HEADER"))
marks = re.findall(r"\bM\(\s*\w+\s*,\s*(\w+)\s*\)", macro(source, "VRAMTRACE_SIDE_MARKS"))
magic = re.search(r'kMagic\[\] = "([^"]+)"', source).group(1)
version = int(re.search(r"kVersion = (\d+)", source).group(1))
check(len(rows) >= 16, "the table's rows were not all found: %s" % sorted(rows))
check(len(header) == 4 and marks, "the table's header or marks were not found")

# What a field of a format string is: a number (%d, or a literal one), a float, or text.
def written_type(part):
    if re.fullmatch(r"%d|\d+", part):
        return "int"
    if re.fullmatch(r"%\.?\d*[gf]", part):
        return "real"
    if "%s" in part:
        return "text"
    return "literal " + part


ACCEPTS = {"U64": {"int"}, "Dev": {"int"}, "Lead": {"int"}, "Real": {"real"},
           "MaybeU64": {"int", "text"}, "Ids": {"text"}, "Where": {"text"}, "Text": {"text"}}


def check_fields(where, declared, parts):
    check(len(parts) == len(declared), "%s: %d fields written, %d declared (%s)"
          % (where, len(parts), len(declared), ", ".join(n for _, n in declared)))
    for part, (kind, name) in zip(parts, declared):
        check(written_type(part) in ACCEPTS[kind], "%s: field %s is declared %s, written as %r"
              % (where, name, kind, part))


# The hook's files: sitecustomize.py and its parts beside it (_vramtrace_*.py).
FOLDER = os.path.dirname(HOOK)
FILES = [HOOK] + sorted(os.path.join(FOLDER, f) for f in os.listdir(FOLDER)
                        if f.startswith("_vramtrace_") and f.endswith(".py"))
trees = {os.path.basename(f): ast.parse(open(f, encoding="utf-8").read()) for f in FILES}
nodes = [(name, node) for name, tree in trees.items() for node in ast.walk(tree)]
written = set()
for name, node in nodes:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        continue
    s = node.value
    where = "%s:%d" % (name, node.lineno)
    if s.startswith(magic):
        parts = s.rstrip("\n").split("\t")
        check(parts[0] == magic + str(version), "%s: header %r, the table's is %s%d"
              % (where, parts[0], magic, version))
        check_fields(where + " (header)", header, parts[1:])
        written.add("header")
    elif re.match(r"[A-Z]{1,3}\t.*\n$", s, re.S) or s in ("END\n",) or re.fullmatch(r"[A-Z]{1,3}\n", s):
        parts = s[:-1].split("\t")
        tag = parts[0]
        if tag not in rows:
            check(False, "%s: writes %r lines, which common/side_channel.h does not declare"
                  % (where, tag))
            continue
        check_fields("%s (%s)" % (where, tag), rows[tag][1], parts[1:])
        written.add(tag)
for tag in sorted(set(rows) - written):
    check(False, "the table declares %r lines (%s), which the hook never writes" % (tag, rows[tag][0]))
check("header" in written, "the hook writes no header line")

# The mark constants: `(_MOD, _MOD_END, ...) = range(N)`, the table's order; a K line packs its
# kind in 4 bits (code & 15).
consts = None
for node in (n for tree in trees.values() for n in tree.body):
    if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
            and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "range"):
        consts = [e.id for e in node.targets[0].elts]
        count = node.value.args[0].value
check(consts == marks, "the hook's mark constants %s are not the table's %s" % (consts, marks))
check(consts is not None and count == len(consts), "range(%s) for %s constants"
      % (count if consts else "?", len(consts or [])))
check(len(marks) <= 16, "a K line packs its kind in 4 bits: at most 16 mark kinds")

if failures:
    for f in failures:
        print("FAIL:", f)
    sys.exit(1)
print("side channel: %d kinds of line and %d mark kinds, as the hook writes them" % (len(rows), len(marks)))
