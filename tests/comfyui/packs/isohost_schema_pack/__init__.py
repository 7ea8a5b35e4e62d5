"""A pack written with ComfyUI's class-based node schema (comfy_api.latest: io.ComfyNode, a
ComfyExtension from comfy_entrypoint) instead of NODE_CLASS_MAPPINGS, as ComfyUI's own
comfy_extras are since 0.3.4x. Written for these tests."""

import os

from comfy_api.latest import ComfyExtension, io, ui


class ScaleImage(io.ComfyNode):
    """IMAGE and FLOAT in, IMAGE and STRING out; its UI output says which process ran it and
    which node id it was given as a hidden input."""

    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="ScaleImageIsohostSchema",
            display_name="Scale image (isohost schema test)",
            category="isohost_test",
            description="Multiplies an image by a factor.",
            inputs=[io.Image.Input("image"),
                    io.Float.Input("factor", default=0.5, min=0.0, max=4.0, step=0.1)],
            outputs=[io.Image.Output(display_name="scaled"), io.String.Output(display_name="pid")],
            hidden=[io.Hidden.unique_id],
            is_output_node=True,
        )

    @classmethod
    def validate_inputs(cls, factor):
        return True if factor != 3.0 else "a factor of 3 is reserved for this test"

    @classmethod
    def fingerprint_inputs(cls, image, factor):
        return float("nan")  # never the same: runs in every prompt

    @classmethod
    def execute(cls, image, factor) -> io.NodeOutput:
        pid = str(os.getpid())
        text = "pid %s, node %s" % (pid, cls.hidden.unique_id)
        return io.NodeOutput((image * factor).clamp(0.0, 1.0), pid, ui=ui.PreviewText(text))


class SchemaExtension(ComfyExtension):
    async def get_node_list(self):
        return [ScaleImage]


async def comfy_entrypoint():
    return SchemaExtension()
