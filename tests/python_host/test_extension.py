"""A package whose compiled part was built for another interpreter, or not built, says so and
how to build it, where Python alone would blame a circular import."""

import shutil
import subprocess
import sys

import pytest

from conftest import BUILD_PYTHON, PYTHON


def import_in_copy(tmp_path, rename):
    """stderr of importing a copy of the built package whose extension `rename` renames (to
    None: removes)."""
    package = tmp_path / "isohost"
    shutil.copytree(BUILD_PYTHON / "isohost", package)
    (extension,) = package.glob("_isohost*.so")
    if rename is None:
        extension.unlink()
    else:
        extension.rename(package / rename)
    result = subprocess.run([PYTHON, "-c", "import isohost"], capture_output=True, text=True,
                            env={"PYTHONPATH": "%s:%s" % (tmp_path, BUILD_PYTHON)}, timeout=60)
    assert result.returncode != 0
    return result.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="extension suffixes of Linux")
def test_an_extension_built_for_another_python_is_named_with_the_command_that_builds_it(tmp_path):
    stderr = import_in_copy(tmp_path, "_isohost.cpython-39-x86_64-linux-gnu.so")
    assert "was built for another Python (_isohost.cpython-39-x86_64-linux-gnu.so)" in stderr
    assert "make build CMAKE_FLAGS=-DISOHOST_PYTHON=%s" % PYTHON in stderr
    assert "circular import" not in stderr.splitlines()[-1]


def test_a_package_without_its_extension_says_so(tmp_path):
    stderr = import_in_copy(tmp_path, None)
    assert "has no compiled extension (_isohost)" in stderr.splitlines()[-1]
    assert "-DISOHOST_PYTHON=" in stderr.splitlines()[-1]
