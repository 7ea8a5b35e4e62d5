"""The C++ layers include only downward (README, "Layout"): each folder of src/ may name only
the folders listed for it here. A new include that points up, or sideways into a folder not
listed, fails here with the file and line."""

import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
BOTTOM = {"error"}
ALLOWED = {
    "error": set(),
    "wire": BOTTOM,
    "probe": BOTTOM,
    "memory": BOTTOM,
    "proc": BOTTOM | {"probe", "wire"},
    "worker": BOTTOM | {"wire", "proc", "probe"},
    "pool": BOTTOM | {"worker", "memory", "wire", "proc", "probe"},
    "control": BOTTOM | {"pool", "worker", "memory", "wire", "proc", "probe"},
    # The Python extension sits beside the control layer, over the pool.
    "binding": BOTTOM | {"control", "pool", "worker", "memory", "wire", "proc", "probe"},
    "cli": BOTTOM | {"control", "pool", "worker", "memory", "wire", "proc", "probe"},
    # isohost-web reads the pool only through the control socket: never the pool itself.
    "web": BOTTOM | {"control", "wire"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def includes_of(folder):
    for path in sorted((SRC / folder).rglob("*.[ch]pp")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if match and match.group(1) != folder:
                yield f"{path.relative_to(SRC)}:{number}", match.group(1)


def test_every_folder_of_src_has_its_place():
    folders = {p.name for p in SRC.iterdir() if p.is_dir()}
    assert folders == set(ALLOWED), "a folder of src/ without a layer here: " + str(
        folders ^ set(ALLOWED))


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_includes_point_downward(folder):
    wrong = [f"{where} includes {to}/" for where, to in includes_of(folder)
             if to not in ALLOWED[folder]]
    assert not wrong, f"{folder}/ may include only {sorted(ALLOWED[folder])}:\n" + "\n".join(wrong)


def test_the_check_sees_includes():
    # A check that finds nothing would pass whatever the code did.
    assert any(to == "worker" for _, to in includes_of("pool"))
