"""The module table of vramtrace's start-up hook (sitecustomize.py): each module the program
called, by an id (its M line, written into the shared Marks) and its qualified name; a root's
parameters and buffers handed to the named storages when it is first met."""
import sys
import weakref


class Modules:
    def __init__(self, marks, storages):
        self.marks, self.storages = marks, storages
        self.modules = {}        # id(module) -> (mid, weakref)
        self.module_names = {}   # mid -> qualified name, as its M line gives it

    def module_id(self, module):
        entry = self.modules.get(id(module))
        if entry is not None and entry[1]() is module:
            return entry[0]
        # A module called for the first time: a root (called from outside any module) names
        # its whole tree; one called inside another is named under the caller.
        # (A module made while a forward runs, as a loss made inside a model's forward.)
        stack = self.marks.stack
        if stack:
            parent = self.module_names.get(stack[-1][0], "")
            return self.add_module(module, (parent + "." if parent else "") +
                                   type(module).__name__)
        root_prefix = ("" if not any(r[1] for r in self.storages.roots)
                       else type(module).__name__ + ".")
        for name, m in list(module.named_modules()):
            if id(m) not in self.modules or self.modules[id(m)][1]() is not m:
                self.add_module(m, (root_prefix + name) if name else type(module).__name__)
        self.storages.add_root(module,
                               [(root_prefix + n, p) for n, p in module.named_parameters()],
                               [(root_prefix + n, b) for n, b in module.named_buffers()])
        return self.modules[id(module)][0]

    def add_module(self, module, name):
        marks = self.marks
        clean = marks.clean
        mid = len(marks.module_lines) + 1
        self.modules[id(module)] = (mid, weakref.ref(module))
        self.module_names[mid] = name
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        marks.module_lines.append("M\t%d\t%s\t%s\t%s\t%d\n" % (
            mid, clean(name), clean(type(module).__name__),
            clean(code.co_filename if code else ""), code.co_firstlineno if code else 0))
        return mid

    def ids(self):
        """The M id of a module (0: none), as the predicted requests name it."""
        modules = self.modules

        def module_ids(m):
            entry = modules.get(id(m))
            return entry[0] if entry is not None and entry[1]() is m else 0
        return module_ids

    def running(self):
        """The modules whose forward is on the Python stack now, outermost first (an OOM
        inside a forward whose module calls were not traced)."""
        out = []
        f = sys._getframe(2)
        while f is not None:
            if f.f_code.co_name == "forward":
                m = f.f_locals.get("self")
                entry = self.modules.get(id(m)) if m is not None else None
                if entry is not None and entry[1]() is m and (not out or out[-1] != entry[0]):
                    out.append(entry[0])
            f = f.f_back
        out.reverse()
        return out
