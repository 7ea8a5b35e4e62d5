"""A node that waits for a file the test writes: a test holds a prompt between two nodes of
another environment with it, as a slow node in between would (tests/comfyui/test_kept_workers.py).
Written for these tests."""

import os
import time


class WaitForFile:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "wait"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"note": ("STRING", {"forceInput": True}),
                             "path": ("STRING", {"default": ""}),
                             "timeout": ("FLOAT", {"default": 120.0})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return float("nan")

    def wait(self, note, path, timeout):
        import comfy.model_management

        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            comfy.model_management.throw_exception_if_processing_interrupted()
            if time.monotonic() > deadline:
                raise TimeoutError("no file %s within %g s" % (path, timeout))
            time.sleep(0.01)
        return (note,)


NODE_CLASS_MAPPINGS = {"WaitForFileIsohost": WaitForFile}
