"""An async FUNCTION (API nodes, packs that await a service): ComfyUI runs the prompt's other
nodes while it awaits. This one awaits a file that another node of the prompt writes (ComfyUI's
SaveImage), so it ends only where ComfyUI does so."""

import asyncio
import os
import time


class AwaitOutputFile:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "wait"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"prefix": ("STRING", {"default": "isohost-awaited"}),
                             "timeout": ("FLOAT", {"default": 30.0})}}

    async def wait(self, prefix, timeout):
        import comfy.model_management
        import folder_paths

        folder = folder_paths.get_output_directory()

        def written():
            return any(name.startswith(prefix) for name in os.listdir(folder))

        deadline = time.monotonic() + timeout
        while not written():
            comfy.model_management.throw_exception_if_processing_interrupted()
            if time.monotonic() > deadline:
                raise TimeoutError("no file %s* in %s within %g s: no other node ran while this "
                                   "one awaited" % (prefix, folder, timeout))
            await asyncio.sleep(0.01)
        return {"ui": {"found": [prefix]}, "result": ()}


NODE_CLASS_MAPPINGS = {"AwaitOutputFileIdiomIsohost": AwaitOutputFile}
