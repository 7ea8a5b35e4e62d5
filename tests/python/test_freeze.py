"""Torch's import-time objects frozen out of the collector's lists (python/isohost_worker/
freeze.py), in real workers whose interpreter has no torch: a stand-in `torch` package on the
worker's path, with the classes sleep's walk looks for."""

import textwrap

from conftest import FIXTURES

STAND_IN = textwrap.dedent("""
    import sys
    import types


    class Tensor:
        pass


    class UntypedStorage:
        pass


    storage = types.ModuleType("torch.storage")
    storage.TypedStorage = type("TypedStorage", (), {})
    sys.modules["torch.storage"] = storage
    cuda = types.ModuleType("torch.cuda")
    cuda.CUDAGraph = type("CUDAGraph", (), {})
    # A tensor alive when the import ends: the walk must still see it once it is frozen.
    ALIVE = Tensor()
""")


def package(root, source):
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(source)
    return str(root)


def test_torchs_import_freezes_the_objects_alive_then_and_remembers_its_tensors(spawn, tmp_path):
    worker = spawn(paths=(package(tmp_path, STAND_IN), str(FIXTURES)))
    before = worker.value("isohost_freeze_funcs:state")
    assert before["frozen"] == 0 and "_TorchFinder" in before["finders"]
    frozen = worker.value("isohost_freeze_funcs:import_torch")
    assert frozen > 1000
    after = worker.value("isohost_freeze_funcs:state")
    assert after["remembered"] == ["Tensor"]
    assert "_TorchFinder" not in after["finders"]
    # Imported once: a second import statement freezes nothing more (and frozen objects that
    # lose their last reference are still freed).
    assert worker.value("isohost_freeze_funcs:import_torch") <= frozen


def test_a_failed_torch_import_freezes_nothing_and_the_next_one_does(spawn, tmp_path):
    broken = package(tmp_path / "broken", "raise ImportError('torch cannot load here')\n")
    working = package(tmp_path / "working", STAND_IN)
    worker = spawn(paths=(broken, working, str(FIXTURES)))
    error = worker.error("isohost_freeze_funcs:import_torch")
    assert error["type"] == "ImportError" and "torch cannot load here" in error["message"]
    assert worker.value("isohost_freeze_funcs:state")["frozen"] == 0
    worker.value("isohost_freeze_funcs:forget_path", broken)
    assert worker.value("isohost_freeze_funcs:import_torch") > 1000
    assert worker.value("isohost_freeze_funcs:state")["remembered"] == ["Tensor"]
