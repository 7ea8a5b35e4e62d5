"""Checks that the wheels in a folder install on the GPU machine on their own: each wheel's
requirements (Requires-Dist, its markers taken for CPython 3.12 on Linux, extras left out) are
on the machine's image (image-packages.txt beside this file) or among the wheels, and no
project has two wheels (pip --no-deps would install both). Usage: wheel_closure.py WHEEL_DIR"""

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.3",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "sys_platform": "linux", "platform_system": "Linux",
                "platform_machine": "x86_64", "os_name": "posix", "extra": ""}


def metadata(wheel):
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(name).decode())


def needs(meta):
    for line in meta.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(_ENVIRONMENT):
            yield canonicalize_name(requirement.name), line


def main(folder):
    image_list = Path(__file__).with_name("image-packages.txt").read_text().splitlines()
    image = {canonicalize_name(n) for n in image_list if n.strip() and not n.startswith("#")}
    wheels = {}
    for wheel in sorted(Path(folder).glob("*.whl")):
        meta = metadata(wheel)
        name = canonicalize_name(meta["Name"])
        if name in wheels:
            print("two wheels of %s: %s and %s" % (name, wheels[name][0].name, wheel.name))
            return 1
        wheels[name] = (wheel, meta)
    lacking = [(wheel.name, line) for wheel, meta in wheels.values()
               for name, line in needs(meta) if name not in image and name not in wheels]
    for wheel_name, line in lacking:
        print("%s needs %s: neither on the image nor among the wheels" % (wheel_name, line))
    print("%d wheels; %s" % (len(wheels), "closed" if not lacking else "%d lacking" % len(lacking)))
    return 1 if lacking else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
