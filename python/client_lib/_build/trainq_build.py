"""PEP 517 build backend of client_lib: setuptools' when setuptools can
build a wheel here, else a standard-library one (a pure-Python wheel is a zip
with the package and a .dist-info directory).

Why: ``pip install ./python/client_lib`` on a machine without a package
index cannot fetch setuptools into an isolated build environment, and the
setuptools 65 that Python 3.11 ships cannot build a wheel without the
``wheel`` package. Both paths read pyproject.toml's [project] table."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "client_lib"
TAG = "py3-none-any"


def _setuptools():
    """setuptools' backend if it can build wheels here, else None."""
    try:
        from setuptools import build_meta
        import setuptools
        major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
        if (major, minor) < (70, 1):
            import wheel  # noqa: F401  (older setuptools need it for bdist_wheel)
        return build_meta
    except Exception:
        return None


def _project():
    """name, version, description, requires-python and readme of pyproject.toml
    (a TOML parser is not in the standard library before 3.11; these are
    simple `key = "value"` lines of [project])."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
    out = dict(re.findall(r'^([a-z-]+)\s*=\s*"([^"]*)"\s*$', section, re.M))
    return out


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"], "Summary: " + p.get("description", ""),
             "Requires-Python: " + p.get("requires-python", ">=3")]
    body = ""
    if p.get("readme"):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _dist_info_name():
    p = _project()
    return "%s-%s.dist-info" % (p["name"], p["version"])


def _package_files():
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                full = os.path.join(dirpath, fn)
                yield os.path.relpath(full, ROOT).replace(os.sep, "/"), full


def _write_dist_info(files):
    di = _dist_info_name()
    files[di + "/METADATA"] = _metadata()
    files[di + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: trainq_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()
    files[di + "/top_level.txt"] = (PACKAGE + "\n").encode()
    return di


def _build(wheel_directory, editable):
    p = _project()
    files = {}
    if editable:
        files["__editable__.%s.pth" % p["name"]] = (ROOT + "\n").encode()
    else:
        for arc, full in _package_files():
            with open(full, "rb") as f:
                files[arc] = f.read()
    di = _write_dist_info(files)
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
    record.append(di + "/RECORD,,")
    files[di + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = "%s-%s-%s.whl" % (p["name"], p["version"], TAG)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    return name


# The PEP 517 / PEP 660 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    st = _setuptools()
    if st is not None:
        return st.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    st = _setuptools()
    if st is not None and hasattr(st, "build_editable"):
        return st.build_editable(wheel_directory, config_settings, metadata_directory)
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    st = _setuptools()
    if st is not None:
        return st.build_sdist(sdist_directory, config_settings)
    p = _project()
    top = "%s-%s" % (p["name"], p["version"])
    name = top + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(arc, data):
            info = tarfile.TarInfo(top + "/" + arc)
            info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
            t.addfile(info, io.BytesIO(data))
        add("PKG-INFO", _metadata())
        for arc in ("pyproject.toml", "README.md", "_build/trainq_build.py"):
            with open(os.path.join(ROOT, arc), "rb") as f:
                add(arc, f.read())
        for arc, full in _package_files():
            with open(full, "rb") as f:
                add(arc, f.read())
    return name
