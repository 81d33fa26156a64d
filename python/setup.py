"""Builds the tirl wheel: pure Python plus the prebuilt libtirl.so (and libtirl_cuda.so
when it was built) copied in at build time; no compiler runs.

The library is taken from, in order: $TIRL_LIBRARY (a path to libtirl.so), the tirl
checkout this folder sits in (build/Release, then prebuilds/linux-x64), or the copy an
sdist already carries in tirl/lib. There is no pyproject.toml on purpose: without one,
``pip install ./python`` builds with the setuptools and wheel already installed (Debian's),
offline, instead of fetching them into an isolated environment.
"""

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
LIBRARIES = ("libtirl.so", "libtirl_cuda.so")


def library_folder() -> Path:
    explicit = os.environ.get("TIRL_LIBRARY")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SystemExit(f"TIRL_LIBRARY={explicit} is not a file")
        return path.parent
    for folder in (HERE.parent / "build" / "Release", HERE.parent / "prebuilds" / "linux-x64",
                   HERE / "tirl" / "lib"):
        if (folder / "libtirl.so").is_file():
            return folder
    raise SystemExit(
        "libtirl.so not found: run 'npm run build' in the tirl checkout (build/Release) or keep "
        "its prebuilds/linux-x64, or set TIRL_LIBRARY to a libtirl.so")


def copy_libraries(destination: Path) -> None:
    source = library_folder()
    destination.mkdir(parents=True, exist_ok=True)
    for name in LIBRARIES:
        if (source / name).is_file() and (source / name).resolve() != (destination / name).resolve():
            shutil.copy2(source / name, destination / name)
    print(f"tirl: shipping {', '.join(n for n in LIBRARIES if (destination / n).is_file())} from {source}")


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        copy_libraries(Path(self.build_lib) / "tirl" / "lib")


class SdistWithLibrary(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy_libraries(Path(base_dir) / "tirl" / "lib")


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildPyWithLibrary, "sdist": SdistWithLibrary},
    distclass=BinaryDistribution,
)
