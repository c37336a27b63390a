"""The start-up hook's context is composed of parts around one Marks object
(python/vramtrace/_hook/_vramtrace_context.py): no part inherits another's state, none is handed
the context itself, and every attribute read of a part through its handle (self.marks.now,
marks.stack, context.windows.gap_oom, ...) is one that part has. Read from the sources, so that
a path the stand-in tests never run (a pre-flight's stage on real PyTorch, an OOM between the
sampled windows) cannot read an attribute that moved to another part."""
import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import ROOT, check, finish  # noqa: E402

HOOK = os.path.join(ROOT, "python", "vramtrace", "_hook")
# The name a part is handed under, and its class.
HANDLES = {"marks": "Marks", "trace": "Trace", "storages": "Storages", "modules": "Modules",
           "lines": "Lines", "windows": "Windows", "prediction": "Prediction"}
PARTS = set(HANDLES.values())
# Methods of the containers a part keeps under a handle's name of its own (Windows.windows, a
# list; Modules.modules, a dict; Storages' lines of labels).
CONTAINERS = {"append", "extend", "pop", "get", "clear", "items", "values", "keys"}


def class_attrs(tree):
    """{class name: the names it has: methods, class attributes, self.x it assigns}."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            names |= {t.id for n in node.body if isinstance(n, ast.Assign)
                      for t in n.targets if isinstance(t, ast.Name)}
            for n in ast.walk(node):
                if (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                        and isinstance(n.value, ast.Name) and n.value.id == "self"):
                    names.add(n.attr)
            out[node.name] = names
    return out


def handle_of(node, aliases):
    """The part a name or attribute stands for: self.marks, context.marks, or a local bound to
    one (marks = self.marks; ctx, marks = self, self.marks; a parameter named marks)."""
    if isinstance(node, ast.Attribute) and node.attr in HANDLES and isinstance(
            node.value, ast.Name) and node.value.id in ("self", "context", "ctx"):
        return HANDLES[node.attr]
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return None


def unknown_reads(source, attrs):
    """The reads `part.attr` of `source` whose part has no such attribute, as
    "line: Part.attr"."""
    tree = ast.parse(source)
    bad = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.Lambda)):
            continue
        aliases = {a.arg: HANDLES[a.arg] for a in fn.args.args if a.arg in HANDLES}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign):
                pairs = []
                for t in n.targets:
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple):
                        pairs += zip(t.elts, n.value.elts)
                    else:
                        pairs.append((t, n.value))
                for target, value in pairs:
                    part = handle_of(value, {})
                    if isinstance(target, ast.Name) and part is not None:
                        aliases[target.id] = part
        for n in ast.walk(fn):
            if isinstance(n, ast.Attribute):
                part = handle_of(n.value, aliases)
                if (part is not None and n.attr not in attrs.get(part, ())
                        and n.attr not in CONTAINERS):
                    bad.append("%d: %s.%s" % (n.lineno, part, n.attr))
    return sorted(set(bad))


files = sorted(f for f in os.listdir(HOOK) if f.endswith(".py"))
sources = {f: open(os.path.join(HOOK, f), encoding="utf-8").read() for f in files}
attrs = {}
bases = {}
for f, text in sources.items():
    tree = ast.parse(text)
    attrs.update(class_attrs(tree))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and (node.name in PARTS or node.name == "_Context"):
            bases[node.name] = [ast.unparse(b) for b in node.bases]

check("every part is declared once", sorted(bases), sorted(PARTS | {"_Context"}))
for name in sorted(bases):
    check("%s inherits no part's state" % name, bases[name], [])

# No part is handed the context: its constructor takes parts and functions, never `ctx`.
for f, text in sources.items():
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name in PARTS:
            init = [n for n in node.body if isinstance(n, ast.FunctionDef)
                    and n.name == "__init__"]
            params = [a.arg for a in init[0].args.args[1:]] if init else []
            check("%s is handed parts, not the context" % node.name,
                  [p for p in params if p in ("ctx", "context")], [])

for f, text in sources.items():
    check("%s reads only what each part it is handed has" % f, unknown_reads(text, attrs), [])

# The check itself finds a read of an attribute that moved (here: the stack, which Marks keeps,
# read of the storages).
moved = "class X:\n    def f(self):\n        storages = self.storages\n" \
        "        return storages.stack, self.marks.stack\n"
check("a read of an attribute the part does not have is found", unknown_reads(moved, attrs),
      ["4: Storages.stack"])
finish("the hook's parts")
