"""bench/gpu/wheel_closure.py, on wheels made here: what the GPU machine would lack is named."""

import subprocess
import sys
import zipfile

from conftest import REPO

SCRIPT = REPO / "bench" / "gpu" / "wheel_closure.py"


def wheel(folder, name, version, *requires):
    path = folder / ("%s-%s-py3-none-any.whl" % (name.replace("-", "_"), version))
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    lines += ["Requires-Dist: " + r for r in requires]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("%s-%s.dist-info/METADATA" % (name.replace("-", "_"), version),
                         "\n".join(lines) + "\n")
    return path


def closure(folder):
    run = subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True,
                         text=True, timeout=60)
    return run.returncode, run.stdout


def test_requirements_on_the_image_or_among_the_wheels_are_closed(tmp_path):
    wheel(tmp_path, "pydantic", "2.0", "pydantic-core==2.0", "typing-extensions>=4",
          'email-validator>=2; extra == "email"', 'tomli; python_version < "3.11"')
    wheel(tmp_path, "pydantic_core", "2.0", "typing-extensions")
    assert closure(tmp_path) == (0, "2 wheels; closed\n")


def test_a_requirement_neither_there_nor_here_is_named(tmp_path):
    wheel(tmp_path, "pydantic", "2.0", "pydantic-core==2.0", 'colorama; sys_platform == "linux"')
    code, out = closure(tmp_path)
    assert code == 1
    assert "needs pydantic-core==2.0: neither on the image nor among the wheels" in out
    assert "colorama" not in out  # on the image
    assert out.endswith("1 wheels; 1 lacking\n")


def test_two_wheels_of_one_project_are_refused(tmp_path):
    wheel(tmp_path, "av", "17.0")
    wheel(tmp_path, "av", "18.1")
    code, out = closure(tmp_path)
    assert code == 1
    assert out.startswith("two wheels of av: av-17.0-py3-none-any.whl and av-18.1")
